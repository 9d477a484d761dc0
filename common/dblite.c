/* dblite: the SQLite half of the store, behind db.c's ops table: a file opened in WAL
 * mode (or, for --self-check, read as immutable), and the statement API mapped onto
 * SQLite's own, which it was modelled on. Called from any thread, each with its own
 * connection (SQLite's mutexes are off). */
#include "dblite.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db-t.h"

#define DB_WAL_RETRY_MS 10
/* The schema version, kept in the file's header (PRAGMA user_version). */
#define DBLITE_VERSION_SQL "(SELECT user_version FROM pragma_user_version)"

/* Generated from sql/schema.sql by the Makefile. */
extern const char tally_schema_sql[];

/* Generated from the files in sql/migrations by the Makefile: entry i upgrades version
 * i + 1 to i + 2; NULL ends the list. A migration is frozen once released: schema.sql
 * moves on, a migration never does. */
extern const char *const tally_migrations_sql[];

/* SQLite's result code as a db_status (extended codes are on). */
static enum db_status dblite_status(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
		return DB_OK;
	case SQLITE_ROW:
		return DB_ROW;
	case SQLITE_DONE:
		return DB_DONE;
	case SQLITE_CONSTRAINT:
		return DB_CONSTRAINT;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return DB_BUSY;
	case SQLITE_FULL:
		return DB_FULL;
	default:
		return DB_ERROR;
	}
}

/* ---- commands and transactions ---- */

/* Runs sql on SQLite; the status of the failing statement, with its message in
 * db->err. */
static enum db_status dblite_exec(struct db *db, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db->lite, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK)
		db_set_err(db, "%s", msg ? msg : sqlite3_errmsg(db->lite));
	sqlite3_free(msg);
	return dblite_status(rc);
}

static int dblite_query_int(struct db *db, const char *sql, int64_t *out)
{
	struct db_stmt *st = NULL;
	int rc = -1;

	if (db_prepare(db, sql, &st) < 0)
		goto out;
	if (db_step(st) != DB_ROW)
		goto out;
	*out = db_col_int(st, 0);
	rc = 0;
out:
	db_finalize(st);
	return rc;
}

static enum db_status dblite_begin(struct db *db)
{
	return dblite_exec(db, "BEGIN IMMEDIATE");
}

static enum db_status dblite_commit(struct db *db)
{
	return dblite_exec(db, "COMMIT");
}

static void dblite_rollback(struct db *db)
{
	if (!sqlite3_get_autocommit(db->lite))
		sqlite3_exec(db->lite, "ROLLBACK", NULL, NULL, NULL);
}

static int dblite_in_transaction(struct db *db)
{
	return !sqlite3_get_autocommit(db->lite);
}

/* ---- statements ---- */

static int dblite_prepare(struct db *db, const char *sql, struct db_stmt *st)
{
	if (sqlite3_prepare_v2(db->lite, sql, -1, &st->lite, NULL) != SQLITE_OK) {
		db_set_err(db, "%s", sqlite3_errmsg(db->lite));
		return -1;
	}
	if (!st->lite) {
		db_set_err(db, "no statement in the SQL");
		return -1;
	}
	return 0;
}

static void dblite_finalize(struct db_stmt *st)
{
	sqlite3_finalize(st->lite);
}

/* A bind's SQLite result as 0 or -1 (the message kept on the connection). */
static int dblite_bound(struct db_stmt *st, int rc)
{
	if (rc == SQLITE_OK)
		return 0;
	db_set_err(st->db, "%s", sqlite3_errmsg(st->db->lite));
	return -1;
}

static int dblite_bind_int(struct db_stmt *st, int i, int64_t v)
{
	return dblite_bound(st, sqlite3_bind_int64(st->lite, i, v));
}

static int dblite_bind_text(struct db_stmt *st, int i, const char *s, size_t len)
{
	/* A NULL pointer would bind SQL NULL: an empty string is still a string. */
	return dblite_bound(st, sqlite3_bind_text64(st->lite, i, s ? s : "", len, SQLITE_STATIC,
	                                             SQLITE_UTF8));
}

