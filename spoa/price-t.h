/* Types of a model's prices (price.h): rate cards, one per service tier and prompt
 * size, as sql/schema.sql's model_prices holds them. Plain data. */
#ifndef TALLY_PRICE_T_H
#define TALLY_PRICE_T_H

#include <stdint.h>

#include "acct-t.h"
#include "pricecard.h"

/* A price the database does not have: never read as 0. */
#define PRICE_UNSET (-1)

/* The tier a request is priced at when the provider reports none. */
#define PRICE_TIER_DEFAULT "default"

struct price_card {
	char tier[ACCT_TIER_MAX];
	int64_t above_tokens;             /* applies to prompts of more tokens than this */
	int64_t micros[PRICE_CLASSES];    /* PRICE_UNSET: no price */
};

/* A model's cards, sorted by tier, then above_tokens. */
struct price_sheet {
	struct price_card *cards;
	size_t ncards;
};

#endif
