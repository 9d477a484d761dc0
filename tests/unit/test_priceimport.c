/* Unit tests of prices import's reading of a LiteLLM file (ctl/priceimport.c): dollars
 * converted exactly to micro-dollars, and price keys split into price, tier and
 * prompt size. */
#include <math.h>

#include "priceimport.h"
#include "prices.h"
#include "unit.h"

static void test_dollars_to_micros(void)
{
	static const struct {
		double v;
		int scale;
		int64_t micros;   /* -1: refused */
	} cases[] = {
		{ 3e-06, 12, 3000000 },          /* $3 per Mtok, which a double holds inexactly */
		{ 1.5e-05, 12, 15000000 },
		{ 2.5e-07, 12, 250000 },
		{ 0.01, 6, 10000 },              /* per call */
		{ 0, 12, 0 },
		{ -0.0, 12, 0 },
		{ 1.0, 12, PRICES_MICROS_MAX },  /* $1 per token, the most */
		{ 1.000001, 12, -1 },
		{ 2.5e-12, 12, 3 },              /* halves round up */
		{ 1.25e-12, 12, 1 },
		{ 1e-20, 12, 0 },
		{ -1e-06, 12, -1 },
		{ 1e300, 12, -1 },
	};
	int64_t m;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		m = -1;
		CHECK_EQ_INT(priceimport_dollars_to_micros(cases[i].v, cases[i].scale, &m),
		             cases[i].micros < 0 ? -1 : 0);
		if (cases[i].micros >= 0)
			CHECK_EQ_INT(m, cases[i].micros);
	}
	CHECK_EQ_INT(priceimport_dollars_to_micros(NAN, 12, &m), -1);
	CHECK_EQ_INT(priceimport_dollars_to_micros(INFINITY, 12, &m), -1);
}

static void test_litellm_key(void)
{
	static const struct {
		const char *key;
		int price;         /* -1: not mapped */
		const char *tier;
		int64_t above;
	} cases[] = {
		{ "input_cost_per_token", PRICE_INPUT, "default", 0 },
		{ "output_cost_per_token_priority", PRICE_OUTPUT, "priority", 0 },
		{ "cache_read_input_token_cost_flex", PRICE_CACHED, "flex", 0 },
		{ "output_cost_per_token_above_200k_tokens", PRICE_OUTPUT, "default", 200000 },
		{ "input_cost_per_token_above_128k_tokens_priority", PRICE_INPUT, "priority", 128000 },
		{ "cache_creation_input_token_cost_above_1hr", PRICE_CACHE_WRITE_1H, "default", 0 },
		{ "output_cost_per_reasoning_token", PRICE_REASONING, "default", 0 },
		{ "input_cost_per_audio_token", PRICE_AUDIO_INPUT, "default", 0 },
		{ "input_cost_per_token_above_k_tokens", -1, NULL, 0 },
		{ "input_cost_per_token_above_1234567890k_tokens", -1, NULL, 0 },
		{ "input_cost_per_token_200k_tokens", -1, NULL, 0 },
		{ "input_cost_per_character", -1, NULL, 0 },
		{ "_priority", -1, NULL, 0 },
		{ "", -1, NULL, 0 },
	};
	const char *tier;
	int64_t above;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CHECK_EQ_INT(priceimport_litellm_key(cases[i].key, &tier, &above), cases[i].price);
		if (cases[i].price < 0)
			continue;
		CHECK_EQ_STR(tier, cases[i].tier);
		CHECK_EQ_INT(above, cases[i].above);
	}
}

int main(void)
{
	RUN(test_dollars_to_micros);
	RUN(test_litellm_key);
	return UNIT_DONE();
}
