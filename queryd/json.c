/* json: cJSON helpers for exact integers and valid UTF-8 strings (see json.h). Any
 * thread. */
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
