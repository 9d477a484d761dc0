/* libFuzzer target: tags (common/tags.h), as a request's X-Tally-Tags header brings
 * them and tallyctl's --tags and queryd's tag filter take them.
 * Input: the header's value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tags.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What any set the parser accepts must be: sorted names, each tag one tags_tag_ok
 * takes, a canonical text that fits and reads back to itself. */
static void fuzz_tags_check(const struct tags *t)
{
	char text[TAGS_TEXT_MAX], again[TAGS_TEXT_MAX], one[TAGS_TAG_MAX];
	struct tags back, fixed = *t, u;
	size_t i, len;

	if (t->n > TAGS_MAX)
		abort();
	for (i = 0; i < t->n; i++) {
		int n = snprintf(one, sizeof(one), "%s=%s", t->t[i].name, t->t[i].value);

		if (n <= 0 || (size_t)n >= sizeof(one) || !tags_tag_ok(one, (size_t)n) ||
		    (i > 0 && strcmp(t->t[i - 1].name, t->t[i].name) >= 0))
			abort();
	}
	len = tags_format(t, text, sizeof(text));
	if (len != strlen(text) || tags_parse(text, len, &back) != TAGS_OK ||
	    tags_format(&back, again, sizeof(again)) != len || strcmp(text, again) != 0)
		abort();
	/* A set fixed on itself changes nothing; a union with itself is itself. */
	if (tags_fix(&fixed, t) != TAGS_OK || tags_format(&fixed, again, sizeof(again)) != len ||
	    strcmp(text, again) != 0 || tags_union(&u, t, t) != TAGS_OK || u.n != t->n)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tags t;

	if (tags_parse((const char *)data, size, &t) == TAGS_OK)
		fuzz_tags_check(&t);
	return 0;
}
