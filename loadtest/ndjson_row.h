/* ndjson_row: one line of tally-gen's --ndjson input (a JSON object named like the
 * requests columns) into an acct_row. Pure; any thread. Kept apart from tally-gen's
 * main so that the unit under the fuzzer (tests/fuzz/fuzz_gen_ndjson.c) is exactly the
 * code that reads the file. */
#ifndef TALLY_NDJSON_ROW_H
#define TALLY_NDJSON_ROW_H

#include <stddef.h>

#include "acct-t.h"

/* Largest integer accepted for counts, times and money: JSON numbers are read as
 * doubles, exact up to 2^53. */
#define NDJSON_ROW_INT_MAX 9007199254740992LL

/* Parses line[0..len) (no terminator needed; surrounding whitespace allowed) into *row.
 * Keys: request_id, outcome, started_at (required); key_id, model, model_requested,
 * provider, verdict, status, stream, prompt_tokens, completion_tokens, cached_tokens,
 * cache_creation_tokens, reasoning_tokens, cost_micros, unpriced, usage_source,
 * termination, duration_ms, ttfb_ms, bytes_in, bytes_out, estimated_tokens,
 * estimated_cost_micros, team_id, end_user, tags (a list as X-Tally-Tags takes it, kept as
 * its canonical text). A missing or null value is "not known" (ACCT_NONE, "",
 * usage_source none, unpriced 0; the row's other fields as acct_row_init leaves them).
 * Unknown or repeated keys, wrong types, negative or fractional numbers, over-long
 * text, unknown names and an estimated_cost_micros without estimated_tokens are
 * refused. Returns 0, or -1 with the reason in err (*row is then unspecified). */
int ndjson_row_parse(const char *line, size_t len, struct acct_row *row, char *err,
                     size_t errlen);

#endif
