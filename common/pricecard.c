/* pricecard: a rate card's columns (see pricecard.h). */
#include "pricecard.h"

const char *const pricecard_columns[PRICE_CLASSES] = {
	[PRICE_INPUT] = "input_micros_per_mtok",
	[PRICE_CACHED] = "cached_micros_per_mtok",
	[PRICE_CACHE_WRITE] = "cache_write_micros_per_mtok",
	[PRICE_CACHE_WRITE_1H] = "cache_write_1h_micros_per_mtok",
	[PRICE_OUTPUT] = "output_micros_per_mtok",
	[PRICE_REASONING] = "reasoning_micros_per_mtok",
	[PRICE_AUDIO_INPUT] = "audio_input_micros_per_mtok",
	[PRICE_AUDIO_OUTPUT] = "audio_output_micros_per_mtok",
	[PRICE_WEB_SEARCH] = "web_search_micros_per_call",
};

const char *const pricecard_names[PRICE_CLASSES] = {
	[PRICE_INPUT] = "input",
	[PRICE_CACHED] = "cached",
	[PRICE_CACHE_WRITE] = "cache_write",
	[PRICE_CACHE_WRITE_1H] = "cache_write_1h",
	[PRICE_OUTPUT] = "output",
	[PRICE_REASONING] = "reasoning",
	[PRICE_AUDIO_INPUT] = "audio_input",
	[PRICE_AUDIO_OUTPUT] = "audio_output",
	[PRICE_WEB_SEARCH] = "web_search",
};
