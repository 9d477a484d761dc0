/* Unit tests of price: card choice by tier and prompt size, every class taken out of its
 * count and priced, classes and tiers without a price charged at their fallback and
 * named, what leaves a row unpriced, rounding. Costs worked by hand in
 * dollars in the comments. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acct.h"
#include "price.h"
#include "unit.h"

#define U PRICE_UNSET

/* An Anthropic-like sheet: a base card, a long-context card above 200000 tokens, a
 * priority card without web-search price. Columns as enum price_class. */
static struct price_card claude_cards[] = {
	{ "default", 0, { 3000000, 300000, 3750000, 6000000, 15000000, U, U, U, 10000 } },
	{ "default", 200000, { 6000000, 600000, 7500000, 12000000, 22500000, U, U, U, 10000 } },
	{ "priority", 0, { 5000000, 500000, 6250000, U, 25000000, U, U, U, U } },
};
static const struct price_sheet claude = { claude_cards, 3 };

/* An OpenAI audio model: audio priced apart, reasoning at the output price. */
static struct price_card audio_cards[] = {
	{ "default", 0, { 2500000, 1250000, U, U, 10000000, U, 40000000, 80000000, U } },
};
static const struct price_sheet audio = { audio_cards, 1 };

static struct acct_row row_of(int64_t prompt, int64_t completion)
{
	struct acct_row r;

	acct_row_init(&r);
	r.prompt_tokens = prompt;
	r.completion_tokens = completion;
	return r;
}

static unsigned last_fallback;

static int64_t cost_of(const struct price_sheet *s, struct acct_row r)
{
	acct_price(&r, s);
	CHECK(r.unpriced == (r.cost_micros == ACCT_NONE));
	last_fallback = r.priced_fallback;
	return r.cost_micros;
}

static const char *fallback_names(unsigned fb)
{
	static char buf[160];

	price_fallback_names(fb, buf, sizeof(buf));
	return buf;
}

static void test_tier_names(void)
{
	CHECK_EQ_STR(price_tier_name(NULL), "default");
	CHECK_EQ_STR(price_tier_name(""), "default");
	CHECK_EQ_STR(price_tier_name("standard"), "default");
	CHECK_EQ_STR(price_tier_name("auto"), "default");
	CHECK_EQ_STR(price_tier_name("standard_only"), "default");
	CHECK_EQ_STR(price_tier_name("priority"), "priority");
	CHECK(tier_name_ok("flex", 4) && tier_name_ok("scale_2", 7));
	CHECK(!tier_name_ok("", 0) && !tier_name_ok("Flex", 4) && !tier_name_ok("a b", 3) &&
	      !tier_name_ok("a\"", 2) && !tier_name_ok("abcdefghijklmnopqrstuvwxyz", 26));
}

static void test_pick(void)
{
	CHECK(price_pick(&claude, "default", -1) == &claude_cards[0]);
	CHECK(price_pick(&claude, "standard", 0) == &claude_cards[0]);
	/* "above": a prompt of exactly the threshold stays in the base band. */
	CHECK(price_pick(&claude, "default", 200000) == &claude_cards[0]);
	CHECK(price_pick(&claude, "default", 200001) == &claude_cards[1]);
	CHECK(price_pick(&claude, "priority", 900000) == &claude_cards[2]);
	CHECK(price_pick(&claude, "flex", 10) == NULL);
	CHECK(price_pick(&audio, "priority", 10) == NULL);
	/* A tier whose only card is for long prompts prices no short one. */
	claude_cards[2].above_tokens = 1000;
	CHECK(price_pick(&claude, "priority", 1000) == NULL);
	CHECK(price_pick(&claude, "priority", 1001) == &claude_cards[2]);
	CHECK(price_pick(&claude, "priority", -1) == &claude_cards[2]);
	claude_cards[2].above_tokens = 0;
}

static void test_anthropic_classes(void)
{
	/* input 1000, cache read 2000, cache written 3000 of which 1000 for an hour, 500 out,
	 * 2 web searches: $0.003 + 0.0006 + 0.0075 + 0.006 + 0.0075 + 0.02 */
	struct acct_row r = row_of(6000, 500);

	r.cached_tokens = 2000;
	r.cache_creation_tokens = 3000;
	r.cache_creation_1h_tokens = 1000;
	r.web_search_calls = 2;
	snprintf(r.service_tier, sizeof(r.service_tier), "standard");
	CHECK_EQ_INT(cost_of(&claude, r), 44600);
	CHECK_EQ_INT(last_fallback, 0);
	/* The same above 200000 prompt tokens, every rate the long card's:
	 * 245000 x $6 + 2000 x 0.6 + 2000 x 7.5 + 1000 x 12 + 500 x 22.5 (per Mtok) + $0.02 */
	r.prompt_tokens = 250000;
	CHECK_EQ_INT(cost_of(&claude, r), 1529450);
	/* An hour's writes without an hour price are at the cache-write price. */
	r.prompt_tokens = 6000;
	claude_cards[0].micros[PRICE_CACHE_WRITE_1H] = U;
	CHECK_EQ_INT(cost_of(&claude, r), 44600 - 6000 + 3750);
	claude_cards[0].micros[PRICE_CACHE_WRITE_1H] = 6000000;
	/* More hour-long writes than writes: the counts contradict, nothing is priced. */
	r.cache_creation_1h_tokens = 3001;
	CHECK_EQ_INT(cost_of(&claude, r), ACCT_NONE);
}

