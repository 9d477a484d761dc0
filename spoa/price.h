/* price: what a row costs under a model's rate cards (docs/pricing.md). Pure functions;
 * any thread.
 *
 * A row is priced by one card: the one of the tier the provider reported (else the tier
 * the request asked for, else 'default') whose above_tokens is the largest below the
 * row's prompt tokens. Its prompt and completion counts include the classes priced
 * apart (acct-t.h), so each part is taken out of the count it belongs to: a class with
 * tokens and no price leaves the row unpriced, never guessed. */
#ifndef TALLY_PRICE_H
#define TALLY_PRICE_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"
#include "price-t.h"

/* The tier name cards are kept under: "", Anthropic's "standard" and what requests
 * say for no tier in particular ("auto", "standard_only") are "default". */
const char *price_tier_name(const char *tier);

/* The card of tier (any spelling price_tier_name accepts) for a prompt of prompt_tokens
 * (negative: unknown, priced as the smallest band); NULL when the tier has no card for
 * that size. */
const struct price_card *price_pick(const struct price_sheet *s, const char *tier,
                                    int64_t prompt_tokens);

/* The cost of row's reported usage under card c into *cost (micro-dollars, rounded to
 * the nearest). Returns 0, or -1 when a class the row has is not priced (or its counts
 * contradict each other: a part larger than its whole). */
int price_row(const struct price_card *c, const struct acct_row *row, int64_t *cost);

/* The cost of prompt input and completion output tokens under c, rounded to the
 * nearest micro-dollar: what a row's estimate costs (acct_estimate). Returns 0, or -1
 * when c lacks a price one of them needs. */
int price_tokens(const struct price_card *c, int64_t prompt, int64_t completion, int64_t *cost);

#endif
