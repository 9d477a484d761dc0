/* export: streamed CSV/NDJSON (see export.h). export_response() runs on the request's
 * MHD thread; the reader and free callbacks run on the thread MHD serves the
 * connection from, one call at a time. */
#include "export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "db.h"
#include "json.h"
#include "log.h"
#include "plan.h"
#include "row.h"

#define EXPORT_BLOCK 65536   /* bytes MHD asks for at most per callback */

struct export {
	struct db *db;
	struct db_stmt *st;
	struct params p;       /* the filters, bound in place: their strings are copies */
	char *strings;         /* those copies, one block */
	enum params_format format;
	struct row_buf line;   /* formatted bytes not yet handed to MHD */
	size_t sent;           /* of line */
	int done;              /* the statement has no more rows */
};

static void export_free(void *cls)
{
	struct export *e = cls;

	db_finalize(e->st);
	db_close(e->db);
	free(e->strings);
	free(e->line.p);
	free(e);
}

/* Formats the next row into e->line. 1: a row, 0: no more, -1: error. */
static int export_next(struct export *e)
{
	enum db_status step = db_step(e->st);
	cJSON *row;
	char *text;
	int rc;

	if (step == DB_DONE)
		return 0;
	if (step != DB_ROW) {
		log_warn("export: %s", db_errmsg(e->db));
		return -1;
	}
	if (e->format == PARAMS_CSV)
		return row_csv(e->st, &e->line) < 0 ? -1 : 1;
	row = row_json(e->st);
	text = row ? json_print(row) : NULL;
	rc = text && row_buf_put(&e->line, text, strlen(text)) == 0 &&
	     row_buf_put(&e->line, "\n", 1) == 0 ? 1 : -1;
	free(text);
	cJSON_Delete(row);
	return rc;
}

/* Fills buf with what is pending, then with rows, until it is full or rows run out. */
static ssize_t export_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct export *e = cls;
	size_t out = 0, n;

	(void)pos;
	while (out < max) {
		if (e->sent == e->line.len) {
			e->line.len = e->sent = 0;
			if (e->done)
				break;
			switch (export_next(e)) {
			case 0:
				e->done = 1;
				continue;
			case -1:
				/* MHD cuts the connection: the client sees a truncated file, never a
				 * complete-looking one */
				return MHD_CONTENT_READER_END_WITH_ERROR;
			}
		}
		n = e->line.len - e->sent < max - out ? e->line.len - e->sent : max - out;
		memcpy(buf + out, e->line.p + e->sent, n);
		e->sent += n;
		out += n;
	}
	if (out == 0 && e->done)
		return MHD_CONTENT_READER_END_OF_STREAM;
	return (ssize_t)out;
}

/* Copies p into e with its filter strings: the statement reads them at its first step,
 * from MHD's callback, after the request's handler has returned. */
static int export_copy_params(struct export *e, const struct params *p)
{
	const char *const src[] = { p->key, p->team, p->end_user, p->tag, p->model,
	                            p->provider, p->outcome };
	const char **dst[] = { &e->p.key, &e->p.team, &e->p.end_user, &e->p.tag, &e->p.model,
	                       &e->p.provider, &e->p.outcome };
	size_t i, len = 0, at = 0;

	e->p = *p;
	for (i = 0; i < sizeof(src) / sizeof(src[0]); i++)
		len += src[i] ? strlen(src[i]) + 1 : 0;
	if (len && !(e->strings = malloc(len)))
		return -1;
	for (i = 0; i < sizeof(src) / sizeof(src[0]); i++) {
		if (!src[i])
			continue;
		memcpy(e->strings + at, src[i], strlen(src[i]) + 1);
		*dst[i] = e->strings + at;
		at += strlen(src[i]) + 1;
	}
	return 0;
}

struct MHD_Response *export_response(const char *store, const struct params *p,
                                     char *err, size_t errlen)
{
	static const char *const types[] = {
		[PARAMS_CSV] = "text/csv; charset=utf-8",
		[PARAMS_NDJSON] = "application/x-ndjson",
	};
	static const char *const exts[] = { [PARAMS_CSV] = "csv", [PARAMS_NDJSON] = "ndjson" };
	struct MHD_Response *resp = NULL;
	struct export *e = calloc(1, sizeof(*e));
	struct plan_binds binds = { 0 };
	char disposition[96];

	if (!e) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	e->format = p->format;
	if (export_copy_params(e, p) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (db_open(store, DB_READONLY, &e->db, err, errlen) < 0)
		goto fail;
	/* PostgreSQL's cheapest plan for a long range sorts it all before the first row;
	 * this connection runs only the export: walk the index in order, as SQLite does,
	 * so rows stream from the first one (an end user's index too: its rows are in
	 * started_at order). */
	if (db_kind(e->db) == DB_POSTGRES && db_exec(e->db, "SET enable_sort = off", err, errlen) < 0)
		goto fail;
	/* streamed: a range's rows may be more than memory holds */
	plan_filters(&e->p, &binds);
	if (db_prepare_stream(e->db, conn_query_text(plan_export(&e->p), db_kind(e->db)),
	                      &e->st) < 0 ||
	    conn_bind_all(e->st, binds.v, binds.n) < 0) {
		snprintf(err, errlen, "export query: %s", db_errmsg(e->db));
		goto fail;
	}
	if (e->format == PARAMS_CSV && row_csv_header(&e->line) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, EXPORT_BLOCK, export_read, e,
	                                         export_free);
	if (!resp) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	snprintf(disposition, sizeof(disposition), "attachment; filename=\"tally-%lld-%lld.%s\"",
	         (long long)p->from, (long long)p->to, exts[p->format]);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, types[p->format]);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disposition);
	return resp;
fail:
	export_free(e);
	return NULL;
}
