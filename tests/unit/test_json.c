/* Unit tests of queryd's JSON printer (queryd/json.c: json_print): U+2028 and U+2029
 * leave as \u2028 and \u2029 wherever they stand (a value, a name, beside other text
 * and escapes), everything else as cJSON prints it. Single-threaded. */
#include <stdlib.h>

#include "json.h"
#include "unit.h"

/* The printed text of a one-member object {name: value}. */
static char *test_print(const char *name, const char *value)
{
	cJSON *o = cJSON_CreateObject();
	char *text = NULL;

	if (o && json_add_str(o, name, value) == 0)
		text = json_print(o);
	cJSON_Delete(o);
	return text;
}

static void test_separators(void)
{
	static const struct {
		const char *name, *value, *want;
	} cases[] = {
		{ "k", "plain", "{\"k\":\"plain\"}" },
		{ "k", "a\xe2\x80\xa8" "b", "{\"k\":\"a\\u2028b\"}" },
		{ "k", "\xe2\x80\xa9", "{\"k\":\"\\u2029\"}" },
		{ "k", "\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xa8", "{\"k\":\"\\u2028\\u2029\\u2028\"}" },
		/* beside cJSON's own escapes and other three-byte characters */
		{ "k", "\"\\\n\xe2\x80\xa8\xe2\x80\xa7\xe2\x80\xaa\xe2\x82\xac",
		  "{\"k\":\"\\\"\\\\\\n\\u2028\xe2\x80\xa7\xe2\x80\xaa\xe2\x82\xac\"}" },
		/* a member's name too */
		{ "n\xe2\x80\xa9", "v", "{\"n\\u2029\":\"v\"}" },
	};
	size_t i;
	char *text;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		text = test_print(cases[i].name, cases[i].value);
		CHECK_EQ_STR(text, cases[i].want);
		free(text);
	}
}

/* What cJSON reads back from the printed text is the original string. */
static void test_round_trip(void)
{
	const char *value = "x\xe2\x80\xa8y\xe2\x80\xa9z";
	char *text = test_print("k", value);
	cJSON *back = text ? cJSON_Parse(text) : NULL;
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(back, "k");

	CHECK(cJSON_IsString(k));
	CHECK_EQ_STR(cJSON_IsString(k) ? k->valuestring : NULL, value);
	cJSON_Delete(back);
	free(text);
}

int main(void)
{
	RUN(test_separators);
	RUN(test_round_trip);
	return UNIT_DONE();
}
