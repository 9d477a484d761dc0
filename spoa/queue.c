/* queue: a ring of acct_row under one mutex (see queue.h). Producers (intake thread,
 * main thread) push; the writer thread pops. The mutex is held only for index updates
 * and the copy of one pushed row: queue_pop claims its rows under the lock, copies
 * them out without it (producers cannot reuse slots that are still counted), then
 * releases the slots. So a producer never waits for a large batch copy. */
#include "queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct queue {
	pthread_mutex_t lock;
	pthread_cond_t nonempty;      /* signalled on push while the consumer waits, and on close */
	size_t cap;
	size_t head;                  /* under lock: next slot to pop */
	size_t count;                 /* under lock: slots in use, claimed ones included */
	int waiting;                  /* under lock: the consumer sleeps on nonempty */
	int closed;                   /* under lock */
	struct acct_row *slots;
};

struct queue *queue_new(size_t capacity)
{
	struct queue *q = calloc(1, sizeof(*q));
	pthread_condattr_t attr;

	if (!q || capacity == 0)
		goto fail;
	q->cap = capacity;
	q->slots = calloc(capacity, sizeof(*q->slots));
	if (!q->slots)
		goto fail;
	/* Timed waits on the monotonic clock: a wall-clock step must not stretch them. */
	if (pthread_condattr_init(&attr) != 0)
		goto fail;
	if (pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
	    pthread_cond_init(&q->nonempty, &attr) != 0) {
		pthread_condattr_destroy(&attr);
		goto fail;
	}
	pthread_condattr_destroy(&attr);
	if (pthread_mutex_init(&q->lock, NULL) != 0) {
		pthread_cond_destroy(&q->nonempty);
		goto fail;
	}
	return q;
fail:
	if (q)
		free(q->slots);
	free(q);
	return NULL;
}

void queue_free(struct queue *q)
{
	if (!q)
		return;
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->nonempty);
	free(q->slots);
	free(q);
}

int queue_push(struct queue *q, const struct acct_row *row)
{
	int rc = -1;

	pthread_mutex_lock(&q->lock);
	if (!q->closed && q->count < q->cap) {
		q->slots[(q->head + q->count) % q->cap] = *row;
		q->count++;
		if (q->waiting)
			pthread_cond_signal(&q->nonempty);
		rc = 0;
	}
	pthread_mutex_unlock(&q->lock);
	return rc;
}

/* Absolute CLOCK_MONOTONIC time wait_ms from now. */
static struct timespec queue_deadline(int wait_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += wait_ms / 1000;
	ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

size_t queue_pop(struct queue *q, struct acct_row *out, size_t max, int wait_ms)
{
	struct timespec deadline;
	size_t n, head, first;

	if (max == 0)
		return 0;
	pthread_mutex_lock(&q->lock);
	if (q->count == 0 && !q->closed && wait_ms > 0) {
		deadline = queue_deadline(wait_ms);
		q->waiting = 1;
		while (q->count == 0 && !q->closed &&
		       pthread_cond_timedwait(&q->nonempty, &q->lock, &deadline) != ETIMEDOUT)
			;
		q->waiting = 0;
	}
	n = q->count < max ? q->count : max;
	head = q->head;
	pthread_mutex_unlock(&q->lock);
	if (n == 0)
		return 0;

	/* The claimed slots stay counted, so producers leave them alone during the copy. */
	first = q->cap - head < n ? q->cap - head : n;
	memcpy(out, q->slots + head, first * sizeof(*out));
	memcpy(out + first, q->slots, (n - first) * sizeof(*out));

	pthread_mutex_lock(&q->lock);
	q->head = (head + n) % q->cap;
	q->count -= n;
	pthread_mutex_unlock(&q->lock);
	return n;
}

size_t queue_depth(struct queue *q)
{
	size_t n;

	pthread_mutex_lock(&q->lock);
	n = q->count;
	pthread_mutex_unlock(&q->lock);
	return n;
}

size_t queue_capacity(struct queue *q)
{
	return q->cap;
}

void queue_close(struct queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->closed = 1;
	pthread_cond_broadcast(&q->nonempty);
	pthread_mutex_unlock(&q->lock);
}

int queue_closed(struct queue *q)
{
	int closed;

	pthread_mutex_lock(&q->lock);
	closed = q->closed;
	pthread_mutex_unlock(&q->lock);
	return closed;
}
