/* pending: transactions the agent decided whose end-of-transaction record has not come
 * yet, keyed by request id. I/O threads add (before the ACK goes out, so a record can
 * never arrive first); the intake thread takes them when the record comes, or when they
 * time out. Sharded by id hash so that threads rarely meet on a lock. */
#ifndef TALLY_PENDING_H
#define TALLY_PENDING_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"
#include "live-t.h"

struct pending;

/* max: entries awaiting a record at most (finished marks aside). */
struct pending *pending_new(size_t max);
void pending_free(struct pending *p);      /* after every other thread stopped */

/* Adds a copy of row (request_id set) stamped with now_ms (unix ms, for the timeout).
 * An id already pending is replaced, keeping one entry: returns 1 and, if replaced is not
 * NULL, copies the old row there (its limit hold and journal entry are the caller's to
 * release). An id marked finished (pending_finish) is not added: the mark goes and it
 * returns 2. 0 when added, -1 when max entries are pending already or on ENOMEM. Any
 * thread. */
int pending_add(struct pending *p, const struct acct_row *row, int64_t now_ms,
                struct acct_row *replaced);

/* Marks id finished: its record came first, and its decision, late (HAProxy gave up
 * waiting and answered alone), may still arrive; pending_add then refuses it. Marks are
 * capped in number (-1: not kept) and expire with pending_expire's done_cutoff_ms. Any
 * thread. */
int pending_finish(struct pending *p, const char *id, int64_t now_ms);

/* Removes the entry for id into *out. 1 if found, 0 if not (a finished mark is not an
 * entry). Any thread. */
int pending_take(struct pending *p, const char *id, struct acct_row *out);

/* Removes every entry added before cutoff_ms, calling cb with each, and the finished
 * marks made before done_cutoff_ms. Returns how many entries. Any thread (the intake
 * thread, about once a second). */
size_t pending_expire(struct pending *p, int64_t cutoff_ms, int64_t done_cutoff_ms,
                      void (*cb)(void *arg, const struct acct_row *row), void *arg);

size_t pending_count(struct pending *p);

/* For the live view: up to max entries, with their age at now_ms. */
void pending_each(struct pending *p, size_t max, int64_t now_ms,
                  void (*cb)(void *cbarg, const struct live_txn *t), void *cbarg);

#endif
