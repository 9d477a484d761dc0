/* price: what a row costs under a model's rate cards (docs/pricing.md). Pure functions;
 * any thread.
 *
 * A row is priced by one card: the one of the tier the provider reported (else the tier
 * the request asked for, else 'default') whose above_tokens is the largest below the
 * row's prompt tokens. Its prompt and completion counts include the classes priced
 * apart (acct-t.h), so each part is taken out of the count it belongs to.
 *
 * Nothing unpriced is free: a class with tokens and no price on the card is charged at
 * the card's dearest token rate, a web search without a price at
 * PRICE_FALLBACK_WEB_SEARCH, and a tier with no card at the dearest of the model's other
 * tiers' cards; each such class sets its bit in a fallback mask (the row's
 * priced_fallback). Only a card with no token price at all, a model without cards, or
 * counts that contradict each other leave a row unpriced. */
#ifndef TALLY_PRICE_H
#define TALLY_PRICE_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"
#include "price-t.h"

/* What a web search costs on a card that does not price it, in micro-dollars per call:
 * $0.05, the dearest per-call rate the providers list (OpenAI's search previews at
 * $50 per 1000 calls; Anthropic's is $10). */
#define PRICE_FALLBACK_WEB_SEARCH 50000

/* Fallback mask bits: 1 << enum price_class for a class charged at a stated rate, and
 * this for a tier priced by another tier's card. */
#define PRICE_FALLBACK_TIER (1u << PRICE_CLASSES)

/* The tier name cards are kept under: "", Anthropic's "standard" and what requests
 * say for no tier in particular ("auto", "standard_only") are "default". */
const char *price_tier_name(const char *tier);

/* The card of tier (any spelling price_tier_name accepts) for a prompt of prompt_tokens
 * (negative: unknown, priced as the smallest band); NULL when the tier has no card for
 * that size. */
const struct price_card *price_pick(const struct price_sheet *s, const char *tier,
                                    int64_t prompt_tokens);

/* The rate c charges class k at: its price, else (the class unpriced) the stated
 * fallback, which sets k's bit in *fallback; PRICE_UNSET when c has no token price
 * at all. */
int64_t price_rate(const struct price_card *c, enum price_class k, unsigned *fallback);

/* The cost of row's reported usage under card c into *cost (micro-dollars, rounded to
 * the nearest), unpriced classes at price_rate's fallback (their bits added to
 * *fallback). Returns 0, or -1 when c has no token price at all or the counts
 * contradict each other (a part larger than its whole). */
int price_row(const struct price_card *c, const struct acct_row *row, int64_t *cost,
              unsigned *fallback);

/* The cost of prompt input and completion output tokens under c, rounded to the
 * nearest micro-dollar: what a row's estimate costs (acct_estimate). Fallbacks as
 * price_row's. Returns 0, or -1 when c has no token price at all. */
int price_tokens(const struct price_card *c, int64_t prompt, int64_t completion, int64_t *cost,
                 unsigned *fallback);

/* price_row and price_tokens under sheet s: the card of tier for a prompt of band tokens
 * (price_pick), else, that tier having no card, the card of the model's tier that
 * charges the most for it (PRICE_FALLBACK_TIER added to *fallback). Return 0, or -1
 * when nothing in s prices it (s NULL: an unknown model). */
int price_sheet_row(const struct price_sheet *s, const struct acct_row *row, int64_t *cost,
                    unsigned *fallback);
int price_sheet_tokens(const struct price_sheet *s, const char *tier, int64_t band,
                       int64_t prompt, int64_t completion, int64_t *cost, unsigned *fallback);

/* The names of fallback's bits, comma-separated (pricecard_names, then "tier"), into
 * buf, cut to fit and NUL-terminated; "" for none. Every bit fits in
 * PRICE_FALLBACK_NAMES_MAX. */
#define PRICE_FALLBACK_NAMES_MAX 128
void price_fallback_names(unsigned fallback, char *buf, size_t cap);

#endif
