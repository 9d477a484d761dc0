/* libFuzzer target: the answer reader, differential. A unary body is read as HAProxy's
 * capture filter reads it (haproxy/capture.lua under an embedded Lua, tests/unit/luacap.c,
 * in reads of a size the input picks) and then by spoa/usage.c; when cJSON parses the
 * whole body, the usage, model and id must be what usage.c reads from the whole parsed
 * answer at the documented paths. Whatever the body, Lua must not fail and the same
 * body must give the same summary at every read size.
 * Input: one byte (read size - 1), then the body. */
#include <cjson/cJSON.h>
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

/* Whether a kept member of the answer is longer than the filter keeps: then the filter
 * rightly reads none of it. */
static int fuzz_answer_long(const cJSON *answer)
{
	static const char *const kept[] = { "model", "usage", "id", "service_tier", "type" };
	size_t i;

	for (i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(answer, kept[i]);
		char *text = v ? cJSON_PrintUnformatted(v) : NULL;
		int over = text && strlen(text) > 1000;

		free(text);
		if (over)
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char whole[FIELD_MAX], field[FIELD_MAX];
	char id_lua[ACCT_RESPONSE_ID_MAX], id_ref[ACCT_RESPONSE_ID_MAX];
	const char *body = (const char *)data + 1, *sum;
	size_t len = size - 1;
	struct usage lua, ref;
	int64_t ws;
	cJSON *answer, *wrap;
	char *text;

	if (size < 1 || size > 65536)
		return 0;
	if (luacap_read(body, len, 0, 0, 1, whole, sizeof(whole), &ws) < 0) {
		/* Nothing published: only a body with nothing but white space. */
		if (strspn(body, " \t\r\n") < len && memchr(body, 0, len) == NULL)
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
