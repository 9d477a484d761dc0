/* conn: a read-only connection and its named queries, each prepared on first use (see
 * conn.h). Runs on whichever thread owns the conn; the query table is read only after
 * start. */
#include "conn.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "row.h"
#include "sumrow.h"

#define CONN_CACHE_KIB_STR "256"   /* KiB of page cache per connection */

static const char *const conn_names[CONN_QUERIES] = {
	[CONN_SUMMARY] = "summary",
	[CONN_SUMMARY_MODELS] = "summary_models",
	[CONN_SUMMARY_KEYS] = "summary_keys",
	[CONN_SUMMARY_TOTALS] = "summary_totals",
	[CONN_SUMMARY_TEAMS] = "summary_teams",
	[CONN_SUMMARY_END_USERS] = "summary_end_users",
	[CONN_SUMMARY_TAGS] = "summary_tags",
	[CONN_KEY_NAMES] = "key_names",
	[CONN_TEAM_NAMES] = "team_names",
	[CONN_REQUESTS_PAGE] = "requests_page",
	[CONN_REQUESTS_PAGE_KEY] = "requests_page_key",
	[CONN_REQUESTS_PAGE_NOKEY] = "requests_page_nokey",
	[CONN_REQUESTS_PAGE_MODEL] = "requests_page_model",
	[CONN_REQUESTS_PAGE_TEAM] = "requests_page_team",
	[CONN_REQUESTS_PAGE_END_USER] = "requests_page_end_user",
	[CONN_REQUESTS_PAGE_TAG] = "requests_page_tag",
	[CONN_REQUEST_ONE] = "request_one",
	[CONN_KEY_ID] = "key_id",
	[CONN_TEAM_ID] = "team_id",
	[CONN_KEYS] = "keys",
	[CONN_TEAMS] = "teams",
	[CONN_MODELS] = "models",
	[CONN_ACCOUNTING] = "accounting",
	[CONN_EXPORT] = "export",
	[CONN_EXPORT_END_USER] = "export_end_user",
	[CONN_EXPORT_TAG] = "export_tag",
	[CONN_TAG_UNTIL] = "tag_until",
	[CONN_KEY_SPEND] = "key_spend",
	[CONN_TEAM_SPEND] = "team_spend",
};

static const char *conn_find(const char *prefix, const char *name)
{
	size_t i, n = strlen(prefix);

	for (i = 0; i < conn_sql_count; i++)
		if (strncmp(conn_sql_files[i].name, prefix, n) == 0 &&
		    strcmp(conn_sql_files[i].name + n, name) == 0)
			return conn_sql_files[i].text;
	return NULL;
}

const char *conn_query_text(enum conn_query q, enum db_kind k)
{
	const char *pg = k == DB_POSTGRES ? conn_find("pg/", conn_names[q]) : NULL;

	return pg ? pg : conn_find("", conn_names[q]);
}

/* Queries whose rows are request rows: their columns must be row.c's. */
static int conn_is_row_query(enum conn_query q)
{
	return q == CONN_REQUESTS_PAGE || q == CONN_REQUESTS_PAGE_KEY ||
	       q == CONN_REQUESTS_PAGE_NOKEY || q == CONN_REQUESTS_PAGE_MODEL ||
	       q == CONN_REQUESTS_PAGE_TEAM || q == CONN_REQUESTS_PAGE_END_USER ||
	       q == CONN_REQUESTS_PAGE_TAG || q == CONN_REQUEST_ONE || q == CONN_EXPORT ||
	       q == CONN_EXPORT_END_USER || q == CONN_EXPORT_TAG;
}

/* Queries whose rows are rollup rows: their columns must be sumrow.c's. */
static int conn_is_summary_query(enum conn_query q)
{
	return q == CONN_SUMMARY || q == CONN_SUMMARY_MODELS || q == CONN_SUMMARY_KEYS ||
	       q == CONN_SUMMARY_TOTALS || q == CONN_SUMMARY_TEAMS || q == CONN_SUMMARY_END_USERS ||
	       q == CONN_SUMMARY_TAGS;
}

/* Query q prepared on c and its columns checked against their reader's, or NULL with
 * a message naming the file the text came from. */
