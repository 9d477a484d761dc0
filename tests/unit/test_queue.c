/* Unit tests for spoa/queue.c: order and wrap-around, full and closed queues, timed
 * waits, a consumer woken by a push, and two producer threads against one consumer
 * with exact counts. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "queue.h"
#include "stats.h"
#include "unit.h"

#define STRESS_PER_PRODUCER 200000
#define STRESS_CAPACITY     256
#define STRESS_BATCH        64

static struct acct_row row_n(int64_t n)
{
	struct acct_row r;

	memset(&r, 0, sizeof(r));
	snprintf(r.request_id, sizeof(r.request_id), "id-%lld", (long long)n);
	r.bytes_in = n;
	return r;
}

static int64_t ms_since(uint64_t start_ns)
{
	return (int64_t)((stats_now_ns() - start_ns) / 1000000u);
}

static void test_fifo_and_wrap(void)
{
	struct queue *q = queue_new(4);
	struct acct_row r, out[8];
	int64_t next_in = 0, next_out = 0;
	int round;
	size_t i, n;

	CHECK(q != NULL);
	if (!q)
		return;
	CHECK_EQ_INT(queue_capacity(q), 4);
	/* Varying push and pop sizes move head around the ring many times. */
	for (round = 0; round < 50; round++) {
		int pushes = 1 + round % 4;

		while (pushes-- > 0) {
			r = row_n(next_in);
			if (queue_push(q, &r) == 0)
				next_in++;
		}
		n = queue_pop(q, out, 1 + (size_t)round % 3, 0);
		for (i = 0; i < n; i++) {
			CHECK_EQ_INT(out[i].bytes_in, next_out);
			next_out++;
		}
		CHECK_EQ_INT(queue_depth(q), next_in - next_out);
	}
	n = queue_pop(q, out, 8, 0);
	for (i = 0; i < n; i++)
		CHECK_EQ_INT(out[i].bytes_in, next_out++);
	CHECK_EQ_INT(next_out, next_in);
	CHECK(next_in > 50);
	CHECK_EQ_STR(out[0].request_id, row_n(out[0].bytes_in).request_id);
	CHECK_EQ_INT(queue_depth(q), 0);
	queue_free(q);
}

static void test_full(void)
{
	struct queue *q = queue_new(3);
	struct acct_row r = row_n(1), out[4];

	CHECK_EQ_INT(queue_push(q, &r), 0);
	CHECK_EQ_INT(queue_push(q, &r), 0);
	CHECK_EQ_INT(queue_push(q, &r), 0);
	CHECK_EQ_INT(queue_push(q, &r), -1);
	CHECK_EQ_INT(queue_depth(q), 3);
	CHECK_EQ_INT(queue_pop(q, out, 1, 0), 1);
	CHECK_EQ_INT(queue_push(q, &r), 0);
	CHECK_EQ_INT(queue_pop(q, out, 0, 0), 0);
	CHECK_EQ_INT(queue_pop(q, out, 4, 0), 3);
	queue_free(q);
	CHECK(queue_new(0) == NULL);
}

static void test_timeout(void)
{
	struct queue *q = queue_new(2);
	struct acct_row out[2];
	uint64_t start = stats_now_ns();

	CHECK_EQ_INT(queue_pop(q, out, 2, 0), 0);
	CHECK(ms_since(start) < 20);
	start = stats_now_ns();
	CHECK_EQ_INT(queue_pop(q, out, 2, 60), 0);
	CHECK(ms_since(start) >= 59);
	CHECK(ms_since(start) < 1000);
	queue_free(q);
}

static void test_close(void)
{
	struct queue *q = queue_new(4);
	struct acct_row r = row_n(7), out[4];
	uint64_t start;

	CHECK_EQ_INT(queue_closed(q), 0);
	CHECK_EQ_INT(queue_push(q, &r), 0);
	queue_close(q);
	queue_close(q);
	CHECK_EQ_INT(queue_closed(q), 1);
	CHECK_EQ_INT(queue_push(q, &r), -1);
	/* What was queued still comes out, then pop returns at once. */
	CHECK_EQ_INT(queue_pop(q, out, 4, 1000), 1);
	CHECK_EQ_INT(out[0].bytes_in, 7);
	start = stats_now_ns();
	CHECK_EQ_INT(queue_pop(q, out, 4, 5000), 0);
	CHECK(ms_since(start) < 100);
	queue_free(q);
}

struct delayed {
	struct queue *q;
	int delay_ms;
	int close;              /* close instead of pushing */
};

static void *delayed_main(void *arg)
{
	struct delayed *d = arg;
	struct timespec ts = { 0, (long)d->delay_ms * 1000000L };
	struct acct_row r = row_n(42);

	nanosleep(&ts, NULL);
	if (d->close)
		queue_close(d->q);
	else
		queue_push(d->q, &r);
	return NULL;
}

