/* Unit tests of counters: each change keeps received = written + dropped once nothing
 * is in flight, a duplicate found late leaves received, recovery resets what a killed
 * run had in flight, and threads counting at once lose nothing. */
#include <pthread.h>

#include "counters.h"
#include "unit.h"

static void test_lifecycle(void)
{
	struct counters c;
	int i;

	counters_set(&(struct counters){ 0 });
	for (i = 0; i < 10; i++)
		counters_receive();
	counters_repeat();                       /* a second record: never received */
	counters_drop(1);                        /* the queue was full for one */
	/* the writer: 7 stored (1 without a price, 1 no_record), 1 stored already */
	counters_settle(&(struct counters){ .written = 7, .duplicates = 1, .unpriced = 1,
	                                    .timed_out = 1 });
	counters_settle(&(struct counters){ .dropped = 1 });   /* a row broke a constraint */
	counters_refuse_unauthenticated();
	counters_refuse_overflow();
	c = counters_now();
	CHECK_EQ_INT(c.received, 9);
	CHECK_EQ_INT(c.written, 7);
	CHECK_EQ_INT(c.dropped, 2);
	CHECK_EQ_INT(c.received, c.written + c.dropped);
	CHECK_EQ_INT(c.duplicates, 2);
	CHECK_EQ_INT(c.unpriced, 1);
	CHECK_EQ_INT(c.timed_out, 1);
	CHECK_EQ_INT(c.unauthenticated, 1);
	CHECK_EQ_INT(c.pending_overflow, 1);
}

/* What the writer stores (a reading changed by its batch) is what the counters become
 * once the batch is settled. */
static void test_apply_matches_settle(void)
{
	struct counters d = { .written = 5, .duplicates = 2, .dropped = 1, .timed_out = 1 };
	struct counters before, expect, after;
	int i;

	counters_set(&(struct counters){ .received = 4, .written = 2 });
	for (i = 0; i < 6; i++)
		counters_receive();
	before = counters_now();
	expect = before;
	counters_apply(&expect, &d);
	counters_settle(&d);
	after = counters_now();
	CHECK_EQ_INT(after.received, expect.received);
	CHECK_EQ_INT(after.written, expect.written);
	CHECK_EQ_INT(after.dropped, expect.dropped);
	CHECK_EQ_INT(after.duplicates, expect.duplicates);
	CHECK_EQ_INT(after.timed_out, expect.timed_out);
	CHECK_EQ_INT(expect.received, before.received - 2);
	CHECK_EQ_INT(expect.received, expect.written + expect.dropped);
}

static void test_recover(void)
{
	struct counters c = { .received = 10, .written = 7, .dropped = 1, .duplicates = 4 };

	CHECK_EQ_INT(counters_recover(&c), 2);
	CHECK_EQ_INT(c.received, 8);
	CHECK_EQ_INT(c.duplicates, 4);
	CHECK_EQ_INT(counters_recover(&c), 0);
	/* a row claiming more resolved than received says so */
	c = (struct counters){ .received = 3, .written = 5 };
	CHECK_EQ_INT(counters_recover(&c), -2);
	CHECK_EQ_INT(c.received, 5);
}

#define THREAD_ROWS 100000

static void *counting_main(void *arg)
{
	int i;

	(void)arg;
	for (i = 0; i < THREAD_ROWS; i++) {
		counters_receive();
		if (i % 10 == 0)
			counters_drop(1);
		else
			counters_settle(&(struct counters){ .written = 1 });
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t t[2];
	struct counters c;
	int i;

	counters_set(&(struct counters){ 0 });
	for (i = 0; i < 2; i++)
		CHECK_EQ_INT(pthread_create(&t[i], NULL, counting_main, NULL), 0);
	/* A reading while they count never shows more resolved than received. */
	for (i = 0; i < 100000; i++) {
		c = counters_now();
		if (c.written + c.dropped > c.received) {
			CHECK(c.written + c.dropped <= c.received);
			break;
		}
	}
	for (i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	c = counters_now();
	CHECK_EQ_INT(c.received, 2 * THREAD_ROWS);
	CHECK_EQ_INT(c.written + c.dropped, c.received);
	CHECK_EQ_INT(c.dropped, 2 * THREAD_ROWS / 10);
}

int main(void)
{
	RUN(test_lifecycle);
	RUN(test_apply_matches_settle);
	RUN(test_recover);
	RUN(test_threads);
	return UNIT_DONE();
}
