/* queue: the bounded queue of usage rows between the producers (the intake thread, and
 * the main thread replaying the journal at start-up) and its single consumer, the
 * writer thread. Rows are copied in and out by value. A producer never waits for room:
 * a full queue refuses the row at once and the producer counts the drop. */
#ifndef TALLY_QUEUE_H
#define TALLY_QUEUE_H

#include <stddef.h>

#include "acct-t.h"

struct queue;

/* A queue holding up to capacity rows (at least 1). NULL when out of memory. */
struct queue *queue_new(size_t capacity);

/* Frees q and the rows still in it. No thread may use q any more. */
void queue_free(struct queue *q);

/* Copies *row to the tail. Returns 0, or -1 if the queue is full or closed (the row
 * is not stored). Never waits beyond a short mutex hold. Any thread. */
int queue_push(struct queue *q, const struct acct_row *row);

/* Moves up to max rows from the head into out, oldest first, waiting up to wait_ms
 * milliseconds (0: not at all) for the first one. Returns how many, 0 on timeout or
 * when the queue is closed and empty. Single consumer: one thread at a time. */
size_t queue_pop(struct queue *q, struct acct_row *out, size_t max, int wait_ms);

/* Rows currently queued. Any thread. */
size_t queue_depth(struct queue *q);

size_t queue_capacity(struct queue *q);

/* From now on pushes fail; queue_pop still hands out what is left, then returns 0
 * without waiting. Any thread; idempotent. */
void queue_close(struct queue *q);

/* 1 once queue_close was called. Any thread. */
int queue_closed(struct queue *q);

#endif
