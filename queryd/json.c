/* json: cJSON helpers for exact integers and valid UTF-8 strings, and the printer of
 * queryd's JSON text (see json.h). Any thread. */
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. Rejects
 * overlong forms, surrogates and code points above U+10FFFF, as RFC 3629 does. */
static size_t json_utf8_len(const unsigned char *s, size_t n)
{
	size_t len, i;
	unsigned cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

char *json_utf8_dup(const char *s, size_t len)
{
	static const char replacement[] = "\xef\xbf\xbd";
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, o = 0, k;
	char *out;

	/* An invalid byte becomes 3. cJSON takes NUL-terminated strings: a NUL inside
	 * would cut the string short, so it becomes U+FFFD too. */
	out = malloc(len * 3 + 1);
	if (!out)
		return NULL;
	while (i < len) {
		k = u[i] ? json_utf8_len(u + i, len - i) : 0;
		if (k) {
			memcpy(out + o, s + i, k);
			o += k;
			i += k;
		} else {
			memcpy(out + o, replacement, 3);
			o += 3;
			i++;
		}
	}
	out[o] = '\0';
	return out;
}

cJSON *json_string(const char *s, size_t len)
{
	char *clean = json_utf8_dup(s, len);
	cJSON *item;

	if (!clean)
		return NULL;
	item = cJSON_CreateString(clean);
	free(clean);
	return item;
}

cJSON *json_int(int64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%lld", (long long)v);
	return cJSON_CreateRaw(buf);
}

cJSON *json_uint(uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	return cJSON_CreateRaw(buf);
}

/* 1 if the n bytes at s start with U+2028 or U+2029 (E2 80 A8, E2 80 A9). */
static int json_is_separator(const unsigned char *s, size_t n)
{
	return n >= 3 && s[0] == 0xe2 && s[1] == 0x80 && (s[2] == 0xa8 || s[2] == 0xa9);
}

char *json_print(const cJSON *item)
{
	char *text = cJSON_PrintUnformatted(item), *out;
	const unsigned char *u = (const unsigned char *)text;
	size_t i, o = 0, len, seps = 0;

	if (!text)
		return NULL;
	/* UTF-8 resynchronises: these bytes are the code point wherever they stand, and in
	 * cJSON's text only inside a string, where \u2028 means the same. */
	len = strlen(text);
	for (i = 0; i < len; i++)
		seps += json_is_separator(u + i, len - i);
	if (!seps)
		return text;
	out = malloc(len + seps * 3 + 1);   /* 3 bytes become 6 */
	for (i = 0; out && i < len; i++) {
		if (json_is_separator(u + i, len - i)) {
			memcpy(out + o, u[i + 2] == 0xa8 ? "\\u2028" : "\\u2029", 6);
			o += 6;
			i += 2;
		} else {
			out[o++] = text[i];
		}
	}
	if (out)
		out[o] = '\0';
	free(text);
	return out;
}

int json_add(cJSON *obj, const char *name, cJSON *item)
{
	if (!item)
		return -1;
	if (!cJSON_AddItemToObject(obj, name, item)) {
		cJSON_Delete(item);
		return -1;
	}
	return 0;
}

int json_add_int(cJSON *obj, const char *name, int64_t v)
{
	return json_add(obj, name, json_int(v));
}

int json_add_str(cJSON *obj, const char *name, const char *s)
{
	return json_add(obj, name, s ? json_string(s, strlen(s)) : cJSON_CreateNull());
}

int json_add_double(cJSON *obj, const char *name, double v)
{
	return json_add(obj, name, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
}

int json_add_null(cJSON *obj, const char *name)
{
	return json_add(obj, name, cJSON_CreateNull());
}
