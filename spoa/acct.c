/* acct: outcome, cost and names of a transaction's row (see acct.h). Pure; any thread. */
#include "acct.h"

#include <string.h>
#include <time.h>

#include "price.h"

void acct_row_init(struct acct_row *row)
{
	memset(row, 0, sizeof(*row));
	row->key_id = row->team_id = row->stream = ACCT_NONE;
	row->prompt_tokens = row->completion_tokens = row->cached_tokens = ACCT_NONE;
	row->cache_creation_tokens = row->reasoning_tokens = row->cost_micros = ACCT_NONE;
	row->cache_creation_1h_tokens = row->audio_input_tokens = row->audio_output_tokens = ACCT_NONE;
	row->accepted_prediction_tokens = row->rejected_prediction_tokens = ACCT_NONE;
	row->web_search_calls = ACCT_NONE;
	row->duration_ms = row->ttfb_ms = row->bytes_in = row->bytes_out = ACCT_NONE;
	row->estimated_tokens = row->estimated_cost_micros = ACCT_NONE;
	row->est_prompt_tokens = row->est_completion_tokens = ACCT_NONE;
}

int acct_response_id_ok(const char *s, size_t n)
{
	size_t i;

	/* A letter or digit first: no "." or ".." for a path to resolve. */
	if (n == 0 || n >= ACCT_RESPONSE_ID_MAX || s[0] == '_' || s[0] == '-' || s[0] == '.')
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '.'))
			return 0;
	}
	return 1;
}

const char *acct_outcome_name(enum acct_outcome o)
{
	static const char *const names[ACCT_OUTCOME_COUNT] = {
		[ACCT_COMPLETE] = "complete",
		[ACCT_CLIENT_ABORT] = "client_abort",
		[ACCT_UPSTREAM_ERROR] = "upstream_error",
		[ACCT_UPSTREAM_REJECTED] = "upstream_rejected",
		[ACCT_DENIED] = "denied",
		[ACCT_GATEWAY_REJECTED] = "gateway_rejected",
		[ACCT_NO_RECORD] = "no_record",
	};

	return (unsigned)o < ACCT_OUTCOME_COUNT ? names[o] : "unknown";
}

const char *acct_usage_source_name(enum acct_usage_source s)
{
	static const char *const names[ACCT_USAGE_SOURCE_COUNT] = {
		[ACCT_USAGE_NONE] = "none",
		[ACCT_USAGE_RESPONSE] = "response",
		[ACCT_USAGE_STREAM] = "stream",
		[ACCT_USAGE_PARTIAL] = "partial",
	};

	return (unsigned)s < ACCT_USAGE_SOURCE_COUNT ? names[s] : "unknown";
}

enum acct_outcome acct_outcome_of(int status, const char *termination, int ended)
{
	char who = termination && strlen(termination) >= 2 ? termination[0] : '-';

	/* The first letter says who ended the session abnormally: C/c the client (abort,
	 * timeout), S/s the server; the rest (proxy, resources, internal) are ours or
	 * HAProxy's, which the client sees as an upstream failure. A client that leaves
	 * once a 2xx answer's terminal event passed had the whole answer. */
	if (who == 'C' || who == 'c')
		return ended && status >= 200 && status < 300 ? ACCT_COMPLETE : ACCT_CLIENT_ABORT;
	if (who != '-')
		return ACCT_UPSTREAM_ERROR;
	if (status >= 500 || status <= 0)
		return ACCT_UPSTREAM_ERROR;
	if (status >= 400)
		return ACCT_UPSTREAM_REJECTED;
	return ACCT_COMPLETE;
}

void acct_price(struct acct_row *row, const struct price_sheet *s)
{
	row->cost_micros = ACCT_NONE;
	row->unpriced = 0;
	row->priced_fallback = 0;
	if (row->prompt_tokens == ACCT_NONE && row->completion_tokens == ACCT_NONE)
		return;
	if (price_sheet_row(s, row, &row->cost_micros, &row->priced_fallback) < 0) {
		row->cost_micros = ACCT_NONE;
		row->unpriced = 1;
	}
}

int acct_may_be_billed(const struct acct_row *row)
{
	const char *t = row->termination;

	if (row->outcome == ACCT_DENIED || row->outcome == ACCT_GATEWAY_REJECTED)
		return 0;
	if (row->usage_source == ACCT_USAGE_RESPONSE || row->usage_source == ACCT_USAGE_STREAM)
		return 0;
	if (row->outcome == ACCT_NO_RECORD || (row->status >= 200 && row->status < 300))
		return 1;
	return strlen(t) >= 2 && (t[1] == 'H' || t[1] == 'D' || t[1] == 'L');
}

void acct_estimate(struct acct_row *row, const struct price_sheet *s)
{
	int64_t prompt = 0, completion = 0, cost;

	row->estimated_tokens = row->estimated_cost_micros = ACCT_NONE;
	if (!acct_may_be_billed(row))
		return;
	if (row->prompt_tokens == ACCT_NONE && row->est_prompt_tokens > 0)
		prompt = row->est_prompt_tokens;
	if (row->completion_tokens == ACCT_NONE && row->est_completion_tokens > 0)
		completion = row->est_completion_tokens;
	if (prompt + completion == 0)
		return;
	row->estimated_tokens = prompt + completion;
	/* The band of the prompt as reported, else as estimated. */
	if (price_sheet_tokens(s, row->service_tier,
	                       row->prompt_tokens != ACCT_NONE ? row->prompt_tokens : prompt,
	                       prompt, completion, &cost, &row->priced_fallback) == 0)
		row->estimated_cost_micros = cost;
}

int64_t acct_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
