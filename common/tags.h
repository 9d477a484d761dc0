/* tags: the syntax of tags (docs/limits.md, "Tags"), as requests send them
 * (X-Tally-Tags: feature=search, env=prod), keys and teams fix them, rows and
 * the tag rollups store them and tag budgets and queryd's filters name them. The one rule for
 * all of them: the agent, tallyctl and queryd take the same tags. Pure; any thread.
 *
 * A tag is name=value. A name is 1 to TAGS_NAME_MAX bytes of [a-z0-9_.-] starting with a
 * letter; a value 1 to TAGS_VALUE_MAX bytes of [A-Za-z0-9_.:/@+-]. Neither holds a
 * comma, an equals sign, a space or a quote, so a set of tags has one spelling, its
 * canonical text: the tags sorted by name, joined by single commas. */
#ifndef TALLY_TAGS_H
#define TALLY_TAGS_H

#include <stddef.h>

#define TAGS_MAX 8            /* tags of one request, fixed ones included */
#define TAGS_NAME_MAX 32
#define TAGS_VALUE_MAX 64
/* Bytes of one tag's text and of a set's canonical text, NUL included. */
#define TAGS_TAG_MAX (TAGS_NAME_MAX + 1 + TAGS_VALUE_MAX + 1)
#define TAGS_TEXT_MAX (TAGS_MAX * TAGS_TAG_MAX)
/* Bytes of the X-Tally-Tags header's value as sent (spaces after commas included). */
#define TAGS_HEADER_MAX 1024

/* A set of tags, sorted by name, each name at most once. */
struct tags {
	size_t n;
	struct tags_tag {
		char name[TAGS_NAME_MAX + 1];
		char value[TAGS_VALUE_MAX + 1];
	} t[TAGS_MAX];
};

enum tags_status {
	TAGS_OK,
	TAGS_MALFORMED,       /* not a list of name=value (an empty item, a bad character) */
	TAGS_TOO_LONG,        /* a name or a value over its bound */
	TAGS_TOO_MANY,        /* more than TAGS_MAX */
	TAGS_TWICE,           /* a name twice */
	TAGS_CONFLICT,        /* tags_fix: a name fixed to another value */
};

/* Reads s (n bytes): tags separated by commas, each with optional spaces or tabs
 * around it (an HTTP list), into *out sorted. n 0 is no tags. */
enum tags_status tags_parse(const char *s, size_t n, struct tags *out);

/* Whether s (n bytes) is one tag (name=value), without spaces. */
int tags_tag_ok(const char *s, size_t n);

/* Adds the fixed tags to *t: a name of both must have the same value (TAGS_CONFLICT
 * otherwise), and the union must fit (TAGS_TOO_MANY). *t is unchanged unless TAGS_OK. */
enum tags_status tags_fix(struct tags *t, const struct tags *fixed);

/* The union of a and b where b's value wins for a name of both (a team's fixed tags
 * over its key's). TAGS_TOO_MANY if it has more than TAGS_MAX names (*out then holds
 * the first TAGS_MAX in order). */
enum tags_status tags_union(struct tags *out, const struct tags *a, const struct tags *b);

/* Writes t's canonical text into out (cap bytes, TAGS_TEXT_MAX always fits); "" for
 * none. Returns its length. */
size_t tags_format(const struct tags *t, char *out, size_t cap);

/* What a status means, for error messages ("" for TAGS_OK). */
const char *tags_status_text(enum tags_status st);

#endif
