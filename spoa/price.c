/* price: a row's cost under a model's rate cards (see price.h). Pure; any thread. */
#include "price.h"

#include <string.h>

const char *price_tier_name(const char *tier)
{
	/* A request's "auto" (OpenAI: the project's tier) and "standard_only" (Anthropic)
	 * are priced as the default until the answer says otherwise. */
	static const char *const as_default[] = { "", "standard", "auto", "standard_only" };
	size_t i;

	if (!tier)
		return PRICE_TIER_DEFAULT;
	for (i = 0; i < sizeof(as_default) / sizeof(as_default[0]); i++)
		if (strcmp(tier, as_default[i]) == 0)
			return PRICE_TIER_DEFAULT;
	return tier;
}

const struct price_card *price_pick(const struct price_sheet *s, const char *tier,
                                    int64_t prompt_tokens)
{
	const struct price_card *best = NULL;
	size_t i;

	tier = price_tier_name(tier);
	for (i = 0; i < s->ncards; i++) {
		const struct price_card *c = &s->cards[i];

		if (strcmp(c->tier, tier) != 0)
			continue;
		/* Sorted by above_tokens: the last that applies is the largest. A prompt of
		 * unknown size takes the smallest band. */
		if (c->above_tokens == 0 || c->above_tokens < prompt_tokens ||
		    (!best && prompt_tokens < 0))
			best = c;
	}
	return best;
}

/* A reported count, 0 when unreported. */
static int64_t price_count(int64_t n)
{
	return n == ACCT_NONE ? 0 : n;
}

/* Adds count x price to *sum (price per Mtok, so the sum is in micro-dollars x 10^6);
 * a count needs a price. Counts are below 2^53 and prices below 2^40, so a product
 * needs 128 bits and a sum of a few cannot overflow them. */
static int price_add(unsigned __int128 *sum, int64_t count, int64_t micros_per_mtok)
{
	if (count == 0)
		return 0;
	if (count < 0 || micros_per_mtok == PRICE_UNSET)
		return -1;
	*sum += (unsigned __int128)count * (uint64_t)micros_per_mtok;
	return 0;
}

static int64_t price_round(unsigned __int128 sum)
{
	sum = (sum + 500000) / 1000000;
	return sum > INT64_MAX ? INT64_MAX : (int64_t)sum;
}

int price_row(const struct price_card *c, const struct acct_row *row, int64_t *cost)
{
	const int64_t *p = c->micros;
	int64_t written = price_count(row->cache_creation_tokens);
	int64_t hour = price_count(row->cache_creation_1h_tokens);
	int64_t audio_in = price_count(row->audio_input_tokens);
	int64_t audio_out = price_count(row->audio_output_tokens);
	int64_t reasoning = p[PRICE_REASONING] == PRICE_UNSET ? 0
	                    : price_count(row->reasoning_tokens);
	int64_t fresh = price_count(row->prompt_tokens) - price_count(row->cached_tokens) -
	                written - audio_in;
	int64_t text_out = price_count(row->completion_tokens) - audio_out - reasoning;
	unsigned __int128 sum = 0;

	/* A client's own prompt can be smaller than the cache a provider read (as before,
	 * the difference is not negative input); a part above its whole is no usage. */
	if (hour > written || text_out < 0)
		return -1;
	if (price_add(&sum, fresh < 0 ? 0 : fresh, p[PRICE_INPUT]) < 0 ||
	    price_add(&sum, price_count(row->cached_tokens), p[PRICE_CACHED]) < 0 ||
	    price_add(&sum, written - hour, p[PRICE_CACHE_WRITE]) < 0 ||
	    price_add(&sum, hour, p[PRICE_CACHE_WRITE_1H] == PRICE_UNSET ? p[PRICE_CACHE_WRITE]
	                                                                 : p[PRICE_CACHE_WRITE_1H]) < 0 ||
	    price_add(&sum, audio_in, p[PRICE_AUDIO_INPUT]) < 0 ||
	    price_add(&sum, text_out, p[PRICE_OUTPUT]) < 0 ||
	    price_add(&sum, reasoning, p[PRICE_REASONING]) < 0 ||
	    price_add(&sum, audio_out, p[PRICE_AUDIO_OUTPUT]) < 0 ||
	    /* Per call: a million calls of the per-Mtok unit. */
	    price_add(&sum, price_count(row->web_search_calls),
	              p[PRICE_WEB_SEARCH] == PRICE_UNSET ? PRICE_UNSET
	                                                 : p[PRICE_WEB_SEARCH] * 1000000) < 0)
		return -1;
	*cost = price_round(sum);
	return 0;
}

int price_tokens(const struct price_card *c, int64_t prompt, int64_t completion, int64_t *cost)
{
	unsigned __int128 sum = 0;

	if (price_add(&sum, prompt, c->micros[PRICE_INPUT]) < 0 ||
	    price_add(&sum, completion, c->micros[PRICE_OUTPUT]) < 0)
		return -1;
	*cost = price_round(sum);
	return 0;
}
