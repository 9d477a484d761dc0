/* Unit tests for spoa/pending.c: add, take, replace, expiry, and the finished marks that
 * keep a decision arriving after its record from being held until the timeout. */
#include <stdio.h>
#include <string.h>

#include "pending.h"
#include "unit.h"

static struct acct_row row_of(const char *id, int64_t key_id)
{
	struct acct_row r;

	memset(&r, 0, sizeof(r));
	snprintf(r.request_id, sizeof(r.request_id), "%s", id);
	r.key_id = key_id;
	return r;
}

static int expired_count;
static char expired_last[ACCT_ID_MAX];

static void on_expired(void *arg, const struct acct_row *row)
{
	(void)arg;
	expired_count++;
	snprintf(expired_last, sizeof(expired_last), "%s", row->request_id);
}

static void test_add_take_replace(void)
{
	struct pending *p = pending_new(1024);
	struct acct_row r = row_of("a", 1), out, old;

	CHECK_EQ_INT(pending_add(p, &r, 100, NULL), 0);
	CHECK_EQ_INT(pending_count(p), 1);
	r.key_id = 2;
	CHECK_EQ_INT(pending_add(p, &r, 200, &old), 1);
	CHECK_EQ_INT(old.key_id, 1);
	CHECK_EQ_INT(pending_count(p), 1);
	CHECK_EQ_INT(pending_take(p, "a", &out), 1);
	CHECK_EQ_INT(out.key_id, 2);
	CHECK_EQ_INT(pending_take(p, "a", &out), 0);
	CHECK_EQ_INT(pending_count(p), 0);
	pending_free(p);
}

/* At most max entries await a record; replacing one or taking one makes no room for
 * nothing, and taking one makes room for another. */
static void test_bounded(void)
{
	struct pending *p = pending_new(3);
	struct acct_row out;
	char id[16];
	int i;

	for (i = 0; i < 3; i++) {
		struct acct_row r;

		snprintf(id, sizeof(id), "r%d", i);
		r = row_of(id, 1);
		CHECK_EQ_INT(pending_add(p, &r, 100, NULL), 0);
	}
	{
		struct acct_row extra = row_of("r3", 1), again = row_of("r1", 2);

		CHECK_EQ_INT(pending_add(p, &extra, 100, NULL), -1);
		CHECK_EQ_INT(pending_add(p, &again, 100, NULL), 1);
		CHECK_EQ_INT(pending_count(p), 3);
		CHECK_EQ_INT(pending_take(p, "r0", &out), 1);
		CHECK_EQ_INT(pending_add(p, &extra, 100, NULL), 0);
		CHECK_EQ_INT(pending_take(p, "r3", &out), 1);
	}
	pending_free(p);
}

static void test_expiry(void)
{
	struct pending *p = pending_new(1024);
	struct acct_row a = row_of("old", 1), b = row_of("new", 1);

	expired_count = 0;
	pending_add(p, &a, 1000, NULL);
	pending_add(p, &b, 5000, NULL);
	CHECK_EQ_INT(pending_expire(p, 2000, 0, on_expired, NULL), 1);
	CHECK_EQ_INT(expired_count, 1);
	CHECK_EQ_STR(expired_last, "old");
	CHECK_EQ_INT(pending_count(p), 1);
	pending_free(p);
}

/* A record before its decision: the late decision is refused once, the mark is gone
 * after, and marks expire on their own cutoff without reaching the callback. */
static void test_finished_marks(void)
{
	struct pending *p = pending_new(1024);
	struct acct_row r = row_of("late", 7), out;

	CHECK_EQ_INT(pending_finish(p, "late", 1000), 0);
	CHECK_EQ_INT(pending_finish(p, "late", 1000), -1);
	CHECK_EQ_INT(pending_count(p), 0);
	CHECK_EQ_INT(pending_take(p, "late", &out), 0);
	CHECK_EQ_INT(pending_add(p, &r, 1100, NULL), 2);
	CHECK_EQ_INT(pending_add(p, &r, 1200, NULL), 0);
	CHECK_EQ_INT(pending_take(p, "late", &out), 1);

	expired_count = 0;
	CHECK_EQ_INT(pending_finish(p, "gone", 1000), 0);
	CHECK_EQ_INT(pending_expire(p, 0, 2000, on_expired, NULL), 0);
	CHECK_EQ_INT(expired_count, 0);
	CHECK_EQ_INT(pending_add(p, &r, 3000, NULL), 0);   /* "late" again: a fresh entry */
	r = row_of("gone", 1);
	CHECK_EQ_INT(pending_add(p, &r, 3000, NULL), 0);   /* its mark expired */
	pending_free(p);
}

/* Marks are capped: a flood of them cannot grow without bound. */
static void test_finished_marks_are_capped(void)
{
	struct pending *p = pending_new(1024);
	char id[32];
	int i, kept = 0;

	for (i = 0; i < 20000; i++) {
		snprintf(id, sizeof(id), "m-%d", i);
		kept += pending_finish(p, id, 1) == 0;
	}
	CHECK_EQ_INT(kept, 16384);
	CHECK_EQ_INT(pending_expire(p, 0, 2, on_expired, NULL), 0);
	CHECK_EQ_INT(pending_finish(p, "after", 3), 0);
	pending_free(p);
}

int main(void)
{
	RUN(test_add_take_replace);
	RUN(test_bounded);
	RUN(test_expiry);
	RUN(test_finished_marks);
	RUN(test_finished_marks_are_capped);
	return UNIT_DONE();
}
