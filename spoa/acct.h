/* acct: what a transaction's row says beyond the raw figures: how it ended, what it
 * cost, and the names of both as stored in the database. Pure; any thread. */
#ifndef TALLY_ACCT_H
#define TALLY_ACCT_H

#include "acct-t.h"
#include "keytable-t.h"

/* "complete", "client_abort", ...; "unknown" for a value out of range. */
const char *acct_outcome_name(enum acct_outcome o);

/* "none", "response", "stream", "partial"; "unknown" for a value out of range. */
const char *acct_usage_source_name(enum acct_usage_source s);

/* How a forwarded transaction ended, from the status HAProxy sent the client and its
 * two-letter termination state ("--", "CD", "SH", ...; NULL or short: unknown). */
enum acct_outcome acct_outcome_of(int status, const char *termination);

/* Sets row->cost_micros and row->unpriced from the row's token counts and the model's
 * prices (NULL: the model is unknown). A price is needed only for a kind of token the
 * row has; a missing one leaves the row unpriced (cost ACCT_NONE, never a guess). A row
 * without usage has no cost and is not unpriced. Costs round to the nearest micro-dollar. */
void acct_price(struct acct_row *row, const struct kt_prices *p);

/* Unix time in milliseconds: the clock of started_at, the pending timeout and limit
 * windows. Any thread. */
int64_t acct_now_ms(void);

#endif
