/* row: the request row's columns and their JSON and CSV forms (see row.h). Any thread,
 * on the caller's statement. */
#include "row.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

enum row_kind { ROW_TEXT, ROW_INT, ROW_BOOL, ROW_HIDDEN };

/* In the order the row queries select them; id is last and only feeds the cursor. */
static const struct {
	const char *name;
	enum row_kind kind;
} row_columns[] = {
	{ "request_id", ROW_TEXT }, { "key_id", ROW_INT }, { "key_name", ROW_TEXT },
	{ "model", ROW_TEXT }, { "model_requested", ROW_TEXT }, { "provider", ROW_TEXT },
	{ "verdict", ROW_TEXT }, { "status", ROW_INT }, { "stream", ROW_BOOL },
	{ "prompt_tokens", ROW_INT }, { "completion_tokens", ROW_INT },
	{ "cached_tokens", ROW_INT }, { "cache_creation_tokens", ROW_INT },
	{ "reasoning_tokens", ROW_INT }, { "cost_micros", ROW_INT }, { "outcome", ROW_TEXT },
	{ "usage_source", ROW_TEXT }, { "termination", ROW_TEXT }, { "started_at", ROW_INT },
	{ "duration_ms", ROW_INT }, { "ttfb_ms", ROW_INT }, { "bytes_in", ROW_INT },
	{ "bytes_out", ROW_INT }, { "estimated_tokens", ROW_INT },
	{ "estimated_cost_micros", ROW_INT }, { "cache_creation_1h_tokens", ROW_INT },
	{ "audio_input_tokens", ROW_INT }, { "audio_output_tokens", ROW_INT },
	{ "accepted_prediction_tokens", ROW_INT }, { "rejected_prediction_tokens", ROW_INT },
	{ "web_search_calls", ROW_INT }, { "service_tier", ROW_TEXT }, { "team_id", ROW_INT },
	{ "team_name", ROW_TEXT }, { "end_user", ROW_TEXT }, { "tags", ROW_TEXT },
	{ "id", ROW_HIDDEN },
};

#define ROW_NCOLS ((int)(sizeof(row_columns) / sizeof(row_columns[0])))
#define ROW_COL_STARTED_AT 18
#define ROW_COL_ID 36

_Static_assert(ROW_COL_ID == ROW_NCOLS - 1, "id is the last column");

int row_buf_put(struct row_buf *b, const char *s, size_t n)
{
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 1024;
		char *p;

		while (cap - b->len < n)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return -1;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	return 0;
}

int row_check_columns(struct db_stmt *st, char *err, size_t errlen)
{
	int i;

	if (db_col_count(st) != ROW_NCOLS) {
		snprintf(err, errlen, "%d result columns, the request row has %d", db_col_count(st),
		         ROW_NCOLS);
		return -1;
	}
	for (i = 0; i < ROW_NCOLS; i++) {
		const char *name = db_col_name(st, i);

		if (!name || strcmp(name, row_columns[i].name) != 0) {
			snprintf(err, errlen, "result column %d is %s, the request row's is %s", i,
			         name ? name : "?", row_columns[i].name);
			return -1;
		}
	}
	return 0;
}

int row_add_col_int(cJSON *obj, const char *name, struct db_stmt *st, int i)
{
	if (db_col_type(st, i) == DB_NULL)
		return json_add_null(obj, name);
	return json_add_int(obj, name, db_col_int(st, i));
}

int row_add_col_text(cJSON *obj, const char *name, struct db_stmt *st, int i)
{
	const char *s = db_col_text(st, i);

	if (!s)
		return json_add_null(obj, name);
	return json_add(obj, name, json_string(s, db_col_bytes(st, i)));
}

int row_add_col_bool(cJSON *obj, const char *name, struct db_stmt *st, int i)
{
	if (db_col_type(st, i) == DB_NULL)
		return json_add_null(obj, name);
	return json_add(obj, name, cJSON_CreateBool(db_col_int(st, i) != 0));
}

cJSON *row_json(struct db_stmt *st)
{
	cJSON *o = cJSON_CreateObject();
	int i, rc = 0;

	for (i = 0; o && rc == 0 && i < ROW_NCOLS; i++) {
		const char *name = row_columns[i].name;

		switch (row_columns[i].kind) {
		case ROW_TEXT:
			rc = row_add_col_text(o, name, st, i);
			break;
		case ROW_INT:
			rc = row_add_col_int(o, name, st, i);
			break;
		case ROW_BOOL:
			rc = row_add_col_bool(o, name, st, i);
			break;
		case ROW_HIDDEN:
			break;
		}
	}
	if (rc < 0) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

int row_csv_header(struct row_buf *b)
{
	int i;

	for (i = 0; i < ROW_NCOLS; i++) {
		const char *name = row_columns[i].name;

		if (row_columns[i].kind == ROW_HIDDEN)
			continue;
		if ((i && row_buf_put(b, ",", 1) < 0) || row_buf_put(b, name, strlen(name)) < 0)
			return -1;
	}
	return row_buf_put(b, "\r\n", 2);
}

/* Whether a text cell would be read as a formula by a spreadsheet: clients choose text
 * that rows keep (a requested model, an end user's id, a tag's value), and an export is
 * opened in one. */
static int row_csv_formula(const char *s, size_t n)
{
	return n && s[0] && strchr("=+-@\t\r", s[0]) != NULL;
}

/* One CSV text field: quoted when it holds a separator, a quote or a line break, and
 * behind a ' when it would pass for a formula (OWASP's CSV injection advice). */
static int row_csv_field(struct row_buf *b, const char *s, size_t n)
{
	size_t i, start = 0;
	int quote = memchr(s, ',', n) || memchr(s, '"', n) || memchr(s, '\r', n) ||
	            memchr(s, '\n', n);

	if (quote && row_buf_put(b, "\"", 1) < 0)
		return -1;
	if (row_csv_formula(s, n) && row_buf_put(b, "'", 1) < 0)
		return -1;
	if (!quote)
		return row_buf_put(b, s, n);
	for (i = 0; i < n; i++) {
		if (s[i] != '"')
			continue;
		if (row_buf_put(b, s + start, i + 1 - start) < 0)
			return -1;
		start = i;   /* the quote is written again: doubled */
	}
	return row_buf_put(b, s + start, n - start) < 0 ? -1 : row_buf_put(b, "\"", 1);
}

int row_csv(struct db_stmt *st, struct row_buf *b)
{
	char num[24];
	int i, n;

	for (i = 0; i < ROW_NCOLS; i++) {
		if (row_columns[i].kind == ROW_HIDDEN)
			continue;
		if (i && row_buf_put(b, ",", 1) < 0)
			return -1;
		if (db_col_type(st, i) == DB_NULL)
			continue;
		if (row_columns[i].kind == ROW_TEXT) {
			const char *s = db_col_text(st, i);

			if (s && row_csv_field(b, s, db_col_bytes(st, i)) < 0)
				return -1;
		} else {
			n = snprintf(num, sizeof(num), "%lld", (long long)db_col_int(st, i));
			if (row_buf_put(b, num, (size_t)n) < 0)
				return -1;
		}
	}
	return row_buf_put(b, "\r\n", 2);
}

void row_cursor(struct db_stmt *st, int64_t *started_ms, int64_t *id)
{
	*started_ms = db_col_int(st, ROW_COL_STARTED_AT);
	*id = db_col_int(st, ROW_COL_ID);
}