static int dblite_bind_blob(struct db_stmt *st, int i, const void *p, size_t len)
{
	if (!p || len == 0)
		return dblite_bound(st, sqlite3_bind_zeroblob(st->lite, i, 0));
	return dblite_bound(st, sqlite3_bind_blob64(st->lite, i, p, len, SQLITE_STATIC));
}

static int dblite_bind_null(struct db_stmt *st, int i)
{
	return dblite_bound(st, sqlite3_bind_null(st->lite, i));
}

static int dblite_param_count(struct db_stmt *st)
{
	return sqlite3_bind_parameter_count(st->lite);
}

static int dblite_param_index(struct db_stmt *st, const char *name)
{
	return sqlite3_bind_parameter_index(st->lite, name);
}

static enum db_status dblite_step(struct db_stmt *st)
{
	int rc = sqlite3_step(st->lite);

	if (rc == SQLITE_ROW)
		return DB_ROW;
	if (rc == SQLITE_DONE) {
		st->changes = sqlite3_stmt_readonly(st->lite) ? 0 : sqlite3_changes64(st->db->lite);
		return DB_DONE;
	}
	db_set_err(st->db, "%s", sqlite3_errmsg(st->db->lite));
	return dblite_status(rc) == DB_OK ? DB_ERROR : dblite_status(rc);
}

static void dblite_reset(struct db_stmt *st)
{
	sqlite3_reset(st->lite);
}

static void dblite_clear_bindings(struct db_stmt *st)
{
	sqlite3_clear_bindings(st->lite);
}

/* ---- columns ---- */

static int dblite_col_count(struct db_stmt *st)
{
	return sqlite3_column_count(st->lite);
}

static const char *dblite_col_name(struct db_stmt *st, int i)
{
	return sqlite3_column_name(st->lite, i);
}

static enum db_type dblite_col_type(struct db_stmt *st, int i)
{
	switch (sqlite3_column_type(st->lite, i)) {
	case SQLITE_NULL:
		return DB_NULL;
	case SQLITE_TEXT:
		return DB_TEXT;
	case SQLITE_BLOB:
		return DB_BLOB;
	default:   /* the schema holds no REAL: a float is read as its integer part */
		return DB_INT;
	}
}

static int64_t dblite_col_int(struct db_stmt *st, int i)
{
	return sqlite3_column_int64(st->lite, i);
}

static const char *dblite_col_text(struct db_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st->lite, i);
}

static const void *dblite_col_blob(struct db_stmt *st, int i)
{
	return sqlite3_column_blob(st->lite, i);
}

static size_t dblite_col_bytes(struct db_stmt *st, int i)
{
	return (size_t)sqlite3_column_bytes(st->lite, i);
}

/* ---- schema and opening ---- */

static int dblite_schema_version(struct db *db)
{
	int64_t v;

	return dblite_query_int(db, "SELECT " DBLITE_VERSION_SQL, &v) < 0 ? -1 : (int)v;
}

/* Switches to WAL; an in-memory database reports "memory" and stays so. The switch
 * can fail with SQLITE_BUSY without consulting the busy handler (SQLite's deadlock
 * avoidance while another process creates the database), hence the retry loop. */
static int dblite_set_wal(sqlite3 *db, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	const char *mode;
	int rc = -1, step, waited;

	if (sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot enable WAL: %s", sqlite3_errmsg(db));
		goto out;
	}
	for (waited = 0; (step = sqlite3_step(st)) != SQLITE_ROW; waited += DB_WAL_RETRY_MS) {
		if ((step & 0xff) != SQLITE_BUSY || waited >= DB_BUSY_TIMEOUT_MS) {
			snprintf(err, errlen, "cannot enable WAL: %s", sqlite3_errmsg(db));
			goto out;
		}
		sqlite3_reset(st);
		sqlite3_sleep(DB_WAL_RETRY_MS);
	}
	mode = (const char *)sqlite3_column_text(st, 0);
	if (!mode || (strcmp(mode, "wal") != 0 && strcmp(mode, "memory") != 0)) {
		snprintf(err, errlen, "cannot enable WAL: journal mode stays %s", mode ? mode : "unknown");
		goto out;
	}
	rc = 0;
out:
	sqlite3_finalize(st);
	return rc;
}

