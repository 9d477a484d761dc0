/* libFuzzer target: the answer reader, differential. A body is read as HAProxy's
 * capture filter reads it (haproxy/capture.lua under an embedded Lua, tests/unit/luacap.c,
 * in reads of a size the input picks) and then by spoa/usage.c; where cJSON parses the
 * answer, the usage, model and id must be what usage.c reads from the whole parsed
 * answer at the documented paths. Whatever the body, Lua must not fail and the same
 * body must give the same summary at every read size.
 * Input: one byte (read size - 1), one byte of flags (bit 1: an event stream whose
 * events' data are the lines of the rest; bit 2: CRLF line ends), then the body. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct.h"
#include "luacap.h"
#include "usage.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FIELD_MAX 16384

static int fuzz_answer_same(const struct usage *a, const struct usage *b)
{
	return a->prompt_tokens == b->prompt_tokens && a->completion_tokens == b->completion_tokens &&
	       a->cached_tokens == b->cached_tokens &&
	       a->cache_creation_tokens == b->cache_creation_tokens &&
	       a->reasoning_tokens == b->reasoning_tokens && a->source == b->source &&
	       strcmp(a->model, b->model) == 0 && strcmp(a->service_tier, b->service_tier) == 0;
}

/* Whether v holds a number of 16 or more digits: cJSON prints those with 15 significant
 * digits when the rounded value is within DBL_EPSILON of it, so the reference (made from
 * cJSON's print) would differ from the body the filter read. */
static int fuzz_answer_wide(const cJSON *v)
{
	const cJSON *c;

	if (cJSON_IsNumber(v))
		return fabs(v->valuedouble) >= 1e15;
	for (c = v ? v->child : NULL; c; c = c->next)
		if (fuzz_answer_wide(c))
			return 1;
	return 0;
}

/* Whether a kept member of the answer is longer than the filter keeps (then the filter
 * rightly reads none of it) or holds what the reference cannot print exactly. */
static int fuzz_answer_long(const cJSON *answer)
{
	static const char *const kept[] = { "model", "usage", "id", "service_tier", "type" };
	size_t i;

	for (i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(answer, kept[i]);
		char *text = v ? cJSON_PrintUnformatted(v) : NULL;
		int over = text && strlen(text) > 1000;

		free(text);
		if (over || fuzz_answer_wide(v))
			return 1;
	}
	return 0;
}

/* Whether body has a control byte JSON does not allow (cJSON takes any as white space,
 * JSON only space, tab, CR and LF). */
static int fuzz_answer_controls(const char *body, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if ((unsigned char)body[i] < 0x20 && !memchr("\t\r\n", body[i], 3))
			return 1;
	return 0;
}

/* The event stream whose events' data are the lines of text (empty ones skipped), and
 * the summary cJSON gives of it as the filter keeps events: the first, the first and the
 * last with a usage object at a documented path. Both malloc'd; NULL if none. */
static char *fuzz_answer_stream(const char *text, size_t len, int crlf, char **ref, int *skip)
{
	const char *nl = crlf ? "\r\n" : "\n";
	/* A line of one byte and its newline become "data: " + 1 + two CRLFs: 11 of 2. */
	size_t cap = len * 6 + 64, n = 0;
	char *out = malloc(cap), *line;
	cJSON *list = cJSON_CreateArray(), *first = NULL, *start = NULL, *last = NULL, *e;
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *q = memchr(p, '\n', (size_t)(end - p));
		size_t l = (size_t)((q ? q : end) - p);

		if (l) {
			cJSON *d;

			n += (size_t)snprintf(out + n, cap - n, "data: %.*s%s%s", (int)l, p, nl, nl);
			line = strndup(p, l);
			d = cJSON_Parse(line);
			free(line);
			if (!cJSON_IsObject(d)) {
				/* A broken event the filter may still read part of: not compared. */
				*skip |= memchr(p, '{', l) != NULL;
				cJSON_Delete(d);
				d = cJSON_CreateObject();
			}
			*skip |= fuzz_answer_long(d) ||
			         fuzz_answer_long(cJSON_GetObjectItemCaseSensitive(d, "message")) ||
			         fuzz_answer_long(cJSON_GetObjectItemCaseSensitive(d, "response"));
			e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "r", "");
			cJSON_AddStringToObject(e, "e", "");
			cJSON_AddItemToObject(e, "d", d);
			if (!first)
				first = e;
			if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(d, "usage")) ||
			    cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(
			        cJSON_GetObjectItemCaseSensitive(d, "message"), "usage")) ||
			    cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(
			        cJSON_GetObjectItemCaseSensitive(d, "response"), "usage"))) {
				if (!start)
					start = e;
				last = e;
			}
			cJSON_AddItemToArray(list, e);
		}
		p = q ? q + 1 : end;
	}
	out[n] = '\0';
	/* Roles, then only the events that have one. */
	cJSON_ArrayForEach(e, list) {
		char r[4] = "";

		if (e == first)
			strcat(r, "f");
		if (e == start)
			strcat(r, "s");
		if (e == last)
			strcat(r, "l");
		cJSON_ReplaceItemInObject(e, "r", cJSON_CreateString(r));
	}
	{
		cJSON *sum = cJSON_CreateObject(), *kept = cJSON_CreateArray();

		cJSON_ArrayForEach(e, list) {
			const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "r");

			if (r->valuestring[0])
				cJSON_AddItemToArray(kept, cJSON_Duplicate(e, 1));
		}
		cJSON_AddItemToObject(sum, "ev", kept);
		*ref = cJSON_PrintUnformatted(sum);
		cJSON_Delete(sum);
	}
	cJSON_Delete(list);
	return out;
}

