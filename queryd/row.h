/* row: a request row as the API shows it. The columns every row query selects (sql/
 * queries/requests_page*.sql, request_one.sql, export*.sql: the same list, checked at
 * start), their JSON and CSV forms and the keyset cursor of a row (the filters those
 * queries share are plan.c's). Any thread, on the statement it is given. */
#ifndef QUERYD_ROW_H
#define QUERYD_ROW_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "db.h"

/* A growable byte buffer (a CSV or NDJSON line). p is malloc'd; free it when done. */
struct row_buf {
	char *p;
	size_t len, cap;
};

int row_buf_put(struct row_buf *b, const char *s, size_t n);

/* 0 if the statement's result columns are the row's, else -1 with a message. */
int row_check_columns(struct db_stmt *st, char *err, size_t errlen);

/* Column i of a statement's current row into obj under name (json.h's rules): an
 * integer or null; text or null; 0/1 as a boolean or null. 0, or -1 out of memory. */
int row_add_col_int(cJSON *obj, const char *name, struct db_stmt *st, int i);
int row_add_col_text(cJSON *obj, const char *name, struct db_stmt *st, int i);
int row_add_col_bool(cJSON *obj, const char *name, struct db_stmt *st, int i);

/* The current row as a JSON object, NULL when out of memory. The caller owns it. */
cJSON *row_json(struct db_stmt *st);

/* Appends the CSV header line, or the current row as a CSV line (RFC 4180: fields with
 * a comma, quote, CR or LF are quoted, quotes doubled; NULL is empty; CRLF ends it). */
int row_csv_header(struct row_buf *b);
int row_csv(struct db_stmt *st, struct row_buf *b);

/* The (started_at, id) pair of the current row, for the next page's cursor. */
void row_cursor(struct db_stmt *st, int64_t *started_ms, int64_t *id);

#endif
