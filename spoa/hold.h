/* hold: what an allowed request holds of its key until its row settles it, in one place.
 * Three things: the quota reservations at its key and at its key's team (two
 * quota_holds, carried by value in the pending row), the key's requests in flight in
 * the live view (keylive.c), and a Responses create's count of its key's creates in
 * flight (owner_creating). hold_fate says, for each event of a decision's life, what
 * becomes of each (pure, beside join.c's fates); hold_apply carries it out, on the I/O
 * threads for a decision's events (worker.c) and on the intake thread for its row's
 * (intake.c). Admission itself is quota_admit_all's, called where the estimate is
 * made (session.c). */
#ifndef TALLY_HOLD_H
#define TALLY_HOLD_H

#include <stdint.h>

#include "acct-t.h"

struct journal;
struct keylive;
struct owner;
struct quota;

enum hold_event {
	HOLD_NO_ID,         /* decided, but the NOTIFY named no request: no row will carry it */
	HOLD_NOT_NOTED,     /* the pending table was full: no row will carry it */
	HOLD_RECORD_FIRST,  /* its record came first and made the row */
	HOLD_NOTED,         /* pending: it holds until its row */
	HOLD_REPLACED,      /* decided again: the first decision gives way */
	HOLD_RECORD,        /* its record came: its row settles it */
	HOLD_EXPIRED,       /* no record by the pending timeout: the no_record row settles it */
	HOLD_RECOUNTED,     /* expired, its row made already by a record that came first */
	HOLD_UNHELD,        /* a row no pending decision of this run held anything for (HAProxy
	                     * answered alone, or replayed from the journal) */
	HOLD_EVENT_COUNT
};

enum hold_quota {
	HOLD_QUOTA_KEEP,
	HOLD_QUOTA_GIVE_BACK,   /* settled with its usage unknown: the reservation stays spent */
	HOLD_QUOTA_CHARGE,      /* settled with what the row charges (join_charge) */
};

struct hold_fate {
	enum hold_quota quota;
	int journal;        /* 1: the decision's journal entry is released */
	int in_flight;      /* the live view: +1 for an allowed request; -1 for any row that
	                     * ends a pending decision (never below 0) */
	int creating;       /* a create's count (ACCT_FLAG_CREATES_RESPONSE): +1 for an
	                     * allowed one, -1 */
};

struct hold_fate hold_fate(enum hold_event e);

/* Where holds live; each may be NULL (nothing of that kind kept). Borrowed. */
struct hold_ctx {
	struct quota *quota;
	struct keylive *keylive;
	struct owner *owners;
	struct journal *journal;
};

/* Carries out e's fate for row: the pending row of a decision (its hold, key, flags
 * and journal entry), or the row that ends one. allowed: the decision allowed the
 * request (HOLD_NOTED). now_ms: unix ms. */
void hold_apply(const struct hold_ctx *c, enum hold_event e, const struct acct_row *row,
                int allowed, int64_t now_ms);

#endif
