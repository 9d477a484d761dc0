/* pricecard: the prices of a rate card (sql/schema.sql, model_prices; docs/pricing.md):
 * the classes priced and the column of each, the one list the agent, tallyctl and queryd
 * read them by. Pure data; any thread. */
#ifndef TALLY_PRICECARD_H
#define TALLY_PRICECARD_H

/* In model_prices' column order. Each is micro-dollars per million tokens, except
 * PRICE_WEB_SEARCH: micro-dollars per call. */
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

/* model_prices' column of each class, indexed by enum price_class. */
extern const char *const pricecard_columns[PRICE_CLASSES];

/* Each class's short name (its column without the unit: "cached", "web_search"), as
 * requests.priced_fallback lists them and tallyctl's warnings name them. */
extern const char *const pricecard_names[PRICE_CLASSES];

#endif