static struct db_stmt *conn_prepare(struct conn *c, enum conn_query q, char *err,
                                    size_t errlen)
{
	enum db_kind kind = db_kind(c->db);
	const char *sql = conn_query_text(q, kind);
	const char *dir = kind == DB_POSTGRES && conn_find("pg/", conn_names[q])
	                  ? "sql/pg/queries" : "sql/queries";
	struct db_stmt *st = NULL;
	char msg[256];

	if (!sql) {
		snprintf(err, errlen, "no sql/queries/%s.sql compiled in", conn_names[q]);
		return NULL;
	}
	if (db_prepare(c->db, sql, &st) < 0) {
		snprintf(err, errlen, "%s/%s.sql: %s", dir, conn_names[q], db_errmsg(c->db));
		return NULL;
	}
	if ((conn_is_row_query(q) && row_check_columns(st, msg, sizeof(msg)) < 0) ||
	    (conn_is_summary_query(q) && sumrow_check_columns(st, msg, sizeof(msg)) < 0)) {
		snprintf(err, errlen, "%s/%s.sql: %s", dir, conn_names[q], msg);
		db_finalize(st);
		return NULL;
	}
	return st;
}

int conn_open(struct conn *c, const char *store, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	if (db_open(store, DB_READONLY, &c->db, err, errlen) < 0)
		return -1;
	/* A small page cache per connection: the kernel's page cache holds the database
	 * for every thread at once, and SQLite's default 2 MB each was most of queryd's
	 * memory after a day of dashboards. PostgreSQL has no such cache in this process:
	 * its shared buffers serve every connection. */
	if (db_kind(c->db) == DB_SQLITE &&
	    db_exec(c->db, "PRAGMA cache_size = -" CONN_CACHE_KIB_STR, err, errlen) < 0) {
		conn_close(c);
		return -1;
	}
	return 0;
}

int conn_check(struct conn *c, char *err, size_t errlen)
{
	struct db_stmt *st;
	int q;

	for (q = 0; q < CONN_QUERIES; q++) {
		if (!(st = conn_prepare(c, (enum conn_query)q, err, errlen)))
			return -1;
		db_finalize(st);
	}
	return 0;
}

void conn_close(struct conn *c)
{
	int q;

	for (q = 0; q < CONN_QUERIES; q++)
		db_finalize(c->st[q]);
	db_close(c->db);
	memset(c, 0, sizeof(*c));
}

struct db_stmt *conn_stmt(struct conn *c, enum conn_query q)
{
	struct db_stmt *st = c->st[q];
	char err[320];

	/* On first use: a statement is ~2-27 KB on SQLite (mostly its result columns'
	 * metadata), and a thread that never runs a query need not hold it. */
	if (!st && !(st = c->st[q] = conn_prepare(c, q, err, sizeof(err)))) {
		log_warn("%s", err);
		return NULL;
	}
	db_reset(st);
	db_clear_bindings(st);
	return st;
}

void conn_release(struct db_stmt *st)
{
	if (st)
		db_reset(st);
}

int conn_bind_int(struct db_stmt *st, const char *name, int64_t v)
{
	int i = db_param_index(st, name);

	return i > 0 && db_bind_int(st, i, v) == 0 ? 0 : -1;
}

int conn_bind_null(struct db_stmt *st, const char *name)
{
	int i = db_param_index(st, name);

	return i > 0 && db_bind_null(st, i) == 0 ? 0 : -1;
}

int conn_bind_text(struct db_stmt *st, const char *name, const char *s)
{
	int i = db_param_index(st, name);

	if (!s)
		return conn_bind_null(st, name);
	return i > 0 && db_bind_text(st, i, s, strlen(s)) == 0 ? 0 : -1;
}

int conn_bind_all(struct db_stmt *st, const struct conn_bind *v, size_t n)
{
	size_t i;
	int rc = 0;

	for (i = 0; i < n; i++) {
		if (v[i].only_if_named && !db_param_index(st, v[i].name))
			continue;
		switch (v[i].kind) {
		case CONN_BIND_INT:
			rc |= conn_bind_int(st, v[i].name, v[i].i);
			break;
		case CONN_BIND_TEXT:
			rc |= conn_bind_text(st, v[i].name, v[i].s);
			break;
		case CONN_BIND_NULL:
			rc |= conn_bind_null(st, v[i].name);
			break;
		}
	}
	return rc ? -1 : 0;
}
