/* usage: reading reported token usage (see usage.h). Pure; intake thread.
 *
 * A capture is a fragment: the tail may start inside a string. A `"usage":` key can
 * still be found by bytes alone, because a quote inside a JSON string is escaped, and
 * every candidate is confirmed by parsing its object with cJSON.
 *
 * Head and tail are searched as one text, even when bytes were skipped between them:
 * HAProxy's body count runs a byte above what the filter kept, so a whole body of a
 * little more than the head looks cut, and its usage may span the seam. A key made up
 * across a real gap would need unrelated bytes that complete it and still parse, and
 * the final usage object, at the end of the tail, comes after it and wins. */
#include "usage.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct.h"

#define USAGE_MAX_COUNT 9007199254740991LL   /* 2^53 - 1: exact in a double */

/* The captured text: head and tail, one after the other. */
struct usage_seg {
	const char *ptr;
	size_t len;
};

/* A `"usage": {...}` object that parsed. */
struct usage_obj {
	cJSON *json;
	int in_start;        /* inside an Anthropic message_start event */
	const char *end;     /* just past the object's text */
};

static void usage_init(struct usage *u)
{
	memset(u, 0, sizeof(*u));
	u->prompt_tokens = u->completion_tokens = u->cached_tokens = ACCT_NONE;
	u->cache_creation_tokens = u->reasoning_tokens = ACCT_NONE;
	u->cache_creation_1h_tokens = u->audio_input_tokens = u->audio_output_tokens = ACCT_NONE;
	u->accepted_prediction_tokens = u->rejected_prediction_tokens = ACCT_NONE;
	u->web_search_calls = ACCT_NONE;
	u->source = ACCT_USAGE_NONE;
}

static const char *usage_skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	return p;
}

/* ---- JSON read by structure ---- */

/* Nesting a value may have while usage_skip_value walks over it. */
#define USAGE_DEPTH_MAX 32

/* Past the JSON string at p (its opening quote); NULL if it does not end before end. */
static const char *usage_skip_string(const char *p, const char *end)
{
	for (p++; p < end; p++) {
		if (*p == '\\') {
			if (++p == end)
				return NULL;
			continue;
		}
		if (*p == '"')
			return p + 1;
	}
	return NULL;
}

/* Past the JSON value at p; NULL if it does not end before end or nests too deep.
 * Brackets are counted, not matched: a value this passes over is never used. */
static const char *usage_skip_value(const char *p, const char *end)
{
	int depth = 0;

	while (p < end) {
		switch (*p) {
		case '"':
			if (!(p = usage_skip_string(p, end)))
				return NULL;
			break;
		case '{':
		case '[':
			if (++depth > USAGE_DEPTH_MAX)
				return NULL;
			p++;
			break;
		case '}':
		case ']':
			if (--depth < 0)
				return NULL;
			p++;
			break;
		default:
			p++;
			break;
		}
		if (depth == 0 && p < end && (*p == ',' || *p == '}' || *p == ']' || *p == ' ' ||
		                              *p == '\t' || *p == '\r' || *p == '\n'))
			return p;
	}
	return NULL;
}

/* The value of the member named key among the members from p (a key's quote) to the
 * end of their object (which may be end when the text ends there); NULL if the object
 * ends, or the text does, before it. */
static const char *usage_member_from(const char *p, const char *end, const char *key)
{
	size_t klen = strlen(key);

	while (p < end && *p == '"') {
		const char *kend = usage_skip_string(p, end), *v;

		if (!kend)
			return NULL;
		v = usage_skip_ws(kend, end);
		if (v >= end || *v != ':')
			return NULL;
		v = usage_skip_ws(v + 1, end);
		if ((size_t)(kend - p) == klen + 2 && memcmp(p + 1, key, klen) == 0)
			return v;
		if (!(p = usage_skip_value(v, end)))
			return NULL;
		p = usage_skip_ws(p, end);
		if (p >= end || *p != ',')
			return NULL;
		p = usage_skip_ws(p + 1, end);
	}
	return NULL;
}

/* The same in the object at p ('{'; NULL: none, as a failed look-up gives). */
static const char *usage_member(const char *p, const char *end, const char *key)
{
	if (!p || p >= end || *p != '{')
		return NULL;
	return usage_member_from(usage_skip_ws(p + 1, end), end, key);
}

