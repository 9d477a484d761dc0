/* rowcols: the columns of a usage row in the requests table (sql/schema.sql and
 * sql/pg/schema.sql with their migrations), in the order the writer's INSERT names
 * them, and how each binds from its field of struct acct_row (acct-t.h). The one list
 * of them: the writer builds its INSERT's column list, its placeholders and its row
 * binding from it, and test_rowcols checks it against both schemas and against the
 * journal's entry codec (a stored field the journal dropped would be lost in a replay).
 * Adding a column: a line here, the migrations, and the field in struct acct_row.
 * Pure; any thread. */
#ifndef TALLY_ROWCOLS_H
#define TALLY_ROWCOLS_H

#include <stddef.h>

/* How a column binds from its field (writer.c, writer_bind_row):
 *   TEXT      a char array; "" binds NULL
 *   COUNT     an int64_t; negative (ACCT_NONE) binds NULL
 *   TIME      an int64_t, bound as it is
 *   STATUS    an int; 0 or less binds NULL
 *   FLAG      an int; 0 or 1, anything else binds NULL
 *   OUTCOME   an enum acct_outcome, by name (acct_outcome_name)
 *   SOURCE    an enum acct_usage_source, by name (acct_usage_source_name)
 *   FALLBACK  price.h's unsigned class bits, by their names; none binds NULL
 * TEXT, OUTCOME, SOURCE and FALLBACK columns are TEXT in both schemas (rowcol_is_text),
 * the others INTEGER (SQLite) and BIGINT (PostgreSQL). */
enum rowcol_kind {
	ROWCOL_TEXT,
	ROWCOL_COUNT,
	ROWCOL_TIME,
	ROWCOL_STATUS,
	ROWCOL_FLAG,
	ROWCOL_OUTCOME,
	ROWCOL_SOURCE,
	ROWCOL_FALLBACK
};

/* X(column, kind, field): the columns in order. */
#define ROWCOLS(X)                                          \
	X(request_id,                 TEXT,     request_id)    \
	X(key_id,                     COUNT,    key_id)        \
	X(model,                      TEXT,     model)         \
	X(model_requested,            TEXT,     model_requested) \
	X(provider,                   TEXT,     provider)      \
	X(verdict,                    TEXT,     verdict)       \
	X(status,                     STATUS,   status)        \
	X(stream,                     FLAG,     stream)        \
	X(prompt_tokens,              COUNT,    prompt_tokens) \
	X(completion_tokens,          COUNT,    completion_tokens) \
	X(cached_tokens,              COUNT,    cached_tokens) \
	X(cache_creation_tokens,      COUNT,    cache_creation_tokens) \
	X(reasoning_tokens,           COUNT,    reasoning_tokens) \
	X(cost_micros,                COUNT,    cost_micros)   \
	X(outcome,                    OUTCOME,  outcome)       \
	X(usage_source,               SOURCE,   usage_source)  \
	X(termination,                TEXT,     termination)   \
	X(started_at,                 TIME,     started_at_ms) \
	X(duration_ms,                COUNT,    duration_ms)   \
	X(ttfb_ms,                    COUNT,    ttfb_ms)       \
	X(bytes_in,                   COUNT,    bytes_in)      \
	X(bytes_out,                  COUNT,    bytes_out)     \
	X(estimated_tokens,           COUNT,    estimated_tokens) \
	X(estimated_cost_micros,      COUNT,    estimated_cost_micros) \
	X(cache_creation_1h_tokens,   COUNT,    cache_creation_1h_tokens) \
	X(audio_input_tokens,         COUNT,    audio_input_tokens) \
	X(audio_output_tokens,        COUNT,    audio_output_tokens) \
	X(accepted_prediction_tokens, COUNT,    accepted_prediction_tokens) \
	X(rejected_prediction_tokens, COUNT,    rejected_prediction_tokens) \
	X(web_search_calls,           COUNT,    web_search_calls) \
	X(service_tier,               TEXT,     service_tier)  \
	X(model_reported,             TEXT,     model_reported) \
	X(priced_fallback,            FALLBACK, priced_fallback) \
	X(team_id,                    COUNT,    team_id)       \
	X(end_user,                   TEXT,     end_user)      \
	X(tags,                       TEXT,     tags)

#define ROWCOL_ONE(column, kind, field) + 1
#define ROWCOL_COLUMNS (0 ROWCOLS(ROWCOL_ONE))

struct rowcol {
	const char *name;          /* the column */
	enum rowcol_kind kind;
	size_t off, size;          /* its field in struct acct_row */
};

/* The columns, in order. */
extern const struct rowcol rowcols[ROWCOL_COLUMNS];

/* 1 if a column of kind k stores text, 0 an integer. */
int rowcol_is_text(enum rowcol_kind k);

#endif