/* A consumer waiting in queue_pop wakes as soon as a row arrives, or the queue closes. */
static void test_wakeup(void)
{
	int close;

	for (close = 0; close < 2; close++) {
		struct queue *q = queue_new(2);
		struct delayed d = { q, 50, close };
		struct acct_row out[2];
		uint64_t start = stats_now_ns();
		pthread_t t;
		size_t n;

		CHECK_EQ_INT(pthread_create(&t, NULL, delayed_main, &d), 0);
		n = queue_pop(q, out, 2, 5000);
		CHECK(ms_since(start) >= 40);
		CHECK(ms_since(start) < 2000);
		CHECK_EQ_INT(n, close ? 0 : 1);
		if (n == 1)
			CHECK_EQ_INT(out[0].bytes_in, 42);
		pthread_join(t, NULL);
		queue_free(q);
	}
}

struct producer {
	struct queue *q;
	int id;
	int64_t pushed, refused;
};

static void *producer_main(void *arg)
{
	struct producer *p = arg;
	int64_t i;

	for (i = 0; i < STRESS_PER_PRODUCER; i++) {
		struct acct_row r = row_n(i);

		r.key_id = p->id;
		if (queue_push(p->q, &r) == 0)
			p->pushed++;
		else
			p->refused++;
	}
	return NULL;
}

/* Two producers race to fill a queue nobody drains: exactly capacity rows get in. */
static void test_stress_full(void)
{
	struct queue *q = queue_new(STRESS_CAPACITY);
	struct producer p[2] = { { q, 0, 0, 0 }, { q, 1, 0, 0 } };
	struct acct_row *out = calloc(STRESS_CAPACITY + 1, sizeof(*out));
	pthread_t t[2];
	int i;

	CHECK(q && out);
	if (!q || !out)
		goto out;
	for (i = 0; i < 2; i++)
		CHECK_EQ_INT(pthread_create(&t[i], NULL, producer_main, &p[i]), 0);
	for (i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ_INT(p[i].pushed + p[i].refused, STRESS_PER_PRODUCER);
	}
	CHECK_EQ_INT(p[0].pushed + p[1].pushed, STRESS_CAPACITY);
	CHECK_EQ_INT(queue_pop(q, out, STRESS_CAPACITY + 1, 0), STRESS_CAPACITY);
out:
	free(out);
	queue_free(q);
}

struct consumer {
	struct queue *q;
	int64_t got[2];
	int in_order;
};

static void *consumer_main(void *arg)
{
	struct consumer *c = arg;
	struct acct_row out[STRESS_BATCH];
	int64_t next[2] = { 0, 0 };
	size_t n, k;

	for (;;) {
		n = queue_pop(c->q, out, STRESS_BATCH, 100);
		if (n == 0 && queue_closed(c->q))
			return NULL;
		for (k = 0; k < n; k++) {
			int id = (int)out[k].key_id & 1;

			if (out[k].bytes_in < next[id])
				c->in_order = 0;
			next[id] = out[k].bytes_in + 1;
			c->got[id]++;
		}
	}
}

/* Two producers race one consumer through a small queue: every row pushed comes out
 * exactly once, in each producer's order, and pushed + refused = attempted. */
static void test_stress_concurrent(void)
{
	struct queue *q = queue_new(STRESS_CAPACITY);
	struct producer p[2] = { { q, 0, 0, 0 }, { q, 1, 0, 0 } };
	struct consumer c = { q, { 0, 0 }, 1 };
	pthread_t t[2], ct;
	int i;

	CHECK_EQ_INT(pthread_create(&ct, NULL, consumer_main, &c), 0);
	for (i = 0; i < 2; i++)
		CHECK_EQ_INT(pthread_create(&t[i], NULL, producer_main, &p[i]), 0);
	for (i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	queue_close(q);
	pthread_join(ct, NULL);
	CHECK(c.in_order);
	for (i = 0; i < 2; i++) {
		CHECK_EQ_INT(p[i].pushed + p[i].refused, STRESS_PER_PRODUCER);
		CHECK_EQ_INT(c.got[i], p[i].pushed);
	}
	/* Not each producer: under valgrind's one-thread-at-a-time scheduler a producer
	 * can run its whole loop while the queue is full. */
	CHECK(p[0].pushed + p[1].pushed >= STRESS_CAPACITY);
	queue_free(q);
}

int main(void)
{
	RUN(test_fifo_and_wrap);
	RUN(test_full);
	RUN(test_timeout);
	RUN(test_close);
	RUN(test_wakeup);
	RUN(test_stress_full);
	RUN(test_stress_concurrent);
	return UNIT_DONE();
}
