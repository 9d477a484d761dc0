/* join: the accounting join, what makes "every admitted request ends as exactly one row"
 * true. A decision leaves a pending row; the transaction's record (or, when none comes,
 * the pending timeout) turns it into the row that is stored; the row says what settles
 * the request's hold on its key's limits. Pure functions over their inputs: the I/O
 * threads call join_decided, the intake thread the rest; intake.c and worker.c only
 * move the rows. */
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
 * decision saw. */
void join_record(const struct record *r, const char *id, const struct acct_row *pending,
                 const struct keytable *kt, int64_t default_max_tokens, struct acct_row *row);

/* The row of a decided transaction whose record never came (outcome no_record),
 * charged its estimate. */
void join_expired(const struct acct_row *pending, const struct keytable *kt,
                  struct acct_row *row);

/* What the row charges its key's limits: tokens (reported plus estimated; -1 when
 * neither is known, which keeps the reservation) and cost in micro-dollars (reported
 * plus estimated, unpriced parts counting 0; -1 when neither is known). */
void join_charge(const struct acct_row *row, int64_t *tokens, int64_t *cost_micros);

#endif
