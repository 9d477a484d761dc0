/* join: the accounting join, what makes "every admitted request ends as exactly one row"
 * true. A decision leaves a pending row; the transaction's record (or, when none comes,
 * the pending timeout) turns it into the row that is stored; the row says what settles
 * the request's hold on its key's limits; each arrival's fate says how it counts. Pure
 * functions over their inputs (join_count aside): the I/O threads call join_decided
 * and join_decision_fate, the intake thread the rest; intake.c and worker.c only move
 * the rows. */
#ifndef TALLY_JOIN_H
#define TALLY_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"
#include "decision.h"
#include "keytable-t.h"
#include "record.h"

/* The pending row of decision d, made at now_ms (unix ms) for the request named by
 * (id, idlen) (1 to ACCT_ID_MAX - 1 bytes): what the decision knew, and what it
 * estimated the request would use. */
void join_decided(const struct decision *d, const char *id, size_t idlen, int64_t now_ms,
                  struct acct_row *row);

/* The row of record r, whose request id is id. pending: the row its decision left, or
 * NULL when there is none (HAProxy answered alone, failed open, or an earlier agent
 * decided and its entry is gone). What the agent decided (key, verdict, model routed
 * to, provider, stream flag when known) comes from pending and never from the record;
 * without pending it comes from the record, which HAProxy wrote from the agent's
 * answer. The record says how the transaction ended and what the upstream reported.
 * kt prices the row; default_max_tokens is the completion estimate of a request no
 * decision saw. A pending row flagged ACCT_FLAG_UNBILLED takes no usage from the
 * record; one flagged ACCT_FLAG_CREATES_RESPONSE takes the stored response's id from a
 * 2xx answer. The row's model is the routed one (model_requested), or the dated
 * snapshot of it the answer names (join_model_match), which is priced by its own card
 * when it has one; any other name the answer gives goes to model_reported and prices
 * nothing. A row no decision routed (fail-open) takes the answer's name. */
void join_record(const struct record *r, const char *id, const struct acct_row *pending,
                 const struct keytable *kt, int64_t default_max_tokens, struct acct_row *row);

/* How the model an answer names (reported) stands to the model the request was routed
 * to: the same name, a dated snapshot of it (routed + "-YYYY-MM-DD" as OpenAI dates
 * them, routed + "-YYYYMMDD" as Anthropic does, or, for an alias "NAME-latest", NAME
 * with either date), or another model. */
enum join_model_match {
	JOIN_MODEL_SAME,
	JOIN_MODEL_SNAPSHOT,
	JOIN_MODEL_OTHER,
};

enum join_model_match join_model_match(const char *routed, const char *reported);

/* The row of a decided transaction whose record never came (outcome no_record),
 * charged its estimate. */
void join_expired(const struct acct_row *pending, const struct keytable *kt,
                  struct acct_row *row);

/* What an arrival means for the accounting counters (counters.h), so that each
 * transaction is counted received once and ends as one row. */
enum join_fate {
	JOIN_OWED,       /* a transaction newly owed a row: counted received */
	JOIN_RESOLVES,   /* it resolves a transaction counted already: nothing to count */
	JOIN_REPEAT,     /* for a transaction counted already, and it makes no row */
	JOIN_RECOUNTED,  /* its transaction was counted received twice: one is a duplicate */
};

/* A record arrives. seen: its transaction's row was made already (a second record, or
 * the UDP copy of one read from the ring); admitted: a pending decision waited for it.
 * Owed or resolving, the record makes the row; a repeat makes none. */
enum join_fate join_record_fate(int seen, int admitted);

/* A decision is noted: added is pending_add's result, 0 (new), 1 (decided twice: the
 * first decision gives way) or 2 (its record came first and made the row). -1 (not
 * noted) has no fate: the request is refused. replaced: the first decision's row when
 * added is 1; HAProxy asks again only after one that said wait (ACCT_FLAG_WAITING):
 * that is the same transaction going on, no copy of it. */
enum join_fate join_decision_fate(int added, const struct acct_row *replaced);

/* Whether a record ends the wait for its decision: HAProxy reported an SPOE error
 * (spoe_error > 0; ACCT_NONE when none: a timeout, the client gone mid-exchange, a broken
 * SPOP connection) and no decision was pending. The agent may still be deciding it; that
 * stale decision must then hold nothing, so the intake marks the id finished. */
int join_record_ends_wait(int admitted, int64_t spoe_error);

/* A pending decision's record never came. seen: a record made its row anyway (it came
 * before the decision was noted, so both counted the transaction); otherwise the
 * expiry makes the no_record row. */
enum join_fate join_expiry_fate(int seen);

/* Counts f in the accounting counters. Any thread. */
void join_count(enum join_fate f);

/* What the row charges its key's limits: tokens (reported plus estimated; -1 when
 * neither is known, which keeps the reservation) and cost in micro-dollars (reported
 * plus estimated, unpriced parts counting 0; -1 when neither is known). */
void join_charge(const struct acct_row *row, int64_t *tokens, int64_t *cost_micros);

#endif
