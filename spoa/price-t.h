/* Types of a model's prices (price.h): rate cards, one per service tier and prompt
 * size, as sql/schema.sql's model_prices holds them. Plain data. */
#ifndef TALLY_PRICE_T_H
#define TALLY_PRICE_T_H

#include <stdint.h>

#include "acct-t.h"

/* The classes a card prices, in model_prices' column order (price_columns). Each is
 * micro-dollars per million tokens, except PRICE_WEB_SEARCH: micro-dollars per call. */
enum price_class {
	PRICE_INPUT,
	PRICE_CACHED,           /* input read from the provider's cache */
	PRICE_CACHE_WRITE,      /* input written to the cache (Anthropic: for 5 minutes) */
	PRICE_CACHE_WRITE_1H,   /* written for an hour; unset: at PRICE_CACHE_WRITE */
	PRICE_OUTPUT,
	PRICE_REASONING,        /* unset: at PRICE_OUTPUT, as most providers bill it */
	PRICE_AUDIO_INPUT,
	PRICE_AUDIO_OUTPUT,
	PRICE_WEB_SEARCH,
	PRICE_CLASSES
};

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
