/* libFuzzer target: usage, and a stored response's id, from a captured body (peer input:
 * what an upstream sent).
 * Input: one flag byte (bit 1: event stream, bit 2: head and tail in separate
 * buffers), two bytes of head length (big endian, cut to what remains), then the
 * captured bytes, head then tail. */
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
	size_t body, hlen, tlen;
	char *head, *tail, id[ACCT_RESPONSE_ID_MAX];
	struct usage u;
	int flags;

	if (size < 3)
		return 0;
	flags = data[0];
	body = size - 3;
	hlen = (size_t)data[1] << 8 | data[2];
	if (hlen > body)
		hlen = body;
	tlen = body - hlen;
	/* Exactly sized copies, so ASan catches any read past either end. */
	if (flags & 4) {
		head = malloc(hlen ? hlen : 1);
		tail = malloc(tlen ? tlen : 1);
	} else {
		head = malloc(body ? body : 1);
		tail = head ? head + hlen : NULL;
	}
	if (head && tail) {
		memcpy(head, data + 3, hlen);
		memcpy(tail, data + 3 + hlen, tlen);
		usage_from_capture(head, hlen, tail, tlen, (flags & 2) != 0, &u);
		fuzz_usage_check(&u);
		usage_response_id(head, hlen, (flags & 2) != 0, id, sizeof(id));
		if (id[0] && !acct_response_id_ok(id, strlen(id)))
			abort();
	}
	if (flags & 4)
		free(tail);
	free(head);
	return 0;
}
