/* longbody: long request bodies assembled from their pieces, bounded in memory. */
#include <stdlib.h>
#include <string.h>

#include "longbody.h"
#include "unit.h"

#define ID "1700000000-1-2-3"
#define KEY 7

static char text[LONGBODY_BODY_MAX + 1];

static void fill_text(void)
{
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = (char)('a' + i % 26);
}

/* Sends total bytes of text in pieces of step; returns the last append's answer. */
static int64_t send_all(struct longbody *lb, const char *id, size_t total, size_t step)
{
	int64_t got = 0;

	while (got >= 0 && (size_t)got < total) {
		size_t n = total - (size_t)got < step ? total - (size_t)got : step;

		got = longbody_append(lb, id, strlen(id), KEY, got, (int64_t)total, 0, text + got, n, 0);
	}
	return got;
}

static void test_pieces_in_order_make_the_body(void)
{
	struct longbody *lb = longbody_new(4 << 20, 4 << 20);
	char *body = NULL;
	size_t len = 0;

	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, 40000, 0, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_bytes(lb), 40000);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 15000, 40000, 0, text + 15000, 15000, 0), 30000);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 30000, 40000, 0, text + 30000, 10000, 0), 40000);
	CHECK(longbody_take(lb, ID, strlen(ID), &body, &len, 0) == 1);
	CHECK_EQ_INT(len, 40000);
	CHECK(body && memcmp(body, text, 40000) == 0);
	CHECK_EQ_INT(longbody_bytes(lb), 0);
	/* taken once: nothing is left for a second decision on the same id */
	CHECK(longbody_take(lb, ID, strlen(ID), &body, &len, 0) == 0);
	free(body);
	CHECK_EQ_INT(send_all(lb, "whole-1mib", LONGBODY_BODY_MAX, 15000), LONGBODY_BODY_MAX);
	longbody_free(lb);
}

/* A piece that does not follow, runs past the size, is empty or comes for a body never
 * started is refused, and the body it belonged to is gone: it could never be whole. */
static void test_broken_sequences_are_refused(void)
{
	struct longbody *lb = longbody_new(4 << 20, 4 << 20);
	char *body = NULL;
	size_t len = 0;

	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 5000, 40000, 0, text, 100, 0), -1);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, 40000, 0, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 14000, 40000, 0, text, 1000, 0), -1);
	CHECK_EQ_INT(longbody_bytes(lb), 0);
	CHECK(longbody_take(lb, ID, strlen(ID), &body, &len, 0) == 0);

	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, 40000, 0, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 15000, 40000, 0, text, 0, 0), -1);
	CHECK_EQ_INT(longbody_bytes(lb), 0);

	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, 20000, 0, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 15000, 20000, 0, text, 15000, 0), -1);
	CHECK_EQ_INT(longbody_bytes(lb), 0);

	/* the size may not change between pieces */
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, 40000, 0, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 15000, 30000, 0, text, 15000, 0), -1);
	CHECK_EQ_INT(longbody_bytes(lb), 0);

	/* an incomplete body is never handed out, and is dropped when asked for */
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, 40000, 0, text, 15000, 0), 15000);
	CHECK(longbody_take(lb, ID, strlen(ID), &body, &len, 0) == 0);
	CHECK_EQ_INT(longbody_bytes(lb), 0);
	longbody_free(lb);
}

static void test_sizes_and_ids_are_bounded(void)
{
	struct longbody *lb = longbody_new(4 << 20, 4 << 20);
	char longid[LONGBODY_ID_MAX + 2];

	memset(longid, 'x', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = '\0';
	CHECK_EQ_INT(longbody_append(lb, longid, strlen(longid), KEY, 0, 40000, 0, text, 100, 0), -1);
	CHECK_EQ_INT(longbody_append(lb, "", 0, KEY, 0, 40000, 0, text, 100, 0), -1);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, LONGBODY_BODY_MAX + 1, 0, text, 100, 0), -1);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, 0, 0, text, 0, 0), -1);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, -5, 0, text, 100, 0), -1);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, -1, 40000, 0, text, 100, 0), -1);
	CHECK_EQ_INT(longbody_append(lb, ID, strlen(ID), KEY, 0, INT64_MAX, 0, text, 100, 0), -1);
	CHECK_EQ_INT(longbody_bytes(lb), 0);
	longbody_free(lb);
}

/* The memory bound holds on the whole sizes reserved at the first piece, however pieces
 * interleave; a body that does not fit is refused while others go on. */
static void test_memory_is_bounded(void)
{
	struct longbody *lb = longbody_new(100000, 100000);
	char *body = NULL;
	size_t len = 0;

	CHECK_EQ_INT(longbody_append(lb, "a", 1, KEY, 0, 60000, 0, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, "b", 1, KEY, 0, 40000, 0, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, "c", 1, KEY, 0, 20000, 0, text, 15000, 0), -1);
	CHECK_EQ_INT(longbody_bytes(lb), 100000);
	CHECK_EQ_INT(longbody_append(lb, "a", 1, KEY, 15000, 60000, 0, text + 15000, 15000, 0), 30000);
	CHECK(longbody_take(lb, "b", 1, &body, &len, 0) == 0);     /* decided on its prefix */
	CHECK_EQ_INT(longbody_bytes(lb), 60000);
	CHECK_EQ_INT(send_all(lb, "c", 20000, 15000), 20000);
	CHECK(longbody_take(lb, "c", 1, &body, &len, 0) == 1);
	CHECK(len == 20000 && memcmp(body, text, len) == 0);
	free(body);
	longbody_free(lb);
}