/* Whether body has, inside a JSON string, a raw control byte or an escape JSON does
 * not have (cJSON takes both; the filter keeps no such string). */
static int fuzz_answer_raw_in_string(const char *body, size_t len)
{
	int in = 0;
	size_t i, k;

	for (i = 0; i < len; i++) {
		if (in && body[i] == '\\') {
			if (++i >= len || !memchr("\"\\/bfnrtu", body[i], 9))
				return 1;
			for (k = 1; body[i] == 'u' && k <= 4; k++)
				if (i + k >= len || !isxdigit((unsigned char)body[i + k]))
					return 1;
		} else if (body[i] == '"')
			in = !in;
		else if (in && (unsigned char)body[i] < 0x20)
			return 1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char whole[FIELD_MAX], field[FIELD_MAX];
	char id_lua[ACCT_RESPONSE_ID_MAX], id_ref[ACCT_RESPONSE_ID_MAX];
	const char *body = (const char *)data + 2, *sum;
	size_t len = size - 2;
	struct usage lua, ref;
	int64_t ws;
	cJSON *answer, *wrap;
	char *text;

	if (size < 2 || size > 65536)
		return 0;
	if (data[1] & 1) {
		char *ref = NULL, *stream;
		struct usage lua_s, ref_s;
		int skip = 0;

		/* Lines whose bytes JSON or the event framing read otherwise are not compared. */
		if (fuzz_answer_controls(body, len) || memchr(body, '\r', len) ||
		    fuzz_answer_raw_in_string(body, len) ||
		    memmem(body, len, "\\u0000", 6))
			return 0;
		stream = fuzz_answer_stream(body, len, data[1] & 2, &ref, &skip);
		if (!skip && stream && ref && luacap_read(stream, strlen(stream), (size_t)data[0] + 1, 1, 1,
		                                 field, sizeof(field), &ws) == 0) {
			sum = luacap_summary(field);
			usage_from_capture(sum, sum ? strlen(sum) : 0, 1, &lua_s);
			usage_from_capture(ref, strlen(ref), 1, &ref_s);
			if (!fuzz_answer_same(&lua_s, &ref_s) && strlen(field) < FIELD_MAX - 1) {
				fprintf(stderr, "stream lua: %s\nref: %s\n", field, ref);
				abort();
			}
		}
		free(stream);
		free(ref);
		return 0;
	}
	if (luacap_read(body, len, 0, 0, 1, whole, sizeof(whole), &ws) < 0) {
		/* Nothing published: only a body with nothing but white space. */
		for (size_t i = 0; i < len; i++)
			if (!memchr(" \t\r\n\v\f", body[i], 6))
				abort();
		return 0;
	}
	if (luacap_read(body, len, (size_t)data[0] + 1, 0, 1, field, sizeof(field), &ws) < 0 ||
	    strcmp(field, whole) != 0)
		abort();
	sum = luacap_summary(whole);
	usage_from_capture(sum, sum ? strlen(sum) : 0, 0, &lua);
	usage_response_id(sum, sum ? strlen(sum) : 0, 0, id_lua, sizeof(id_lua));
	answer = cJSON_ParseWithLength(body, len);
	/* A member whose text spells a NUL is kept by no one: the filter drops it. */
	if (!cJSON_IsObject(answer) || fuzz_answer_long(answer) || fuzz_answer_controls(body, len) ||
	    fuzz_answer_raw_in_string(body, len) ||
	    memmem(body, len, "\\u0000", 6)) {
		cJSON_Delete(answer);
		return 0;
	}
	wrap = cJSON_CreateObject();
	cJSON_AddItemToObject(wrap, "a", answer);
	text = cJSON_PrintUnformatted(wrap);
	cJSON_Delete(wrap);
	if (!text)
		return 0;
	usage_from_capture(text, strlen(text), 0, &ref);
	usage_response_id(text, strlen(text), 0, id_ref, sizeof(id_ref));
	free(text);
	if (!fuzz_answer_same(&lua, &ref) || strcmp(id_lua, id_ref) != 0) {
		fprintf(stderr, "lua: %lld %lld '%s' | ref: %lld %lld '%s'\n",
		        (long long)lua.prompt_tokens, (long long)lua.completion_tokens, lua.model,
		        (long long)ref.prompt_tokens, (long long)ref.completion_tokens, ref.model);
		abort();
	}
	return 0;
}
