/* Unit tests of dedupe: an id is seen for its window and then forgotten, the table
 * grows past its first size without forgetting, and expiry keeps every other id
 * findable (deletions inside probe chains). */
#include <stdio.h>

#include "dedupe.h"
#include "unit.h"

static const char *id_of(int i)
{
	static char buf[64];

	snprintf(buf, sizeof(buf), "1796278643040-1A2B-%04X-%08X", i & 0xffff, (unsigned)i * 2654435761u);
	return buf;
}

static void test_window(void)
{
	struct dedupe *d = dedupe_new(1000);

	CHECK(d != NULL);
	if (!d)
		return;
	CHECK(!dedupe_seen(d, "a"));
	CHECK_EQ_INT(dedupe_add(d, "a", 5000), 0);
	CHECK(dedupe_seen(d, "a"));
	CHECK(!dedupe_seen(d, "b"));
	/* added again: still one entry, which expires with the first time */
	CHECK_EQ_INT(dedupe_add(d, "a", 5900), 0);
	dedupe_expire(d, 6000);             /* exactly the window: kept */
	CHECK(dedupe_seen(d, "a"));
	dedupe_expire(d, 6001);
	CHECK(!dedupe_seen(d, "a"));
	dedupe_free(d);
}

/* 20000 ids over 20 s, a window of 5 s: after each second the last 5 s of ids are
 * seen, the older ones are not. */
#define IDS 20000

static void test_growth_and_expiry(void)
{
	struct dedupe *d = dedupe_new(5000);
	int i, j, missing = 0, stale = 0;

	CHECK(d != NULL);
	if (!d)
		return;
	for (i = 0; i < IDS; i++) {
		int64_t t = (int64_t)i;            /* one id per ms */

		CHECK_EQ_INT(dedupe_add(d, id_of(i), t), 0);
		if (i % 1000 != 999)
			continue;
		dedupe_expire(d, t);
		for (j = 0; j <= i; j++) {
			int want = j >= i - 5000;

			if (dedupe_seen(d, id_of(j)) != want)
				want ? missing++ : stale++;
		}
	}
	CHECK_EQ_INT(missing, 0);
	CHECK_EQ_INT(stale, 0);
	dedupe_free(d);
}

/* The window 0 of journal recovery: nothing expires until the caller says so. */
static void test_no_window(void)
{
	struct dedupe *d = dedupe_new(0);
	int i, seen = 0;

	for (i = 0; i < 3000; i++)
		dedupe_add(d, id_of(i), 0);
	for (i = 0; i < 3000; i++)
		seen += dedupe_seen(d, id_of(i));
	CHECK_EQ_INT(seen, 3000);
	dedupe_free(d);
}

int main(void)
{
	RUN(test_window);
	RUN(test_growth_and_expiry);
	RUN(test_no_window);
	return UNIT_DONE();
}