/* Each body reserves at least the large buffer HAProxy holds it in: a key holder who
 * starts many small long bodies and trickles the rest runs out of room after
 * max_bytes / hold of them, whatever the bodies' own sizes. */
static void test_each_body_reserves_the_large_buffer(void)
{
	struct longbody *lb = longbody_new(5 << 20, 5 << 20);
	char *body = NULL;
	size_t len = 0;

	CHECK_EQ_INT(longbody_append(lb, "a", 1, KEY, 0, 20000, 2 << 20, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, "b", 1, KEY, 0, 20000, 2 << 20, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_bytes(lb), 4 << 20);
	CHECK_EQ_INT(longbody_append(lb, "c", 1, KEY, 0, 20000, 2 << 20, text, 15000, 0), -1);
	/* a body larger than the hold reserves its size */
	CHECK(longbody_take(lb, "a", 1, &body, &len, 0) == 0);
	CHECK_EQ_INT(longbody_append(lb, "d", 1, KEY, 0, 900000, 500000, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_bytes(lb), (2 << 20) + 900000);
	longbody_free(lb);
}

/* A body whose decision never comes (its client left between pieces) gives its room
 * back LONGBODY_TTL_MS after its first piece, when another body needs it. */
static void test_abandoned_bodies_expire(void)
{
	struct longbody *lb = longbody_new(50000, 50000);
	char *body = NULL;
	size_t len = 0;

	CHECK_EQ_INT(longbody_append(lb, "gone", 4, KEY, 0, 40000, 0, text, 15000, 1000), 15000);
	CHECK_EQ_INT(longbody_append(lb, "next", 4, KEY, 0, 40000, 0, text, 15000, 1000 + LONGBODY_TTL_MS), -1);
	CHECK_EQ_INT(longbody_append(lb, "next", 4, KEY, 0, 40000, 0, text, 15000, 1001 + LONGBODY_TTL_MS), 15000);
	CHECK_EQ_INT(longbody_bytes(lb), 40000);
	CHECK_EQ_INT(longbody_append(lb, "gone", 4, KEY, 15000, 40000, 0, text, 15000, 2000 + LONGBODY_TTL_MS), -1);
	/* any call drops what is past its time, a take as well */
	CHECK_EQ_INT(longbody_bytes(lb), 40000);
	CHECK(longbody_take(lb, "other", 5, &body, &len, 3000 + 2 * LONGBODY_TTL_MS) == 0);
	CHECK_EQ_INT(longbody_bytes(lb), 0);
	longbody_free(lb);
}

/* One key's bodies reserve key_max_bytes at most: a key holder who stalls many long
 * bodies leaves the rest of max_bytes to other keys, and gets room again as its own
 * bodies go. */
static void test_one_key_holds_its_share_at_most(void)
{
	struct longbody *lb = longbody_new(10 << 20, 4 << 20);
	char *body = NULL;
	size_t len = 0;

	CHECK_EQ_INT(longbody_append(lb, "a1", 2, 1, 0, 20000, 2 << 20, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, "a2", 2, 1, 0, 20000, 2 << 20, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, "a3", 2, 1, 0, 20000, 2 << 20, text, 15000, 0), -1);
	CHECK_EQ_INT(longbody_append(lb, "a4", 2, 1, 0, 1000000, 0, text, 15000, 0), -1);
	CHECK_EQ_INT(longbody_bytes(lb), 4 << 20);
	/* other keys still find room, each up to its own share */
	CHECK_EQ_INT(longbody_append(lb, "b1", 2, 2, 0, 20000, 2 << 20, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, "b2", 2, 2, 0, 20000, 2 << 20, text, 15000, 0), 15000);
	CHECK_EQ_INT(longbody_append(lb, "c1", 2, 3, 0, 20000, 2 << 20, text, 15000, 0), 15000);
	/* the whole bound still holds over the shares */
	CHECK_EQ_INT(longbody_append(lb, "c2", 2, 3, 0, 20000, 2 << 20, text, 15000, 0), -1);
	CHECK_EQ_INT(longbody_bytes(lb), 10 << 20);
	/* a later piece of a started body is not held to the share again */
	CHECK_EQ_INT(longbody_append(lb, "a1", 2, 1, 15000, 20000, 2 << 20, text + 15000, 5000, 0), 20000);
	CHECK(longbody_take(lb, "a1", 2, &body, &len, 0) == 1);
	free(body);
	CHECK_EQ_INT(longbody_append(lb, "a3", 2, 1, 0, 20000, 2 << 20, text, 15000, 0), 15000);
	longbody_free(lb);
}

int main(void)
{
	fill_text();
	RUN(test_pieces_in_order_make_the_body);
	RUN(test_broken_sequences_are_refused);
	RUN(test_sizes_and_ids_are_bounded);
	RUN(test_memory_is_bounded);
	RUN(test_abandoned_bodies_expire);
	RUN(test_each_body_reserves_the_large_buffer);
	RUN(test_one_key_holds_its_share_at_most);
	return UNIT_DONE();
}
