/* usage: the token usage an upstream reported, read from a unary response's fields
 * (json_query in HAProxy) or from what the Lua capture filter read of the body by its
 * structure. Pure functions over peer input; intake thread.
 *
 * Normalised to the row's contract (acct-t.h): prompt_tokens counts every input token,
 * cached ones included (OpenAI's prompt_tokens; Anthropic's input_tokens +
 * cache_read_input_tokens + cache_creation_input_tokens); cached_tokens is what was
 * read from the cache (prompt_tokens_details.cached_tokens, cache_read_input_tokens);
 * cache_creation_tokens what was written to it (Anthropic's cache_creation_input_tokens,
 * OpenAI's cache_write_tokens); reasoning_tokens is part of completion_tokens. The other
 * classes priced apart (docs/pricing.md) and the service tier are read where each
 * provider reports them. A count not reported stays ACCT_NONE. */
#ifndef TALLY_USAGE_H
#define TALLY_USAGE_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"
#include "record.h"

struct usage {
	int64_t prompt_tokens;
	int64_t completion_tokens;
	int64_t cached_tokens;
	int64_t cache_creation_tokens;
	int64_t reasoning_tokens;
	/* The classes priced apart, each a part of a count above (acct-t.h). */
	int64_t cache_creation_1h_tokens;
	int64_t audio_input_tokens;
	int64_t audio_output_tokens;
	int64_t accepted_prediction_tokens;
	int64_t rejected_prediction_tokens;
	int64_t web_search_calls;
	char service_tier[ACCT_TIER_MAX]; /* as reported (tier_name_ok); "" if not seen */
	char model[ACCT_NAME_MAX];       /* as the upstream named it; "" if not seen */
	enum acct_usage_source source;
};

/* From the summary of a captured answer (record field "c2": haproxy/capture.lua says
 * its form), read by the JSON's structure only. sse: the answer was an event stream.
 * An Anthropic stream that ended after message_start but before any message_delta
 * gives its input counts, completion ACCT_NONE, source ACCT_USAGE_PARTIAL. A usage
 * object without prompt or completion count is no usage. */
void usage_from_capture(const char *sum, size_t len, int sse, struct usage *out);

/* The id of the response a Responses create stored, from the same summary: the
 * top-level "id" of a unary answer, or of a stream the "id" of the "response" object of
 * its first event, when that is response.created. Into out (cap bytes) if
 * acct_response_id_ok; else out is "". */
void usage_response_id(const char *sum, size_t len, int sse, char *out, size_t cap);

/* From the json_query fields of a unary response's record. */
void usage_from_fields(const struct record *r, struct usage *out);

#endif