/* If p points at `"<key>"` (quote included) followed by ':' and a value starting with
 * one of starts, returns where the value starts; else NULL. */
static const char *usage_value_at(const char *p, const char *end, const char *key,
                                  const char *starts)
{
	size_t klen = strlen(key);

	if ((size_t)(end - p) < klen + 2 || p[0] != '"' || memcmp(p + 1, key, klen) != 0 ||
	    p[klen + 1] != '"')
		return NULL;
	p = usage_skip_ws(p + klen + 2, end);
	if (p == end || *p != ':')
		return NULL;
	p = usage_skip_ws(p + 1, end);
	return p < end && *p && strchr(starts, *p) ? p : NULL;
}

/* The next `"<key>": <value>` at or after *from in s whose value starts with one of
 * starts and parses; *from moves past the key. *vstart, *vend: the value's text. */
static cJSON *usage_next_value(struct usage_seg s, const char **from, const char *key,
                               const char *starts, const char **vstart, const char **vend)
{
	const char *end = s.ptr + s.len, *p = *from;
	char quoted[24];
	size_t qlen = (size_t)snprintf(quoted, sizeof(quoted), "\"%s\"", key);

	while (p < end && (p = memmem(p, (size_t)(end - p), quoted, qlen))) {
		const char *v = usage_value_at(p, end, key, starts), *stop = NULL;
		cJSON *j = v ? cJSON_ParseWithLengthOpts(v, (size_t)(end - v), &stop, 0) : NULL;

		p += qlen;
		if (j) {
			*from = p;
			*vstart = v;
			*vend = stop ? stop : end;
			return j;
		}
	}
	*from = end;
	return NULL;
}

/* Whether the "type" key at p is the first member of an event's data ("data:", then
 * '{', then p, white space allowed between): raw text no JSON string can hold (a quote
 * inside one is escaped) and no JSON value either (a bare word), so neither a model's
 * words nor a schema a key sent and the provider echoes can forge it. */
static int usage_event_type_at(struct usage_seg s, const char *p)
{
	const char *q = p;

	while (q > s.ptr && (q[-1] == ' ' || q[-1] == '\t'))
		q--;
	if (q == s.ptr || *--q != '{')
		return 0;
	while (q > s.ptr && (q[-1] == ' ' || q[-1] == '\t'))
		q--;
	return q - s.ptr >= 5 && memcmp(q - 5, "data:", 5) == 0;
}

/* Whether the usage key at `at` sits in an Anthropic message_start event: the last
 * event type named before it is message_start, not message_delta. A message_start must
 * open an event (usage_event_type_at), so that no echoed text makes a usage the input
 * side; a message_delta need not, as a tail may start in the middle of its event. */
static int usage_in_start(struct usage_seg s, const char *at)
{
	const char *p = s.ptr;
	int in_start = 0;

	while ((p = memmem(p, (size_t)(at - p), "\"message_", 9))) {
		if (at - p >= 15 && memcmp(p, "\"message_start\"", 15) == 0 && p - s.ptr >= 7 &&
		    memcmp(p - 7, "\"type\":", 7) == 0 && usage_event_type_at(s, p - 7))
			in_start = 1;
		else if (at - p >= 15 && memcmp(p, "\"message_delta\"", 15) == 0)
			in_start = 0;
		p += 9;
	}
	return in_start;
}

/* Whether s is a Responses stream seen from its start: its first event
 * response.created. */
static int usage_responses_stream(struct usage_seg s)
{
	static const char created[] = "\"type\":\"response.created\"";
	const char *end = s.ptr + s.len;
	const char *p = memmem(s.ptr, s.len, "data:", 5);

	if (!p)
		return 0;
	p = usage_skip_ws(p + 5, end);
	if (p == end || *p != '{')
		return 0;
	p = usage_skip_ws(p + 1, end);
	return (size_t)(end - p) >= sizeof(created) - 1 && memcmp(p, created, sizeof(created) - 1) == 0;
}

/* In a Responses stream the usage is the terminal event's: the response object's own
 * member, its last but for the members after it, the event's end after the response's,
 * then nothing but the next event. A usage object anywhere else (in a tool's schema
 * that response.created echoes, when the client left before the terminal event) is some
 * other text's. Whether the usage object ending at ve is one that closes its event so. */