static void test_tiers(void)
{
	struct acct_row r = row_of(1000, 100);

	/* $0.005 + $0.0025 */
	snprintf(r.service_tier, sizeof(r.service_tier), "priority");
	CHECK_EQ_INT(cost_of(&claude, r), 7500);
	/* A web search on a card without its price: never free, at the stated $0.05. */
	r.web_search_calls = 1;
	CHECK_EQ_INT(cost_of(&claude, r), 7500 + 50000);
	CHECK_EQ_STR(fallback_names(last_fallback), "web_search");
	r.web_search_calls = 0;
	CHECK_EQ_INT(cost_of(&claude, r), 7500);
	CHECK_EQ_INT(last_fallback, 0);
	/* A tier with no card: the dearest tier's card (priority: $0.0075, not default's
	 * $0.0045), named. */
	snprintf(r.service_tier, sizeof(r.service_tier), "flex");
	CHECK_EQ_INT(cost_of(&claude, r), 7500);
	CHECK_EQ_STR(fallback_names(last_fallback), "tier");
	/* Each card with what it lacks at its fallback: default's 4500 + $0.01 for the
	 * search loses to priority's 7500 + $0.05. */
	r.web_search_calls = 1;
	CHECK_EQ_INT(cost_of(&claude, r), 57500);
	CHECK_EQ_STR(fallback_names(last_fallback), "web_search,tier");
	r.web_search_calls = 0;
	/* No tier reported: default. */
	r.service_tier[0] = '\0';
	CHECK_EQ_INT(cost_of(&claude, r), 4500);
}

static void test_openai_classes(void)
{
	/* prompt 1000 (200 cached, 300 audio), completion 400 (100 audio, 50 reasoning, 30
	 * predicted): 500 x $2.5 + 200 x 1.25 + 300 x 40 + 300 x 10 + 100 x 80 per Mtok */
	struct acct_row r = row_of(1000, 400);

	r.cached_tokens = 200;
	r.audio_input_tokens = 300;
	r.audio_output_tokens = 100;
	r.reasoning_tokens = 50;
	r.accepted_prediction_tokens = 20;
	r.rejected_prediction_tokens = 10;
	CHECK_EQ_INT(cost_of(&audio, r), 24500);
	/* Reasoning priced apart: 250 x $10 + 50 x $20 instead of 300 x $10. */
	audio_cards[0].micros[PRICE_REASONING] = 20000000;
	CHECK_EQ_INT(cost_of(&audio, r), 25000);
	audio_cards[0].micros[PRICE_REASONING] = U;
	/* Audio on a card that does not price it: at the card's dearest token rate (audio
	 * output's $80), 300 x 80 instead of 300 x 40 per Mtok. */
	audio_cards[0].micros[PRICE_AUDIO_INPUT] = U;
	CHECK_EQ_INT(cost_of(&audio, r), 24500 - 12000 + 24000);
	CHECK_EQ_STR(fallback_names(last_fallback), "audio_input");
	r.audio_input_tokens = 0;
	CHECK_EQ_INT(cost_of(&audio, r), 24500 - 12000 + 750);
	CHECK_EQ_INT(last_fallback, 0);
	audio_cards[0].micros[PRICE_AUDIO_INPUT] = 40000000;
	/* Parts above their whole. */
	r.audio_output_tokens = 401;
	CHECK_EQ_INT(cost_of(&audio, r), ACCT_NONE);
}

