/* libFuzzer target: tally-gen's --ndjson line parser (loadtest/ndjson_row.c) over
 * arbitrary bytes (file input). A line it accepts must give a row the writer can
 * store as is: terminated text, a request id, names and flags in range, counts either
 * unknown (ACCT_NONE) or non-negative, an estimated cost only with estimated tokens,
 * and the decision's estimates (never in a line) unknown. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ndjson_row.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_str_ok(const char *s, size_t cap)
{
	return memchr(s, 0, cap) != NULL;
}

static int fuzz_count_ok(int64_t v)
{
	return v == ACCT_NONE || (v >= 0 && v <= NDJSON_ROW_INT_MAX);
}

static void fuzz_check_row(const struct acct_row *r)
{
	const int64_t counts[] = { r->key_id, r->prompt_tokens, r->completion_tokens,
	                           r->cached_tokens, r->cache_creation_tokens,
	                           r->reasoning_tokens, r->cost_micros, r->duration_ms,
	                           r->ttfb_ms, r->bytes_in, r->bytes_out,
	                           r->estimated_tokens, r->estimated_cost_micros };
	size_t i;

	for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		if (!fuzz_count_ok(counts[i]))
			abort();
	if (!fuzz_str_ok(r->request_id, sizeof(r->request_id)) || !r->request_id[0] ||
	    !fuzz_str_ok(r->model, sizeof(r->model)) ||
	    !fuzz_str_ok(r->model_requested, sizeof(r->model_requested)) ||
	    !fuzz_str_ok(r->provider, sizeof(r->provider)) ||
	    !fuzz_str_ok(r->verdict, sizeof(r->verdict)) ||
	    !fuzz_str_ok(r->termination, sizeof(r->termination)) ||
	    (unsigned)r->outcome >= ACCT_OUTCOME_COUNT ||
	    (unsigned)r->usage_source >= ACCT_USAGE_SOURCE_COUNT ||
	    (r->stream != ACCT_NONE && r->stream != 0 && r->stream != 1) ||
	    (r->unpriced != 0 && r->unpriced != 1) || r->status < 0 || r->status > 999 ||
	    r->started_at_ms < 0 || r->started_at_ms > NDJSON_ROW_INT_MAX ||
	    (r->estimated_cost_micros != ACCT_NONE && r->estimated_tokens == ACCT_NONE) ||
	    r->est_prompt_tokens != ACCT_NONE || r->est_completion_tokens != ACCT_NONE)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly size bytes, so ASan catches any read past the end. */
	char *buf = malloc(size ? size : 1), err[256];
	struct acct_row row;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (ndjson_row_parse(buf, size, &row, err, sizeof(err)) == 0)
		fuzz_check_row(&row);
	else if (!memchr(err, 0, sizeof(err)) || !err[0])
		abort();
	free(buf);
	return 0;
}