static int usage_responses_final(struct usage_seg s, const char *ve)
{
	const char *end = s.ptr + s.len, *p = usage_skip_ws(ve, end);
	int closes;

	while (p < end && *p == ',') {
		const char *k = usage_skip_ws(p + 1, end), *kend;

		if (k == end || *k != '"' || !(kend = usage_skip_string(k, end)))
			return 0;
		p = usage_skip_ws(kend, end);
		if (p == end || *p != ':' || !(p = usage_skip_value(usage_skip_ws(p + 1, end), end)))
			return 0;
		p = usage_skip_ws(p, end);
	}
	for (closes = 0; closes < 2; closes++) {
		if (p == end || *p != '}')
			return 0;
		p = usage_skip_ws(p + 1, end);
	}
	return p == end || (end - p >= 5 && (memcmp(p, "data:", 5) == 0 ||
	                                      (end - p >= 6 && memcmp(p, "event:", 6) == 0)));
}

/* The first and the last usage objects of s (a value that starts with '{' and parses
 * is an object); last->json is NULL when there is only one. The caller deletes both. */
static void usage_scan(struct usage_seg s, int sse, struct usage_obj *first,
                       struct usage_obj *last)
{
	const char *from = s.ptr, *vs, *ve;
	cJSON *j;

	int responses = sse && usage_responses_stream(s);

	first->json = last->json = NULL;
	while ((j = usage_next_value(s, &from, "usage", "{", &vs, &ve))) {
		struct usage_obj o = { j, sse && usage_in_start(s, vs), ve };

		if (responses && !usage_responses_final(s, ve)) {
			cJSON_Delete(j);
			continue;
		}
		if (!first->json) {
			*first = o;
		} else {
			cJSON_Delete(last->json);
			*last = o;
		}
	}
}

/* A model name worth recording: non-empty, fits, no control bytes (it ends up in the
 * database and in logs), no NUL hidden by an escape (cJSON would cut the name there). */
static int usage_model_ok(const cJSON *j, const char *text, const char *text_end, size_t cap)
{
	const unsigned char *c;
	size_t n;

	if (!cJSON_IsString(j) || !j->valuestring || !*j->valuestring)
		return 0;
	n = strlen(j->valuestring);
	if (n >= cap || memmem(text, (size_t)(text_end - text), "\\u0000", 6))
		return 0;
	for (c = (const unsigned char *)j->valuestring; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return 0;
	return 1;
}

/* The first usable `"model": "<string>"` of s, decoded by cJSON. */
static void usage_find_model(struct usage_seg s, char *out, size_t cap)
{
	const char *from = s.ptr, *vs, *ve;
	cJSON *j;

	while ((j = usage_next_value(s, &from, "model", "\"", &vs, &ve))) {
		int ok = usage_model_ok(j, vs, ve, cap);

		if (ok)
			memcpy(out, j->valuestring, strlen(j->valuestring) + 1);
		cJSON_Delete(j);
		if (ok)
			return;
	}
}

/* A count: a non-negative integer below 2^53, else ACCT_NONE. */
static int64_t usage_count(const cJSON *obj, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
	double d;

	if (!cJSON_IsNumber(v))
		return ACCT_NONE;
	d = v->valuedouble;
	if (!(d >= 0) || d > (double)USAGE_MAX_COUNT || d != (double)(int64_t)d)
		return ACCT_NONE;
	return (int64_t)d;
}

static int64_t usage_nested(const cJSON *obj, const char *parent, const char *name)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, parent);

	return cJSON_IsObject(p) ? usage_count(p, name) : ACCT_NONE;
}

static int usage_is_anthropic(const cJSON *u)
{
	return cJSON_HasObjectItem(u, "input_tokens") || cJSON_HasObjectItem(u, "output_tokens");
}

/* Input + cache read + cache creation; counts below 2^53 cannot overflow. */
static int64_t usage_total_input(int64_t input, int64_t read, int64_t creation)
{
	if (input == ACCT_NONE)
		return ACCT_NONE;
	return input + (read == ACCT_NONE ? 0 : read) + (creation == ACCT_NONE ? 0 : creation);
}

/* Whether s (n bytes) names the tier an answer was served at: a plain name
 * (tier_name_ok), and not "auto", which echoes a request that left the choice open. */
static int usage_tier_ok(const char *s, size_t n)
{
	return tier_name_ok(s, n) && !(n == 4 && memcmp(s, "auto", 4) == 0);
}

