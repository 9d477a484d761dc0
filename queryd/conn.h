/* conn: one read-only connection to the tally store (SQLite or PostgreSQL, db.h); each
 * named query of sql/queries/ is prepared on its first use and reused for each request
 * (reset, bindings cleared). A conn belongs to one thread at a time (server.c gives
 * each MHD thread its own). */
#ifndef QUERYD_CONN_H
#define QUERYD_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "db.h"

/* sql/queries/<name>.sql under its name, and sql/pg/queries/<name>.sql (PostgreSQL's
 * own text of a query whose shared text it cannot run, or cannot run well) under
 * "pg/<name>", compiled in by the Makefile (build/gen/queries_sql.c). */
struct conn_sql {
	const char *name;
	const char *text;
};
extern const struct conn_sql conn_sql_files[];
extern const size_t conn_sql_count;

enum conn_query {
	CONN_SUMMARY,
	CONN_SUMMARY_MODELS,
	CONN_SUMMARY_KEYS,
	CONN_SUMMARY_TOTALS,
	CONN_SUMMARY_TEAMS,
	CONN_SUMMARY_END_USERS,
	CONN_SUMMARY_TAGS,
	CONN_KEY_NAMES,
	CONN_TEAM_NAMES,
	CONN_REQUESTS_PAGE,
	CONN_REQUESTS_PAGE_KEY,
	CONN_REQUESTS_PAGE_NOKEY,
	CONN_REQUESTS_PAGE_MODEL,
	CONN_REQUESTS_PAGE_TEAM,
	CONN_REQUESTS_PAGE_END_USER,
	CONN_REQUESTS_PAGE_TAG,
	CONN_REQUEST_ONE,
	CONN_KEY_ID,
	CONN_TEAM_ID,
	CONN_KEYS,
	CONN_TEAMS,
	CONN_MODELS,
	CONN_ACCOUNTING,
	CONN_EXPORT,        /* only checked here: each export prepares its own */
	CONN_EXPORT_END_USER,
	CONN_EXPORT_TAG,
	CONN_TAG_UNTIL,
	CONN_KEY_SPEND,
	CONN_TEAM_SPEND,
	CONN_QUERIES
};

struct conn {
	struct db *db;
	struct db_stmt *st[CONN_QUERIES];
};

/* Opens store (a path or a postgresql:// URL) read only (it must be at
 * DB_SCHEMA_VERSION); prepares nothing yet. 0, or -1 with a message (c is then
 * closed). */
int conn_open(struct conn *c, const char *store, char *err, size_t errlen);
void conn_close(struct conn *c);

/* Prepares every query once and checks its columns, keeping none: a query that does
 * not fit the schema fails queryd at start, not on its first request. 0, or -1 with
 * a message. */
int conn_check(struct conn *c, char *err, size_t errlen);

/* The text of a query for a store of kind k: PostgreSQL's own where sql/pg/queries
 * has one, else the shared one (found at conn_check, so never NULL after one
 * succeeded). */
const char *conn_query_text(enum conn_query q, enum db_kind k);

/* The prepared statement (prepared now if this is its first use), reset with bindings
 * cleared; NULL if it cannot be prepared (logged). Call conn_release() when done
 * reading: a statement not reset keeps its read transaction (and snapshot) open.
 * conn_release(NULL) does nothing. */
struct db_stmt *conn_stmt(struct conn *c, enum conn_query q);
void conn_release(struct db_stmt *st);

/* Bind to a named parameter (":name"); text NULL binds NULL. A name the statement does
 * not have is a programming error: -1. Text is NOT copied (db.h): it must stay
 * unchanged until the statement is released. */
int conn_bind_int(struct db_stmt *st, const char *name, int64_t v);
int conn_bind_null(struct db_stmt *st, const char *name);
int conn_bind_text(struct db_stmt *st, const char *name, const char *s);

/* One binding to make (plan.h plans them). only_if_named: skipped when the statement
 * does not name it; else a name it does not have is -1 as above. */
enum conn_bind_kind { CONN_BIND_INT, CONN_BIND_TEXT, CONN_BIND_NULL };

struct conn_bind {
	const char *name;
	enum conn_bind_kind kind;
	int only_if_named;
	int64_t i;
	const char *s;           /* CONN_BIND_TEXT; NULL binds NULL */
};

/* Makes the n bindings of v. 0, or -1 if any failed. */
int conn_bind_all(struct db_stmt *st, const struct conn_bind *v, size_t n);

#endif