static void test_edges(void)
{
	struct price_card one = { "default", 0, { 1, U, U, U, 1, U, U, U, U } };
	struct price_sheet s = { &one, 1 };
	struct acct_row r = row_of(ACCT_NONE, ACCT_NONE);
	int64_t c = -7;
	unsigned fb = 0;

	/* No usage: no cost, not unpriced. */
	acct_price(&r, &s);
	CHECK(r.cost_micros == ACCT_NONE && !r.unpriced);
	/* An unknown model. */
	CHECK_EQ_INT(cost_of(NULL, row_of(10, 10)), ACCT_NONE);
	/* No card at all. */
	s.ncards = 0;
	CHECK_EQ_INT(cost_of(&s, row_of(10, 10)), ACCT_NONE);
	s.ncards = 1;
	/* Rounded to the nearest micro-dollar. */
	CHECK_EQ_INT(cost_of(&s, row_of(499999, 0)), 0);
	CHECK_EQ_INT(cost_of(&s, row_of(500000, 0)), 1);
	CHECK_EQ_INT(price_tokens(&one, 499999, 500000, &c, &fb), 0);
	CHECK_EQ_INT(c, 1);
	CHECK_EQ_INT(fb, 0);
	/* Output unpriced: at the dearest token rate, input's. */
	one.micros[PRICE_INPUT] = 3;
	one.micros[PRICE_OUTPUT] = U;
	CHECK_EQ_INT(price_tokens(&one, 1000000, 1000000, &c, &fb), 0);
	CHECK_EQ_INT(c, 6);
	CHECK_EQ_INT(fb, 1u << PRICE_OUTPUT);
	/* A card with no token price at all prices nothing. */
	one.micros[PRICE_INPUT] = U;
	one.micros[PRICE_WEB_SEARCH] = 10;
	CHECK_EQ_INT(price_tokens(&one, 1, 1, &c, &fb), -1);
	CHECK_EQ_INT(cost_of(&s, row_of(10, 10)), ACCT_NONE);
	one.micros[PRICE_WEB_SEARCH] = U;
	one.micros[PRICE_OUTPUT] = 1;
	/* The largest counts and prices do not overflow: the cost stops at INT64_MAX. */
	one.micros[PRICE_INPUT] = 1LL << 40;
	CHECK_EQ_INT(cost_of(&s, row_of((1LL << 53) - 1, 0)), INT64_MAX);
	/* 2^30 tokens x 2^40 micro-dollars per Mtok, past 64 bits before the division. */
	CHECK_EQ_INT(cost_of(&s, row_of(1LL << 30, 0)), 1180591620717411LL);
}

static void test_estimate(void)
{
	struct acct_row r = row_of(ACCT_NONE, ACCT_NONE);

	/* An answer cut before its usage: 300000 prompt tokens estimated price in the long
	 * band, 1000 completion: 300000 x $6 + 1000 x $22.5 per Mtok. */
	r.outcome = ACCT_CLIENT_ABORT;
	r.status = 200;
	r.est_prompt_tokens = 300000;
	r.est_completion_tokens = 1000;
	acct_estimate(&r, &claude);
	CHECK_EQ_INT(r.estimated_tokens, 301000);
	CHECK_EQ_INT(r.estimated_cost_micros, 1822500);
	CHECK_EQ_INT(r.priced_fallback, 0);
	/* Asked at a tier with no card: the dearest tier's card for that prompt, the long
	 * default band (priority: 300000 x $5 + 1000 x $25 = $1.525). */
	snprintf(r.service_tier, sizeof(r.service_tier), "flex");
	acct_estimate(&r, &claude);
	CHECK_EQ_INT(r.estimated_tokens, 301000);
	CHECK_EQ_INT(r.estimated_cost_micros, 1822500);
	CHECK_EQ_STR(fallback_names(r.priced_fallback), "tier");
	/* An unknown model: tokens estimated, their cost unknown. */
	acct_estimate(&r, NULL);
	CHECK_EQ_INT(r.estimated_tokens, 301000);
	CHECK_EQ_INT(r.estimated_cost_micros, ACCT_NONE);
}

static void test_fallback_names(void)
{
	char small[8];

	CHECK_EQ_STR(fallback_names(0), "");
	CHECK_EQ_STR(fallback_names((1u << PRICE_CACHED) | (1u << PRICE_CACHE_WRITE_1H) |
	                            PRICE_FALLBACK_TIER), "cached,cache_write_1h,tier");
	/* Cut to fit, never past the buffer. */
	price_fallback_names(1u << PRICE_AUDIO_OUTPUT, small, sizeof(small));
	CHECK(strlen(small) < sizeof(small));
}

/* The README's example card prices no cached tokens: a cached read is charged at the
 * dearest token rate (output), not left free. */
static void test_cached_unpriced(void)
{
	struct price_card card = { "default", 0, { 150000, U, U, U, 600000, U, U, U, U } };
	struct price_sheet s = { &card, 1 };
	struct acct_row r = row_of(1000, 10);

	r.cached_tokens = 1;
	/* 999 x $0.15 + 1 x $0.60 + 10 x $0.60 per Mtok = 149.85 + 0.6 + 6 micro-dollars */
	CHECK_EQ_INT(cost_of(&s, r), 156);
	CHECK_EQ_STR(fallback_names(last_fallback), "cached");
	/* Cache writes too (an hour's, without a price of their own, are cache writes). */
	r.cache_creation_tokens = 100;
	r.cache_creation_1h_tokens = 40;
	r.prompt_tokens = 1100;
	CHECK_EQ_INT(cost_of(&s, r), 156 + 60);
	CHECK_EQ_STR(fallback_names(last_fallback), "cached,cache_write");
}

int main(void)
{
	RUN(test_tier_names);
	RUN(test_pick);
	RUN(test_anthropic_classes);
	RUN(test_tiers);
	RUN(test_openai_classes);
	RUN(test_edges);
	RUN(test_estimate);
	RUN(test_fallback_names);
	RUN(test_cached_unpriced);
	return UNIT_DONE();
}
