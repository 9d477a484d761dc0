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
#include "txnvar.h"

/* The APIs whose answers report usage, as bits of a member's dialects. */
#define USAGE_CHAT      1   /* OpenAI's Chat Completions: usage.prompt_tokens */
#define USAGE_RESPONSES 2   /* OpenAI's Responses: usage.input_tokens, *_tokens_details */
#define USAGE_MESSAGES  4   /* Anthropic's Messages: usage.input_tokens, cache_* */
#define USAGE_ALL       (USAGE_CHAT | USAGE_RESPONSES | USAGE_MESSAGES)

/* Where each dialect reports each fact of a unary answer or a usage object, once for both
 * readers: X(ID, DIALECTS, IN_USAGE, PARENT, NAME, VAR). The member is NAME, in the
 * object PARENT when not NULL, in the answer's usage object when IN_USAGE, else at its top
 * level. usage.c reads captured answers by it; haproxy/tally.cfg reads a unary answer's
 * member with json_query('$.[usage.][PARENT.]NAME') into txn.tally's VAR (txnvar.h) under
 * the ACLs of DIALECTS: tests/test_contract.py compares the two. */
#define USAGE_MEMBER_TABLE(X) \
	X(MODEL,            USAGE_ALL,       0, NULL, "model", USAGE_MODEL) \
	X(ID,               USAGE_ALL,       0, NULL, "id", USAGE_ID) \
	X(TIER,             USAGE_CHAT | USAGE_RESPONSES, 0, NULL, "service_tier", USAGE_TIER) \
	X(PROMPT,           USAGE_CHAT,      1, NULL, "prompt_tokens", USAGE_PROMPT) \
	X(COMPLETION,       USAGE_CHAT,      1, NULL, "completion_tokens", USAGE_COMPLETION) \
	X(CHAT_CACHED,      USAGE_CHAT,      1, "prompt_tokens_details", "cached_tokens", USAGE_CACHED) \
	X(CHAT_CACHE_WRITE, USAGE_CHAT,      1, "prompt_tokens_details", "cache_write_tokens", USAGE_CACHE_WRITE) \
	X(CHAT_REASONING,   USAGE_CHAT,      1, "completion_tokens_details", "reasoning_tokens", USAGE_REASONING) \
	X(AUDIO_IN,         USAGE_CHAT,      1, "prompt_tokens_details", "audio_tokens", USAGE_AUDIO_IN) \
	X(AUDIO_OUT,        USAGE_CHAT,      1, "completion_tokens_details", "audio_tokens", USAGE_AUDIO_OUT) \
	X(PREDICTED,        USAGE_CHAT,      1, "completion_tokens_details", "accepted_prediction_tokens", USAGE_PREDICTED) \
	X(MISPREDICTED,     USAGE_CHAT,      1, "completion_tokens_details", "rejected_prediction_tokens", USAGE_MISPREDICTED) \
	X(INPUT,            USAGE_RESPONSES | USAGE_MESSAGES, 1, NULL, "input_tokens", USAGE_INPUT) \
	X(OUTPUT,           USAGE_RESPONSES | USAGE_MESSAGES, 1, NULL, "output_tokens", USAGE_OUTPUT) \
	X(RESP_CACHED,      USAGE_RESPONSES, 1, "input_tokens_details", "cached_tokens", USAGE_CACHED) \
	X(RESP_CACHE_WRITE, USAGE_RESPONSES, 1, "input_tokens_details", "cache_write_tokens", USAGE_CACHE_WRITE) \
	X(RESP_REASONING,   USAGE_RESPONSES, 1, "output_tokens_details", "reasoning_tokens", USAGE_REASONING) \
	X(CACHE_READ,       USAGE_MESSAGES,  1, NULL, "cache_read_input_tokens", USAGE_CACHE_READ) \
	X(MSG_CACHE_WRITE,  USAGE_MESSAGES,  1, NULL, "cache_creation_input_tokens", USAGE_CACHE_WRITE) \
	X(CACHE_1H,         USAGE_MESSAGES,  1, "cache_creation", "ephemeral_1h_input_tokens", USAGE_CACHE_1H) \
	X(WEB_SEARCH,       USAGE_MESSAGES,  1, "server_tool_use", "web_search_requests", USAGE_WEB_SEARCH) \
	X(MSG_TIER,         USAGE_MESSAGES,  1, NULL, "service_tier", USAGE_TIER)

enum usage_member {
#define USAGE_MEMBER_ENUM(id, dialects, in_usage, parent, name, var) USAGE_M_##id,
	USAGE_MEMBER_TABLE(USAGE_MEMBER_ENUM)
#undef USAGE_MEMBER_ENUM
	USAGE_MEMBERS
};

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
	/* A stream's terminal event was read (a Responses stream's response.completed,
	 * .incomplete or .failed): nothing of the answer was left to send after it. */
	int ended;
};

/* No usage: every count ACCT_NONE, no model, no tier, source ACCT_USAGE_NONE. */
void usage_none(struct usage *u);

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
