/* recovery: what an earlier run decided or built but did not store, taken back from the
 * journal (journal.h) at start-up. Main thread, after the accounting counters are
 * loaded (writer_load_counters) and before the workers, the intake and the writer
 * start: the rows it queues wait for the writer, the decisions it notes for their
 * records.
 *
 * Each transaction is counted received once (join.h's rules), and ends as one row:
 *   - a row (JOURNAL_ROW) not stored yet is queued again; it resolves its decision if
 *     that was replayed first, and makes a later copy of either a repeat;
 *   - a decision (JOURNAL_DECISION) whose row is neither stored nor replayed is
 *     pending again, so that its record, or its expiry, makes the row;
 *     (a decision the pending table has no room for is counted dropped);
 *   - what the database holds already is skipped: it was counted by the run that
 *     stored it.
 * What it keeps is journaled again in log before the old segments go. */
#ifndef TALLY_RECOVERY_H
#define TALLY_RECOVERY_H

#include <stddef.h>

struct db;
struct journal;
struct journal_log;
struct keylive;
struct owner;
struct pending;
struct queue;
struct spill;

struct recovery_target {
	struct db *db;               /* read: which request ids are stored already */
	struct journal *journal;     /* opened; its earlier runs' segments are replayed */
	struct journal_log *log;     /* the calling thread's log, for what is kept */
	struct pending *pending;     /* decisions awaiting their record */
	struct queue *queue;         /* rows for the writer */
	struct keylive *keylive;     /* per-key live figures; may be NULL */
	struct owner *owners;        /* stored responses' keys; may be NULL */
	struct spill *spill;         /* rows the queue has no room for; may be NULL */
};

struct recovery_result {
	long entries;                /* journal entries read */
	long queued;                 /* rows queued again */
	long pending;                /* decisions pending again */
	long dropped;                /* decisions the pending table had no room for */
};

/* Replays t->journal into t's pending table and queue, re-journals what it kept and
 * lets the old segments go. 0, or -1 with a message in err (the old segments are kept
 * then, for the next attempt). */
int recovery_run(const struct recovery_target *t, struct recovery_result *res, char *err,
                 size_t errlen);

#endif
