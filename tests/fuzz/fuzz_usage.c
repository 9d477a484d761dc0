/* libFuzzer target: usage, and a stored response's id, from a capture's summary (record
 * field c2, built by haproxy/capture.lua from what an upstream sent).
 * Input: one flag byte (bit 1: event stream), then the summary. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acct.h"
#include "usage.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_usage_check(const struct usage *u)
{
	const int64_t c[] = { u->prompt_tokens, u->completion_tokens, u->cached_tokens,
	                      u->cache_creation_tokens, u->reasoning_tokens,
	                      u->cache_creation_1h_tokens, u->audio_input_tokens,
	                      u->audio_output_tokens, u->accepted_prediction_tokens,
	                      u->rejected_prediction_tokens, u->web_search_calls };
	const unsigned char *m;
	size_t i;

	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		if (c[i] < 0 && c[i] != ACCT_NONE)
			abort();
	if ((unsigned)u->source >= ACCT_USAGE_SOURCE_COUNT ||
	    (u->source == ACCT_USAGE_NONE && (u->prompt_tokens != ACCT_NONE ||
	                                      u->completion_tokens != ACCT_NONE)) ||
	    (u->source != ACCT_USAGE_NONE && u->prompt_tokens == ACCT_NONE &&
	     u->completion_tokens == ACCT_NONE) ||
	    strlen(u->model) >= sizeof(u->model) ||
	    (u->service_tier[0] && !tier_name_ok(u->service_tier, strlen(u->service_tier))))
		abort();
	for (m = (const unsigned char *)u->model; *m; m++)
		if (*m < 0x20 || *m == 0x7f)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *sum, id[ACCT_RESPONSE_ID_MAX];
	struct usage u;
	int sse;

	if (size < 1)
		return 0;
	sse = data[0] & 1;
	/* An exactly sized copy, so ASan catches any read past its end. */
	if (!(sum = malloc(size - 1 ? size - 1 : 1)))
		return 0;
	memcpy(sum, data + 1, size - 1);
	usage_from_capture(sum, size - 1, sse, &u);
	fuzz_usage_check(&u);
	usage_response_id(sum, size - 1, sse, id, sizeof(id));
	if (id[0] && !acct_response_id_ok(id, strlen(id)))
		abort();
	free(sum);
	return 0;
}
