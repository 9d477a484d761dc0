/* counters: the accounting counters, and the one place they change. Any thread: each
 * counter is a relaxed atomic; a reader sees each one exact but the set not at one
 * instant (counters_now says which order makes that safe).
 *
 * What they mean, and the invariant they keep:
 *
 *   received = written + dropped, once nothing is in flight (queue, pending table)
 *
 *   received          distinct transactions owed a row: a decision noted pending, or a
 *                     record no pending decision was waiting for. Counted once each.
 *   written           rows committed.
 *   dropped           owed rows lost: the queue was full and so was the spill (or the
 *                     database failed for longer than the writer retries and the spill
 *                     had no room), or a row broke a constraint. Spilled rows are in
 *                     flight, like queued ones.
 *   duplicates        arrivals for a transaction already counted: a second record or
 *                     decision, a decision after its record, or a row the database holds
 *                     already. Never part of received.
 *   timed_out         written rows whose record never came (outcome no_record).
 *   unpriced          written rows with usage but no price for their model.
 *   unauthenticated   records and decisions refused for lack of the gateway secret.
 *   pending_overflow  requests that would have been admitted, refused (503
 *                     gateway_busy) because the pending table was full; their
 *                     records still make rows, so they are in received too.
 *
 * timed_out and unpriced are subsets of written; unauthenticated is in no other
 * counter (a record or decision refused so makes no row).
 * Only the intake, the workers and the writer change them, through the functions below;
 * start-up sets them once from the database (counters_set). */
#ifndef TALLY_COUNTERS_H
#define TALLY_COUNTERS_H

#include <stdint.h>

/* Plain values: a reading, a stored row, or a change (counters_settle). */
struct counters {
	uint64_t received, written, dropped, duplicates, timed_out, unpriced;
	uint64_t unauthenticated, pending_overflow;
};

/* A transaction is newly owed a row: before its row is queued or its decision pending. */
void counters_receive(void);

/* An arrival for a transaction counted already (never counted received itself). */
void counters_repeat(void);

/* n owed rows are lost. */
void counters_drop(uint64_t n);

/* A request refused before it was owed anything. */
void counters_refuse_unauthenticated(void);
void counters_refuse_overflow(void);

/* Applies a change found after the transactions were counted received: the writer's
 * committed batch (written, timed_out, unpriced; rows already stored as duplicates; rows
 * refused as dropped), or the intake's late finding that a pending decision's row exists
 * (one duplicate). d's received, unauthenticated and pending_overflow must be 0. */
void counters_settle(const struct counters *d);

/* The rule counters_settle applies, on plain values: c becomes c changed by d. A
 * duplicate found late leaves received, so the invariant holds across it. */
void counters_apply(struct counters *c, const struct counters *d);

/* The totals now. dropped and written are read first, with acquire ordering, then
 * received: received is counted before a row can be written or dropped, so a reading
 * never shows more rows resolved than received. */
struct counters counters_now(void);

/* Replaces the totals (start-up, and tests). */
void counters_set(const struct counters *c);

/* A stored row from a previous run: the transactions it counted received but neither
 * wrote nor dropped were lost with that run's queue; the journal delivers them again
 * and they are counted received again. Sets c->received to written + dropped and
 * returns how many were in flight (negative if the row claimed more resolved than
 * received). */
int64_t counters_recover(struct counters *c);

#endif