/* A reported service tier, kept when usage_tier_ok takes it and none is kept yet. */
static void usage_tier(const cJSON *j, struct usage *out)
{
	if (!out->service_tier[0] && cJSON_IsString(j) && j->valuestring &&
	    usage_tier_ok(j->valuestring, strlen(j->valuestring)))
		snprintf(out->service_tier, sizeof(out->service_tier), "%s", j->valuestring);
}

/* Input side of an input_tokens object: Anthropic's input, cache read and cache
 * creation; OpenAI's Responses API names cached input in input_tokens_details, and
 * its input_tokens count them already. */
static void usage_anthropic_input(const cJSON *u, struct usage *out)
{
	int64_t details = usage_nested(u, "input_tokens_details", "cached_tokens");

	if (details != ACCT_NONE) {
		out->cached_tokens = details;
		out->cache_creation_tokens = usage_nested(u, "input_tokens_details",
		                                          "cache_write_tokens");
		out->prompt_tokens = usage_count(u, "input_tokens");
		return;
	}
	out->cached_tokens = usage_count(u, "cache_read_input_tokens");
	out->cache_creation_tokens = usage_count(u, "cache_creation_input_tokens");
	out->cache_creation_1h_tokens = usage_nested(u, "cache_creation", "ephemeral_1h_input_tokens");
	out->prompt_tokens = usage_total_input(usage_count(u, "input_tokens"),
	                                       out->cached_tokens, out->cache_creation_tokens);
	usage_tier(cJSON_GetObjectItemCaseSensitive(u, "service_tier"), out);
}

static void usage_anthropic_output(const cJSON *u, struct usage *out)
{
	out->completion_tokens = usage_count(u, "output_tokens");
	out->reasoning_tokens = usage_nested(u, "output_tokens_details", "reasoning_tokens");
	out->web_search_calls = usage_nested(u, "server_tool_use", "web_search_requests");
}

static void usage_openai(const cJSON *u, struct usage *out)
{
	out->prompt_tokens = usage_count(u, "prompt_tokens");
	out->completion_tokens = usage_count(u, "completion_tokens");
	out->cached_tokens = usage_nested(u, "prompt_tokens_details", "cached_tokens");
	out->cache_creation_tokens = usage_nested(u, "prompt_tokens_details", "cache_write_tokens");
	out->audio_input_tokens = usage_nested(u, "prompt_tokens_details", "audio_tokens");
	out->reasoning_tokens = usage_nested(u, "completion_tokens_details", "reasoning_tokens");
	out->audio_output_tokens = usage_nested(u, "completion_tokens_details", "audio_tokens");
	out->accepted_prediction_tokens = usage_nested(u, "completion_tokens_details",
	                                               "accepted_prediction_tokens");
	out->rejected_prediction_tokens = usage_nested(u, "completion_tokens_details",
	                                               "rejected_prediction_tokens");
}

/* The source when some count was read; a usage object without counts is no usage. */
static enum acct_usage_source usage_source_if_counts(const struct usage *u,
                                                     enum acct_usage_source s)
{
	return u->prompt_tokens != ACCT_NONE || u->completion_tokens != ACCT_NONE ? s
	       : ACCT_USAGE_NONE;
}

/* Anthropic stream: input in message_start (or repeated by the last message_delta),
 * output in the last message_delta. Without a delta the stream was cut: the input is
 * known, the output is not (NULL, never message_start's placeholder count). */
static void usage_anthropic_stream(const struct usage_obj *first, const struct usage_obj *final,
                                   struct usage *out)
{
	if (final->in_start) {
		usage_anthropic_input(final->json, out);
		out->source = usage_source_if_counts(out, ACCT_USAGE_PARTIAL);
		return;
	}
	usage_anthropic_input(cJSON_HasObjectItem(final->json, "input_tokens") || !first->in_start
	                      ? final->json : first->json, out);
	usage_anthropic_output(final->json, out);
	/* The last delta repeats the input counts but not the tier: message_start has it. */
	if (first->in_start)
		usage_tier(cJSON_GetObjectItemCaseSensitive(first->json, "service_tier"), out);
	out->source = usage_source_if_counts(out, ACCT_USAGE_STREAM);
}

/* ---- members of the head, read by structure (a stored response's id, the tier) ---- */


