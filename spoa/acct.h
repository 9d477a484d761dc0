/* acct: what a transaction's row says beyond the raw figures: how it ended, what it
 * cost, and the names of both as stored in the database. Pure; any thread. */
#ifndef TALLY_ACCT_H
#define TALLY_ACCT_H

#include <stddef.h>

#include "acct-t.h"
#include "price-t.h"

/* An empty row: every count, time and estimate ACCT_NONE, no key, stream unknown,
 * strings empty. */
void acct_row_init(struct acct_row *row);

/* Whether s (n bytes) can be a stored response's id the gateway keeps and matches in
 * paths: 1 to ACCT_RESPONSE_ID_MAX - 1 bytes of [A-Za-z0-9_.-], the first a letter or
 * digit (OpenAI's "resp_" and hex; self-hosted servers' uuids). */
int acct_response_id_ok(const char *s, size_t n);

/* "complete", "client_abort", ...; "unknown" for a value out of range. */
const char *acct_outcome_name(enum acct_outcome o);

/* "none", "response", "stream", "partial"; "unknown" for a value out of range. */
const char *acct_usage_source_name(enum acct_usage_source s);

/* How a forwarded transaction ended, from the status HAProxy sent the client and its
 * two-letter termination state ("--", "CD", "SH", ...; NULL or short: unknown).
 * ended: the answer's terminal event had passed, so a client that left then (Codex CLI
 * closes on a Responses stream's response.completed) left a complete answer. */
enum acct_outcome acct_outcome_of(int status, const char *termination, int ended);

/* Sets row->cost_micros, row->unpriced and row->priced_fallback from the row's usage,
 * priced by the model's sheet s (NULL: the model is unknown) as price_sheet_row does:
 * a class or tier without a price is charged at its stated fallback and named in
 * priced_fallback. A model without a token price (or counts that contradict each
 * other) leaves the row unpriced (cost ACCT_NONE). A row without usage has no cost and
 * is not unpriced. */
void acct_price(struct acct_row *row, const struct price_sheet *s);

/* Whether the upstream may have billed a row whose usage it did not report in full: a
 * forwarded request (not denied, not refused by HAProxy) that got a 2xx answer, whose
 * record never came, or that ended after the upstream had it (waiting for or sending its
 * answer: termination state's second letter H, D or L). An upstream's complete 4xx or
 * 5xx answer, or a connection it never accepted, bills nothing. */
int acct_may_be_billed(const struct acct_row *row);

/* Sets row->estimated_tokens and estimated_cost_micros: for a row acct_may_be_billed
 * holds of, the estimate (est_prompt_tokens, est_completion_tokens) of each count the
 * upstream did not report, priced by s for the row's tier and prompt as
 * price_sheet_tokens does (fallbacks added to priced_fallback; nothing in s prices it:
 * the cost stays ACCT_NONE); else ACCT_NONE. Reported counts are never touched. */
void acct_estimate(struct acct_row *row, const struct price_sheet *s);

/* Unix time in milliseconds: the clock of started_at, the pending timeout and limit
 * windows. Any thread. */
int64_t acct_now_ms(void);

#endif
