/* Unit tests of tags: what a list of tags may be, its canonical text, fixed tags. */
#include <string.h>

#include "tags.h"
#include "unit.h"

/* The canonical text of s, or the status's name when it is refused. */
static const char *canon(const char *s)
{
	static char out[TAGS_TEXT_MAX];
	struct tags t;
	enum tags_status st = tags_parse(s, strlen(s), &t);

	if (st != TAGS_OK) {
		static const char *const names[] = { "ok", "malformed", "too_long", "too_many",
		                                     "twice", "conflict" };
		return names[st];
	}
	tags_format(&t, out, sizeof(out));
	return out;
}

static void test_parse(void)
{
	CHECK_EQ_STR(canon(""), "");
	CHECK_EQ_STR(canon("feature=search"), "feature=search");
	CHECK_EQ_STR(canon("feature=search,env=prod"), "env=prod,feature=search");
	CHECK_EQ_STR(canon(" env=prod ,\tfeature=search\t"), "env=prod,feature=search");
	CHECK_EQ_STR(canon("a.b_c-9=A-z_0.9:/@+-"), "a.b_c-9=A-z_0.9:/@+-");
	/* what a list may not be */
	CHECK_EQ_STR(canon(","), "malformed");
	CHECK_EQ_STR(canon("env=prod,"), "malformed");
	CHECK_EQ_STR(canon("env=prod,,a=b"), "malformed");
	CHECK_EQ_STR(canon("env"), "malformed");
	CHECK_EQ_STR(canon("env="), "malformed");
	CHECK_EQ_STR(canon("=prod"), "malformed");
	CHECK_EQ_STR(canon("env=pr=od"), "malformed");
	CHECK_EQ_STR(canon("Env=prod"), "malformed");
	CHECK_EQ_STR(canon("9env=prod"), "malformed");
	CHECK_EQ_STR(canon("env=pr od"), "malformed");
	CHECK_EQ_STR(canon("env=\"prod\""), "malformed");
	CHECK_EQ_STR(canon("env=pr%2Cod"), "malformed");
	CHECK_EQ_STR(canon("env=caf\xc3\xa9"), "malformed");
	CHECK_EQ_STR(canon("env=a\nb=c"), "malformed");
	CHECK_EQ_STR(canon("env=prod,env=prod"), "twice");
	CHECK_EQ_STR(canon("a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8"), "a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8");
	CHECK_EQ_STR(canon("a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9"), "too_many");
}

static void test_bounds(void)
{
	char s[256];

	memset(s, 'n', TAGS_NAME_MAX);
	strcpy(s + TAGS_NAME_MAX, "=v");
	CHECK(strcmp(canon(s), s) == 0);
	memset(s, 'n', TAGS_NAME_MAX + 1);
	strcpy(s + TAGS_NAME_MAX + 1, "=v");
	CHECK_EQ_STR(canon(s), "too_long");
	strcpy(s, "n=");
	memset(s + 2, 'v', TAGS_VALUE_MAX);
	s[2 + TAGS_VALUE_MAX] = '\0';
	CHECK(strcmp(canon(s), s) == 0);
	strcpy(s + 2 + TAGS_VALUE_MAX, "v");
	CHECK_EQ_STR(canon(s), "too_long");
	CHECK(tags_tag_ok("project=atlas", 13));
	CHECK(!tags_tag_ok("project=atlas ", 14));
	CHECK(!tags_tag_ok("project=atlas,a=b", 17));
	CHECK(!tags_tag_ok("project", 7));
}

/* The longest set fits its text's bound. */
static void test_format_bound(void)
{
	struct tags t;
	char out[TAGS_TEXT_MAX];
	size_t i;

	t.n = TAGS_MAX;
	for (i = 0; i < TAGS_MAX; i++) {
		memset(t.t[i].name, 'a', TAGS_NAME_MAX);
		t.t[i].name[TAGS_NAME_MAX - 1] = (char)('a' + i);
		t.t[i].name[TAGS_NAME_MAX] = '\0';
		memset(t.t[i].value, 'v', TAGS_VALUE_MAX);
		t.t[i].value[TAGS_VALUE_MAX] = '\0';
	}
	CHECK_EQ_INT(tags_format(&t, out, sizeof(out)), TAGS_TEXT_MAX - 1);
	CHECK_EQ_INT(strlen(out), TAGS_TEXT_MAX - 1);
}

static void test_fix(void)
{
	struct tags req, fixed, key, team, u;
	char out[TAGS_TEXT_MAX];

	CHECK(tags_parse("feature=search,env=dev", 22, &req) == TAGS_OK);
	CHECK(tags_parse("env=prod", 8, &fixed) == TAGS_OK);
	CHECK(tags_fix(&req, &fixed) == TAGS_CONFLICT);
	tags_format(&req, out, sizeof(out));
	CHECK_EQ_STR(out, "env=dev,feature=search");   /* unchanged */
	CHECK(tags_parse("feature=search,env=prod", 23, &req) == TAGS_OK);
	CHECK(tags_fix(&req, &fixed) == TAGS_OK);
	tags_format(&req, out, sizeof(out));
	CHECK_EQ_STR(out, "env=prod,feature=search");
	CHECK(tags_parse("feature=search", 14, &req) == TAGS_OK);
	CHECK(tags_parse("project=atlas,env=prod", 22, &fixed) == TAGS_OK);
	CHECK(tags_fix(&req, &fixed) == TAGS_OK);
	tags_format(&req, out, sizeof(out));
	CHECK_EQ_STR(out, "env=prod,feature=search,project=atlas");
	CHECK(tags_parse("a=1,b=2,c=3,d=4,e=5,f=6,g=7", 27, &req) == TAGS_OK);
	CHECK(tags_fix(&req, &fixed) == TAGS_TOO_MANY);
	/* a team's fixed tags win over its key's */
	CHECK(tags_parse("env=dev,owner=ann", 17, &key) == TAGS_OK);
	CHECK(tags_parse("env=prod,project=atlas", 22, &team) == TAGS_OK);
	CHECK(tags_union(&u, &key, &team) == TAGS_OK);
	tags_format(&u, out, sizeof(out));
	CHECK_EQ_STR(out, "env=prod,owner=ann,project=atlas");
	/* More than TAGS_MAX together: said, not silently cut. */
	CHECK(tags_parse("a=1,b=2,c=3,d=4,e=5", 19, &key) == TAGS_OK);
	CHECK(tags_parse("f=6,g=7,h=8,i=9", 15, &team) == TAGS_OK);
	CHECK(tags_union(&u, &key, &team) == TAGS_TOO_MANY);
	CHECK(tags_parse("a=1,b=2,c=3,d=4", 15, &key) == TAGS_OK);
	CHECK(tags_union(&u, &key, &team) == TAGS_OK);
	CHECK_EQ_INT(u.n, TAGS_MAX);
}

int main(void)
{
	RUN(test_parse);
	RUN(test_bounds);
	RUN(test_format_bound);
	RUN(test_fix);
	return UNIT_DONE();
}
