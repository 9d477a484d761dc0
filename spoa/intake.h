/* intake: the thread that receives HAProxy's end-of-transaction records (a TCP
 * listener for the ring, a UDP socket for the copy, on the same address), turns each
 * into one usage row (joined with what the agent decided, priced) and queues it for the
 * writer; it also writes rows for decided transactions whose record never came. */
#ifndef TALLY_INTAKE_H
#define TALLY_INTAKE_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"
#include "hold.h"
#include "gwsecret.h"
#include "keytable-t.h"

struct intake;
struct queue;
struct pending;
struct keylive;
struct journal;

struct intake_config {
	const char *addr;             /* "host:port": TCP and UDP */
	int pending_timeout_ms;       /* a decided transaction's record is awaited this long */
	int dedupe_ms;                /* how long a record's id is remembered */
	struct queue *queue;          /* borrowed, all of these, until intake_stop returns */
	struct spill *spill;          /* where rows go when the queue is full; NULL: dropped */
	struct pending *pending;
	struct keylive *keylive;
	struct owner *owners;         /* who made which stored response; NULL: not kept */
	struct journal *journal;      /* NULL: no journal */
	struct quota *quota;          /* NULL: no limits to settle */
	int64_t default_max_tokens;  /* completion estimate of a request no decision saw */
	const struct gwsecret *secret; /* what HAProxy's records carry; others are refused */
	/* HAProxy's CLI socket (a stats socket of level operator), or NULL: where the ring's
	 * backlog is read (ringfetch.h) when the thread starts and whenever HAProxy's ring
	 * connects again, so that the records 3.x's ring does not resend still come. */
	const char *haproxy_socket;
	const char *ring;             /* the ring's name in tally.cfg */
	int64_t backlog_from_ms;      /* at start, records that ended before this (unix ms)
	                               * were accounted by an earlier run already */
};

/* Binds the sockets (main thread) and starts the thread. kt: a reference it now owns. */
struct intake *intake_start(const struct intake_config *cfg, struct keytable *kt,
                            char *err, size_t errlen);

/* Hands a new snapshot reference to the thread (any thread). */
void intake_post_keytable(struct intake *in, struct keytable *kt);

/* Stops reading, closes the sockets, joins and frees (main thread). Transactions still
 * pending stay in the journal for the next run. */
void intake_stop(struct intake *in);

/* Queues one row: notes the stored response it made (h->owners, may be NULL), carries
 * out e, what the row does to the hold of its decision (hold.h: HOLD_RECORD,
 * HOLD_EXPIRED, or HOLD_UNHELD when no decision of this run waited for it), between
 * the two, so that a create counts as ended once its id is known and a hold is settled
 * before its row is queued; counts it (h->keylive), journals it; on a full queue it
 * spills it (sp, may be NULL), and if that fails too counts the drop and releases its
 * journal entries (h->journal). For the intake thread, and for the main thread before
 * the intake starts (journal replay); log is that thread's journal log (may be NULL). */
struct journal_log;
struct spill;
void intake_emit(struct queue *q, struct spill *sp, const struct hold_ctx *h,
                 struct journal_log *log, struct acct_row *row, enum hold_event e);

#endif
