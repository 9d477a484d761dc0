/* tags: the syntax of tags (see tags.h). Pure; any thread. */
#include "tags.h"

#include <string.h>

#define TAGS_STR(x) #x
#define TAGS_XSTR(x) TAGS_STR(x)

static int tags_name_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

static int tags_value_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == ':' || c == '/' || c == '@' || c == '+' || c == '-';
}

/* One tag of s (n bytes, no spaces) into *tag. */
static enum tags_status tags_one(const char *s, size_t n, struct tags_tag *tag)
{
	const char *eq = memchr(s, '=', n);
	size_t nl, vl, i;

	if (!eq)
		return TAGS_MALFORMED;
	nl = (size_t)(eq - s);
	vl = n - nl - 1;
	if (nl == 0 || vl == 0 || s[0] < 'a' || s[0] > 'z')
		return TAGS_MALFORMED;
	for (i = 0; i < nl; i++)
		if (!tags_name_char((unsigned char)s[i]))
			return TAGS_MALFORMED;
	for (i = 0; i < vl; i++)
		if (!tags_value_char((unsigned char)eq[1 + i]))
			return TAGS_MALFORMED;
	if (nl > TAGS_NAME_MAX || vl > TAGS_VALUE_MAX)
		return TAGS_TOO_LONG;
	memcpy(tag->name, s, nl);
	tag->name[nl] = '\0';
	memcpy(tag->value, eq + 1, vl);
	tag->value[vl] = '\0';
	return TAGS_OK;
}

int tags_tag_ok(const char *s, size_t n)
{
	struct tags_tag tag;

	return tags_one(s, n, &tag) == TAGS_OK;
}

/* Where name would go in t (its index if present); *found says which. */
static size_t tags_find(const struct tags *t, const char *name, int *found)
{
	size_t i;
	int c = 1;

	for (i = 0; i < t->n && (c = strcmp(t->t[i].name, name)) < 0; i++)
		;
	*found = i < t->n && c == 0;
	return i;
}

/* Puts tag into t at its place; the caller checked it is absent and t has room. */
static void tags_insert(struct tags *t, size_t at, const struct tags_tag *tag)
{
	memmove(&t->t[at + 1], &t->t[at], (t->n - at) * sizeof(t->t[0]));
	t->t[at] = *tag;
	t->n++;
}

static int tags_space(char c)
{
	return c == ' ' || c == '\t';
}

enum tags_status tags_parse(const char *s, size_t n, struct tags *out)
{
	size_t i = 0;

	out->n = 0;
	if (n == 0)
		return TAGS_OK;
	for (;;) {
		size_t a, b, at;
		struct tags_tag tag;
		enum tags_status st;
		int found;

		while (i < n && tags_space(s[i]))
			i++;
		a = i;
		while (i < n && s[i] != ',')
			i++;
		b = i;
		while (b > a && tags_space(s[b - 1]))
			b--;
		if ((st = tags_one(s + a, b - a, &tag)) != TAGS_OK)
			return st;
		at = tags_find(out, tag.name, &found);
		if (found)
			return TAGS_TWICE;
		if (out->n == TAGS_MAX)
			return TAGS_TOO_MANY;
		tags_insert(out, at, &tag);
		if (i == n)
			return TAGS_OK;
		i++;   /* the comma: an item must follow */
	}
}

enum tags_status tags_fix(struct tags *t, const struct tags *fixed)
{
	struct tags u = *t;
	size_t i;

	for (i = 0; i < fixed->n; i++) {
		int found;
		size_t at = tags_find(&u, fixed->t[i].name, &found);

		if (found) {
			if (strcmp(u.t[at].value, fixed->t[i].value) != 0)
				return TAGS_CONFLICT;
			continue;
		}
		if (u.n == TAGS_MAX)
			return TAGS_TOO_MANY;
		tags_insert(&u, at, &fixed->t[i]);
	}
	*t = u;
	return TAGS_OK;
}

enum tags_status tags_union(struct tags *out, const struct tags *a, const struct tags *b)
{
	enum tags_status st = TAGS_OK;
	size_t i;

	*out = *b;
	for (i = 0; i < a->n; i++) {
		int found;
		size_t at = tags_find(out, a->t[i].name, &found);

		if (found)
			continue;
		if (out->n == TAGS_MAX) {
			st = TAGS_TOO_MANY;
			continue;
		}
		tags_insert(out, at, &a->t[i]);
	}
	return st;
}

size_t tags_format(const struct tags *t, char *out, size_t cap)
{
	size_t len = 0, i;

	if (cap == 0)
		return 0;
	out[0] = '\0';
	for (i = 0; i < t->n; i++) {
		size_t nl = strlen(t->t[i].name), vl = strlen(t->t[i].value);

		if (len + (i > 0) + nl + 1 + vl >= cap)
			break;
		if (i > 0)
			out[len++] = ',';
		memcpy(out + len, t->t[i].name, nl);
		len += nl;
		out[len++] = '=';
		memcpy(out + len, t->t[i].value, vl);
		len += vl;
		out[len] = '\0';
	}
	return len;
}

const char *tags_status_text(enum tags_status st)
{
	switch (st) {
	case TAGS_OK:
		return "";
	case TAGS_MALFORMED:
		return "tags are name=value separated by commas; a name is [a-z0-9_.-] starting"
		       " with a letter, a value [A-Za-z0-9_.:/@+-]";
	case TAGS_TOO_LONG:
		return "a tag's name is at most " TAGS_XSTR(TAGS_NAME_MAX) " bytes and its value at most "
		       TAGS_XSTR(TAGS_VALUE_MAX);
	case TAGS_TOO_MANY:
		return "at most " TAGS_XSTR(TAGS_MAX) " tags, the key's and team's fixed tags included";
	case TAGS_TWICE:
		return "a tag's name appears twice";
	case TAGS_CONFLICT:
		return "a tag's name is fixed by the key or its team to another value";
	}
	return "";
}