/* The object a captured head's answer is, read by structure: a unary answer's
 * top-level object, or a stream's first event's data, and for a Responses stream
 * (response.created) its "response" object; responses_only: a stream's only then. NULL
 * if the head holds none of these. */
static const char *usage_head_object(const char *head, size_t hlen, int sse, int responses_only)
{
	const char *p, *v, *end = head + hlen;

	if (!sse)
		return usage_skip_ws(head, end);
	/* The first event's data (the capture turned line breaks into spaces). */
	if (!(p = memmem(head, hlen, "data:", 5)))
		return NULL;
	p = usage_skip_ws(p + 5, end);
	v = usage_member(p, end, "type");
	if (v && end - v >= 18 && memcmp(v, "\"response.created\"", 18) == 0)
		return usage_member(p, end, "response");
	return responses_only ? NULL : p;
}

/* The plain string value v (its opening quote) into out (cap bytes) when ok takes it;
 * else out is untouched. Returns 1 when taken. */
static int usage_plain_string(const char *v, const char *end, int (*ok)(const char *, size_t),
                              char *out, size_t cap)
{
	const char *vend;

	if (!v || v >= end || *v != '"' || !(vend = usage_skip_string(v, end)) ||
	    (size_t)(vend - v - 2) >= cap || !ok(v + 1, (size_t)(vend - v - 2)))
		return 0;
	memcpy(out, v + 1, (size_t)(vend - v - 2));
	out[vend - v - 2] = '\0';
	return 1;
}

/* The plain string value of member key of the head's object (usage_head_object) into out
 * (cap bytes) when ok takes it; else out is "". head may be NULL when hlen is 0. */
static void usage_head_string(const char *head, size_t hlen, int sse, int responses_only,
                              const char *key, int (*ok)(const char *, size_t), char *out,
                              size_t cap)
{
	const char *p;

	out[0] = '\0';
	if (!head)
		return;
	p = usage_head_object(head, hlen, sse, responses_only);
	if (p)
		usage_plain_string(usage_member(p, head + hlen, key), head + hlen, ok, out, cap);
}

/* The tier of the answer whose final usage ends at ue in s, read by structure where the
 * providers put it: after the usage in the same object (a chat completion), or in the
 * response of the last terminal event of a Responses stream. */
static void usage_tier_beside(struct usage_seg s, const char *ue, struct usage *out)
{
	const char *end = s.ptr + s.len, *p = usage_skip_ws(ue, end), *ev = NULL, *at = s.ptr;

	if (p < end && *p == ',' &&
	    usage_plain_string(usage_member_from(usage_skip_ws(p + 1, end), end, "service_tier"),
	                       end, usage_tier_ok, out->service_tier, sizeof(out->service_tier)))
		return;
	while ((at = memmem(at, (size_t)(end - at), "data:", 5))) {
		const char *obj = usage_skip_ws(at + 5, end), *t = usage_member(obj, end, "type");

		if (t && end - t > 10 && memcmp(t, "\"response.", 10) == 0 &&
		    ((end - t >= 20 && memcmp(t + 10, "completed\"", 10) == 0) ||
		     (end - t >= 21 && memcmp(t + 10, "incomplete\"", 11) == 0) ||
		     (end - t >= 17 && memcmp(t + 10, "failed\"", 7) == 0)))
			ev = obj;
		at += 5;
	}
	if (ev)
		usage_plain_string(usage_member(usage_member(ev, end, "response"), end, "service_tier"),
		                   end, usage_tier_ok, out->service_tier, sizeof(out->service_tier));
}