/* DB_PROBE's name for path: "file:PATH?mode=ro&immutable=1" (a URI, PATH escaped) when
 * no PATH-wal exists, else path itself; NULL when out of memory. Free it. */
static char *dblite_probe_name(const char *path, int *uri)
{
	size_t len = strlen(path);
	char *name = malloc(3 * len + 32), *o;
	struct stat st;

	if (!name)
		return NULL;
	snprintf(name, 3 * len + 32, "%s-wal", path);
	*uri = lstat(name, &st) < 0 && errno == ENOENT;
	if (!*uri) {
		memcpy(name, path, len + 1);
		return name;
	}
	/* "file://" before an absolute path: its authority is then empty, even for a path
	 * that starts with "//". '%', '?' and '#' would end or change the path. */
	o = name + sprintf(name, "file:%s", path[0] == '/' ? "//" : "");
	for (; *path; path++) {
		if (*path == '%' || *path == '?' || *path == '#')
			o += sprintf(o, "%%%02x", (unsigned char)*path);
		else
			*o++ = *path;
	}
	strcpy(o, "?mode=ro&immutable=1");
	return name;
}

/* Opens the SQLite database at path into db (see db_open); msg says why not. */
static int dblite_open(struct db *db, const char *path, enum db_mode mode, char *msg,
                       size_t msglen)
{
	static const int flags[] = {
		[DB_READONLY] = SQLITE_OPEN_READONLY,
		[DB_READWRITE] = SQLITE_OPEN_READWRITE,
		[DB_CREATE] = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
		[DB_PROBE] = SQLITE_OPEN_READONLY,
	};
	char *name = (char *)path;
	int rc, uri = 0;

	if (mode == DB_PROBE && !(name = dblite_probe_name(path, &uri))) {
		snprintf(msg, msglen, "out of memory");
		return -1;
	}
	rc = sqlite3_open_v2(name, &db->lite, flags[mode] | SQLITE_OPEN_NOMUTEX |
	                     (uri ? SQLITE_OPEN_URI : 0), NULL);
	if (name != path)
		free(name);
	if (rc != SQLITE_OK) {
		snprintf(msg, msglen, "%s", db->lite ? sqlite3_errmsg(db->lite) : sqlite3_errstr(rc));
		return -1;
	}
	sqlite3_extended_result_codes(db->lite, 1);
	sqlite3_busy_timeout(db->lite, DB_BUSY_TIMEOUT_MS);
	if (mode != DB_READONLY && mode != DB_PROBE && dblite_set_wal(db->lite, msg, msglen) < 0)
		return -1;
	if (db_exec(db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", msg, msglen) < 0)
		return -1;
	return 0;
}

static void dblite_close(struct db *db)
{
	sqlite3_close(db->lite);
}

const struct db_ops dblite_ops = {
	.kind = DB_SQLITE,
	.open = dblite_open,
	.close = dblite_close,
	.exec = dblite_exec,
	.query_int = dblite_query_int,
	.begin = dblite_begin,
	.commit = dblite_commit,
	.rollback = dblite_rollback,
	.in_transaction = dblite_in_transaction,
	.prepare = dblite_prepare,
	.finalize = dblite_finalize,
	.bind_int = dblite_bind_int,
	.bind_text = dblite_bind_text,
	.bind_blob = dblite_bind_blob,
	.bind_null = dblite_bind_null,
	.param_count = dblite_param_count,
	.param_index = dblite_param_index,
	.step = dblite_step,
	.reset = dblite_reset,
	.clear_bindings = dblite_clear_bindings,
	.col_count = dblite_col_count,
	.col_name = dblite_col_name,
	.col_type = dblite_col_type,
	.col_int = dblite_col_int,
	.col_text = dblite_col_text,
	.col_blob = dblite_col_blob,
	.col_bytes = dblite_col_bytes,
	.schema_version = dblite_schema_version,
	.schema_lock_sql = NULL,
	.schema_share_sql = NULL,
	.version_sql = DBLITE_VERSION_SQL,
	.version_set_fmt = "PRAGMA user_version = %d",
	.objects_sql = "SELECT count(*) FROM sqlite_master",
	.schema_file = "sql/schema.sql",
	.schema_sql = tally_schema_sql,
	.migrations = tally_migrations_sql,
};
