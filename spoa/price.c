/* price: a row's cost under a model's rate cards (see price.h). Pure; any thread. */
#include "price.h"

#include <stdio.h>
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

/* The card's dearest price per token; PRICE_UNSET when it prices no token. */
static int64_t price_dearest_token(const struct price_card *c)
{
	int64_t best = PRICE_UNSET;
	int k;

	for (k = 0; k < PRICE_CLASSES; k++)
		if (k != PRICE_WEB_SEARCH && c->micros[k] > best)
			best = c->micros[k];
	return best;
}

int64_t price_rate(const struct price_card *c, enum price_class k, unsigned *fallback)
{
	int64_t dearest;

	if (c->micros[k] != PRICE_UNSET)
		return c->micros[k];
	dearest = price_dearest_token(c);
	if (dearest == PRICE_UNSET)
		return PRICE_UNSET;
	*fallback |= 1u << k;
	return k == PRICE_WEB_SEARCH ? PRICE_FALLBACK_WEB_SEARCH : dearest;
}

/* Adds count x the rate of class k (per Mtok, so the sum is in micro-dollars x 10^6);
 * only a count asks for a rate, so only a count can set a fallback bit. Counts are
 * below 2^53 and prices below 2^40, so a product needs 128 bits and a sum of a few
 * cannot overflow them. */
static int price_add(unsigned __int128 *sum, int64_t count, const struct price_card *c,
                     enum price_class k, unsigned *fallback)
{
	int64_t rate;

	if (count == 0)
		return 0;
	if (count < 0)
		return -1;
	rate = price_rate(c, k, fallback);
	if (rate == PRICE_UNSET)
		return -1;
	*sum += (unsigned __int128)count * (uint64_t)rate * (k == PRICE_WEB_SEARCH ? 1000000u : 1u);
	return 0;
}

static int64_t price_round(unsigned __int128 sum)
{
	sum = (sum + 500000) / 1000000;
	return sum > INT64_MAX ? INT64_MAX : (int64_t)sum;
}

int price_row(const struct price_card *c, const struct acct_row *row, int64_t *cost,
              unsigned *fallback)
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
	/* An hour's writes without their own price are at the cache-write price. */
	enum price_class hour_class = p[PRICE_CACHE_WRITE_1H] == PRICE_UNSET ? PRICE_CACHE_WRITE
	                                                                    : PRICE_CACHE_WRITE_1H;
	unsigned __int128 sum = 0;
	unsigned fb = 0;

	/* A client's own prompt can be smaller than the cache a provider read (as before,
	 * the difference is not negative input); a part above its whole is no usage. */
	if (hour > written || text_out < 0 || price_dearest_token(c) == PRICE_UNSET)
		return -1;
	if (price_add(&sum, fresh < 0 ? 0 : fresh, c, PRICE_INPUT, &fb) < 0 ||
	    price_add(&sum, price_count(row->cached_tokens), c, PRICE_CACHED, &fb) < 0 ||
	    price_add(&sum, written - hour, c, PRICE_CACHE_WRITE, &fb) < 0 ||
	    price_add(&sum, hour, c, hour_class, &fb) < 0 ||
	    price_add(&sum, audio_in, c, PRICE_AUDIO_INPUT, &fb) < 0 ||
	    price_add(&sum, text_out, c, PRICE_OUTPUT, &fb) < 0 ||
	    price_add(&sum, reasoning, c, PRICE_REASONING, &fb) < 0 ||
	    price_add(&sum, audio_out, c, PRICE_AUDIO_OUTPUT, &fb) < 0 ||
	    price_add(&sum, price_count(row->web_search_calls), c, PRICE_WEB_SEARCH, &fb) < 0)
		return -1;
	*cost = price_round(sum);
	*fallback |= fb;
	return 0;
}

int price_tokens(const struct price_card *c, int64_t prompt, int64_t completion, int64_t *cost,
                 unsigned *fallback)
{
	unsigned __int128 sum = 0;
	unsigned fb = 0;

	if (price_add(&sum, prompt, c, PRICE_INPUT, &fb) < 0 ||
	    price_add(&sum, completion, c, PRICE_OUTPUT, &fb) < 0)
		return -1;
	*cost = price_round(sum);
	*fallback |= fb;
	return 0;
}

/* What a sheet prices: a row's usage, or (row NULL) prompt and completion tokens. */
struct price_job {
	const struct acct_row *row;
	int64_t prompt, completion;
};

static int price_job_card(const struct price_card *c, const struct price_job *j, int64_t *cost,
                          unsigned *fallback)
{
	return j->row ? price_row(c, j->row, cost, fallback)
	              : price_tokens(c, j->prompt, j->completion, cost, fallback);
}

/* Whether cards[i] is the first card of its tier. */
static int price_tier_first(const struct price_sheet *s, size_t i)
{
	size_t k;

	for (k = 0; k < i; k++)
		if (strcmp(s->cards[k].tier, s->cards[i].tier) == 0)
			return 0;
	return 1;
}

static int price_job_sheet(const struct price_sheet *s, const char *tier, int64_t band,
                           const struct price_job *j, int64_t *cost, unsigned *fallback)
{
	const struct price_card *c = s ? price_pick(s, tier, band) : NULL;
	int64_t best = ACCT_NONE;
	unsigned best_fb = 0;
	size_t i;

	if (c)
		return price_job_card(c, j, cost, fallback);
	/* A tier without a card (asked for, or reported by the provider): the dearest of
	 * the model's tiers for this prompt size, as the provider may bill it at any. */
	for (i = 0; s && i < s->ncards; i++) {
		int64_t v;
		unsigned fb = 0;

		if (!price_tier_first(s, i))
			continue;
		c = price_pick(s, s->cards[i].tier, band);
		if (c && price_job_card(c, j, &v, &fb) == 0 && v > best) {
			best = v;
			best_fb = fb;
		}
	}
	if (best == ACCT_NONE)
		return -1;
	*cost = best;
	*fallback |= best_fb | PRICE_FALLBACK_TIER;
	return 0;
}

int price_sheet_row(const struct price_sheet *s, const struct acct_row *row, int64_t *cost,
                    unsigned *fallback)
{
	const struct price_job j = { row, 0, 0 };

	return price_job_sheet(s, row->service_tier, row->prompt_tokens, &j, cost, fallback);
}

int price_sheet_tokens(const struct price_sheet *s, const char *tier, int64_t band,
                       int64_t prompt, int64_t completion, int64_t *cost, unsigned *fallback)
{
	const struct price_job j = { NULL, prompt, completion };

	return price_job_sheet(s, tier, band, &j, cost, fallback);
}

void price_fallback_names(unsigned fallback, char *buf, size_t cap)
{
	size_t len = 0;
	int k;

	if (!cap)
		return;
	buf[0] = '\0';
	for (k = 0; k <= PRICE_CLASSES; k++) {
		const char *name = k < PRICE_CLASSES ? pricecard_names[k] : "tier";
		int n;

		if (!(fallback & (1u << k)))
			continue;
		n = snprintf(buf + len, cap - len, "%s%s", len ? "," : "", name);
		if (n < 0 || (size_t)n >= cap - len)
			return;
		len += (size_t)n;
	}
}