void usage_from_capture(const char *head, size_t hlen, const char *tail, size_t tlen,
                        int sse, struct usage *out)
{
	struct usage_seg text = { head ? head : "", hlen + tlen };
	struct usage_obj first, last;
	const struct usage_obj *final;
	char *joined = NULL;

	usage_init(out);
	if (tlen && text.ptr + hlen != tail) {
		/* Out of memory: no usage, as if none had been reported. */
		if (!(joined = malloc(hlen + tlen)))
			return;
		memcpy(joined, text.ptr, hlen);
		memcpy(joined + hlen, tail, tlen);
		text.ptr = joined;
	}
	usage_find_model(text, out->model, sizeof(out->model));
	usage_scan(text, sse, &first, &last);
	final = last.json ? &last : &first;
	if (!final->json)
		goto out;
	if (!usage_is_anthropic(final->json)) {
		usage_openai(final->json, out);
		out->source = usage_source_if_counts(out, sse ? ACCT_USAGE_STREAM
		                                              : ACCT_USAGE_RESPONSE);
	} else if (sse) {
		usage_anthropic_stream(&first, final, out);
	} else {
		usage_anthropic_input(final->json, out);
		usage_anthropic_output(final->json, out);
		out->source = usage_source_if_counts(out, ACCT_USAGE_RESPONSE);
	}
	/* OpenAI names the tier in the object that holds the usage, else the head's answer
	 * (or first chunk, or response.created) may. */
	if (!out->service_tier[0])
		usage_tier_beside(text, final->end, out);
	if (!out->service_tier[0])
		usage_head_string(head, hlen, sse, 0, "service_tier", usage_tier_ok,
		                  out->service_tier, sizeof(out->service_tier));
out:
	cJSON_Delete(first.json);
	cJSON_Delete(last.json);
	free(joined);
}

/* A count from a record field: HAProxy prints any int64 json_query gave it. */
static int64_t usage_bounded(int64_t v)
{
	return v >= 0 && v <= USAGE_MAX_COUNT ? v : ACCT_NONE;
}

void usage_from_fields(const struct record *r, struct usage *out)
{
	int64_t u[RECORD_U_COUNT];
	int i;

	usage_init(out);
	snprintf(out->model, sizeof(out->model), "%s", r->u_model);
	for (i = 0; i < RECORD_U_COUNT; i++)
		u[i] = usage_bounded(r->u[i]);
	if (u[RECORD_U_INPUT] != ACCT_NONE || u[RECORD_U_OUTPUT] != ACCT_NONE) {
		/* Anthropic's input leaves out its cache reads and writes; the Responses API's
		 * counts both, and names its cached tokens as OpenAI does (haproxy.cfg reads
		 * them into OpenAI's field, as the capture tells the two apart). */
		out->cache_creation_tokens = u[RECORD_U_CACHE_CREATION];
		if (u[RECORD_U_CACHED] != ACCT_NONE) {
			out->prompt_tokens = u[RECORD_U_INPUT];
			out->cached_tokens = u[RECORD_U_CACHED];
		} else {
			out->prompt_tokens = usage_total_input(u[RECORD_U_INPUT], u[RECORD_U_CACHE_READ],
			                                       out->cache_creation_tokens);
			out->cached_tokens = u[RECORD_U_CACHE_READ];
		}
		out->reasoning_tokens = u[RECORD_U_REASONING];
		out->completion_tokens = u[RECORD_U_OUTPUT];
	} else if (u[RECORD_U_PROMPT] != ACCT_NONE || u[RECORD_U_COMPLETION] != ACCT_NONE) {
		/* OpenAI's cache writes come in the field of Anthropic's (haproxy.cfg). */
		out->cache_creation_tokens = u[RECORD_U_CACHE_CREATION];
		out->prompt_tokens = u[RECORD_U_PROMPT];
		out->completion_tokens = u[RECORD_U_COMPLETION];
		out->cached_tokens = u[RECORD_U_CACHED];
		out->reasoning_tokens = u[RECORD_U_REASONING];
	} else {
		return;
	}
	out->cache_creation_1h_tokens = u[RECORD_U_CACHE_1H];
	out->audio_input_tokens = u[RECORD_U_AUDIO_INPUT];
	out->audio_output_tokens = u[RECORD_U_AUDIO_OUTPUT];
	out->accepted_prediction_tokens = u[RECORD_U_PREDICTION_ACCEPTED];
	out->rejected_prediction_tokens = u[RECORD_U_PREDICTION_REJECTED];
	out->web_search_calls = u[RECORD_U_WEB_SEARCH];
	if (r->u_tier.len < sizeof(out->service_tier)) {
		memcpy(out->service_tier, r->u_tier.ptr ? r->u_tier.ptr : "", r->u_tier.len);
		out->service_tier[r->u_tier.len] = '\0';
	}
	out->source = ACCT_USAGE_RESPONSE;
}

void usage_response_id(const char *head, size_t hlen, int sse, char *out, size_t cap)
{
	usage_head_string(head, hlen, sse, 1, "id", acct_response_id_ok, out, cap);
}
