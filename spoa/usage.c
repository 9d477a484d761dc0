/* usage: reading reported token usage (see usage.h). Pure; intake thread.
 *
 * A capture is a fragment: the tail may start inside a string. A `"usage":` key can
 * still be found by bytes alone, because a quote inside a JSON string is escaped, and
 * every candidate is confirmed by parsing its object with cJSON. */
#include "usage.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#define USAGE_MAX_COUNT 9007199254740991.0   /* 2^53 - 1: exact in a double */

struct usage_obj {
	cJSON *json;
	const char *at;      /* where the key was found, to tell objects apart */
};

static void usage_init(struct usage *u)
{
	memset(u, 0, sizeof(*u));
	u->prompt_tokens = u->completion_tokens = u->cached_tokens = ACCT_NONE;
	u->cache_creation_tokens = u->reasoning_tokens = ACCT_NONE;
	u->source = ACCT_USAGE_NONE;
}

static const char *usage_skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	return p;
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
	return p < end && strchr(starts, *p) ? p : NULL;
}

/* The first (last = 0) or last (last = 1) `"usage": {...}` object in [buf, buf+len)
 * that parses. The caller deletes o->json. */
static int usage_find_obj(const char *buf, size_t len, int last, struct usage_obj *o)
{
	const char *p = buf, *end = buf + len;

	o->json = NULL;
	while (p < end && (p = memmem(p, (size_t)(end - p), "\"usage\"", 7))) {
		const char *v = usage_value_at(p, end, "usage", "{");
		cJSON *j;

		if (v && (j = cJSON_ParseWithLengthOpts(v, (size_t)(end - v), NULL, 0))) {
			if (cJSON_IsObject(j)) {
				cJSON_Delete(o->json);
				o->json = j;
				o->at = p;
				if (!last)
					return 1;
			} else {
				cJSON_Delete(j);
			}
		}
		p += 7;
	}
	return o->json != NULL;
}

/* The first `"model": "<string>"` in the fragment, decoded by cJSON. */
static void usage_find_model(const char *buf, size_t len, char *out, size_t cap)
{
	const char *p = buf, *end = buf + len;

	while (p < end && (p = memmem(p, (size_t)(end - p), "\"model\"", 7))) {
		const char *v = usage_value_at(p, end, "model", "\"");
		cJSON *j;

		if (v && (j = cJSON_ParseWithLengthOpts(v, (size_t)(end - v), NULL, 0))) {
			int ok = cJSON_IsString(j) && j->valuestring && *j->valuestring &&
			         strlen(j->valuestring) < cap;

			if (ok)
				memcpy(out, j->valuestring, strlen(j->valuestring) + 1);
			cJSON_Delete(j);
			if (ok)
				return;
		}
		p += 7;
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
	if (!(d >= 0) || d > USAGE_MAX_COUNT || d != (double)(int64_t)d)
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

static int64_t usage_sum(int64_t a, int64_t b, int64_t c)
{
	return (a == ACCT_NONE ? 0 : a) + (b == ACCT_NONE ? 0 : b) + (c == ACCT_NONE ? 0 : c);
}

/* Anthropic input side: input, cache read, cache creation (from one usage object). */
static void usage_anthropic_input(const cJSON *u, struct usage *out)
{
	int64_t input = usage_count(u, "input_tokens");

	out->cached_tokens = usage_count(u, "cache_read_input_tokens");
	out->cache_creation_tokens = usage_count(u, "cache_creation_input_tokens");
	out->prompt_tokens = input == ACCT_NONE ? ACCT_NONE
	                   : usage_sum(input, out->cached_tokens, out->cache_creation_tokens);
}

static void usage_openai(const cJSON *u, struct usage *out)
{
	out->prompt_tokens = usage_count(u, "prompt_tokens");
	out->completion_tokens = usage_count(u, "completion_tokens");
	out->cached_tokens = usage_nested(u, "prompt_tokens_details", "cached_tokens");
	out->reasoning_tokens = usage_nested(u, "completion_tokens_details", "reasoning_tokens");
}

void usage_from_capture(const char *head, size_t hlen, const char *tail, size_t tlen,
                        int gap, int sse, struct usage *out)
{
	struct usage_obj first = { 0 }, final = { 0 };
	const char *body = tail;
	size_t blen = tlen;

	usage_init(out);
	/* Without a gap head and tail are one body: search them as one (the key may sit
	 * across the seam). A short body is all head. */
	if (!gap && head + hlen == tail)
		body = head, blen = hlen + tlen;
	else if (!gap && tlen == 0)
		body = head, blen = hlen;
	usage_find_model(head, hlen, out->model, sizeof(out->model));
	if (!out->model[0])
		usage_find_model(body, blen, out->model, sizeof(out->model));
	if (!usage_find_obj(body, blen, 1, &final) && !(gap && usage_find_obj(head, hlen, 1, &final)))
		return;
	if (!usage_is_anthropic(final.json)) {
		usage_openai(final.json, out);
		out->source = sse ? ACCT_USAGE_STREAM : ACCT_USAGE_RESPONSE;
		goto out;
	}
	if (!sse) {
		usage_anthropic_input(final.json, out);
		out->completion_tokens = usage_count(final.json, "output_tokens");
		out->source = ACCT_USAGE_RESPONSE;
		goto out;
	}
	/* An Anthropic stream: input in message_start (the first usage), output in the
	 * last message_delta. If the last is message_start's, the stream was cut. */
	usage_find_obj(gap ? head : body, gap ? hlen : blen, 0, &first);
	if (first.json && (!gap && first.at == final.at)) {
		usage_anthropic_input(first.json, out);
		out->source = ACCT_USAGE_PARTIAL;
		goto out;
	}
	usage_anthropic_input(cJSON_HasObjectItem(final.json, "input_tokens") || !first.json
	                      ? final.json : first.json, out);
	out->completion_tokens = usage_count(final.json, "output_tokens");
	out->source = ACCT_USAGE_STREAM;
out:
	cJSON_Delete(first.json);
	cJSON_Delete(final.json);
}

void usage_from_fields(const struct record *r, struct usage *out)
{
	const int64_t *u = r->u;

	usage_init(out);
	snprintf(out->model, sizeof(out->model), "%s", r->u_model);
	if (u[RECORD_U_INPUT] != ACCT_NONE || u[RECORD_U_OUTPUT] != ACCT_NONE) {
		out->cached_tokens = u[RECORD_U_CACHE_READ];
		out->cache_creation_tokens = u[RECORD_U_CACHE_CREATION];
		out->prompt_tokens = u[RECORD_U_INPUT] == ACCT_NONE ? ACCT_NONE
		                   : usage_sum(u[RECORD_U_INPUT], out->cached_tokens,
		                               out->cache_creation_tokens);
		out->completion_tokens = u[RECORD_U_OUTPUT];
	} else if (u[RECORD_U_PROMPT] != ACCT_NONE || u[RECORD_U_COMPLETION] != ACCT_NONE) {
		out->prompt_tokens = u[RECORD_U_PROMPT];
		out->completion_tokens = u[RECORD_U_COMPLETION];
		out->cached_tokens = u[RECORD_U_CACHED];
		out->reasoning_tokens = u[RECORD_U_REASONING];
	} else {
		return;
	}
	out->source = ACCT_USAGE_RESPONSE;
}
