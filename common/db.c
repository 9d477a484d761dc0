/* db: the store behind db.h. SQLite (a path) or PostgreSQL (a URL): opening, creating
 * and migrating the schema, and the statement API each backend maps. Called from any
 * thread, each with its own connection; schema creation and migration are serialised
 * between processes (SQLite: an IMMEDIATE transaction), so processes racing to open a
 * new database (tallyctl, the agent) wait for each other instead of colliding. */
#include "db.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <sqlite3.h>

#define DB_WAL_RETRY_MS 10
#define DB_ERR_MAX 512

/* Generated from sql/schema.sql by the Makefile. */
extern const char tally_schema_sql[];

/* Generated from the files in sql/migrations by the Makefile: entry i upgrades version
 * i + 1 to i + 2; NULL ends the list. A migration is frozen once released: schema.sql
 * moves on, a migration never does. */
extern const char *const tally_migrations_sql[];

struct db {
	enum db_kind kind;
	sqlite3 *lite;
	char err[DB_ERR_MAX];
};

struct db_stmt {
	struct db *db;
	sqlite3_stmt *lite;
	int64_t changes;
};

static void db_set_err(struct db *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void db_set_err(struct db *db, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(db->err, sizeof(db->err), fmt, ap);
	va_end(ap);
}

/* SQLite's result code as a db_status (extended codes are on). */
static enum db_status db_lite_status(int rc)
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

int db_is_postgres(const char *store)
{
	return strncmp(store, "postgresql://", 13) == 0 || strncmp(store, "postgres://", 11) == 0;
}

enum db_kind db_kind(const struct db *db)
{
	return db->kind;
}

const char *db_errmsg(struct db *db)
{
	return db->err;
}

/* Runs sql on SQLite; the status of the failing statement, with its message in
 * db->err. */
static enum db_status db_lite_exec(struct db *db, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db->lite, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK)
		db_set_err(db, "%s", msg ? msg : sqlite3_errmsg(db->lite));
	sqlite3_free(msg);
	return db_lite_status(rc);
}

int db_exec(struct db *db, const char *sql, char *err, size_t errlen)
{
	if (db_lite_exec(db, sql) != DB_OK) {
		snprintf(err, errlen, "%s", db->err);
		return -1;
	}
	return 0;
}

int db_query_int(struct db *db, const char *sql, int64_t *out)
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

enum db_status db_begin(struct db *db)
{
	return db_lite_exec(db, "BEGIN IMMEDIATE");
}

enum db_status db_commit(struct db *db)
{
	return db_lite_exec(db, "COMMIT");
}

void db_rollback(struct db *db)
{
	if (db_in_transaction(db))
		sqlite3_exec(db->lite, "ROLLBACK", NULL, NULL, NULL);
}

int db_in_transaction(struct db *db)
{
	return !sqlite3_get_autocommit(db->lite);
}

int db_prepare(struct db *db, const char *sql, struct db_stmt **out)
{
	struct db_stmt *st;

	*out = NULL;
	st = calloc(1, sizeof(*st));
	if (!st) {
		db_set_err(db, "out of memory");
		return -1;
	}
	st->db = db;
	if (sqlite3_prepare_v2(db->lite, sql, -1, &st->lite, NULL) != SQLITE_OK) {
		db_set_err(db, "%s", sqlite3_errmsg(db->lite));
		sqlite3_finalize(st->lite);
		free(st);
		return -1;
	}
	if (!st->lite) {
		db_set_err(db, "no statement in the SQL");
		free(st);
		return -1;
	}
	*out = st;
	return 0;
}

void db_finalize(struct db_stmt *st)
{
	if (!st)
		return;
	sqlite3_finalize(st->lite);
	free(st);
}

/* A bind's SQLite result as 0 or -1 (the message kept on the connection). */
static int db_lite_bound(struct db_stmt *st, int rc)
{
	if (rc == SQLITE_OK)
		return 0;
	db_set_err(st->db, "%s", sqlite3_errmsg(st->db->lite));
	return -1;
}

int db_bind_int(struct db_stmt *st, int i, int64_t v)
{
	return db_lite_bound(st, sqlite3_bind_int64(st->lite, i, v));
}

int db_bind_text(struct db_stmt *st, int i, const char *s, size_t len)
{
	/* A NULL pointer would bind SQL NULL: an empty string is still a string. */
	return db_lite_bound(st, sqlite3_bind_text64(st->lite, i, s ? s : "", len, SQLITE_STATIC,
	                                             SQLITE_UTF8));
}

int db_bind_blob(struct db_stmt *st, int i, const void *p, size_t len)
{
	if (!p || len == 0)
		return db_lite_bound(st, sqlite3_bind_zeroblob(st->lite, i, 0));
	return db_lite_bound(st, sqlite3_bind_blob64(st->lite, i, p, len, SQLITE_STATIC));
}

int db_bind_null(struct db_stmt *st, int i)
{
	return db_lite_bound(st, sqlite3_bind_null(st->lite, i));
}

int db_param_count(struct db_stmt *st)
{
	return sqlite3_bind_parameter_count(st->lite);
}

int db_param_index(struct db_stmt *st, const char *name)
{
	return sqlite3_bind_parameter_index(st->lite, name);
}

enum db_status db_step(struct db_stmt *st)
{
	int rc = sqlite3_step(st->lite);

	if (rc == SQLITE_ROW)
		return DB_ROW;
	if (rc == SQLITE_DONE) {
		st->changes = sqlite3_stmt_readonly(st->lite) ? 0 : sqlite3_changes64(st->db->lite);
		return DB_DONE;
	}
	db_set_err(st->db, "%s", sqlite3_errmsg(st->db->lite));
	return db_lite_status(rc) == DB_OK ? DB_ERROR : db_lite_status(rc);
}

int64_t db_changes(struct db_stmt *st)
{
	return st->changes;
}

void db_reset(struct db_stmt *st)
{
	sqlite3_reset(st->lite);
}

void db_clear_bindings(struct db_stmt *st)
{
	sqlite3_clear_bindings(st->lite);
}

int db_col_count(struct db_stmt *st)
{
	return sqlite3_column_count(st->lite);
}

const char *db_col_name(struct db_stmt *st, int i)
{
	return sqlite3_column_name(st->lite, i);
}

enum db_type db_col_type(struct db_stmt *st, int i)
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

int64_t db_col_int(struct db_stmt *st, int i)
{
	return sqlite3_column_int64(st->lite, i);
}

const char *db_col_text(struct db_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st->lite, i);
}

const void *db_col_blob(struct db_stmt *st, int i)
{
	return sqlite3_column_blob(st->lite, i);
}

size_t db_col_bytes(struct db_stmt *st, int i)
{
	return (size_t)sqlite3_column_bytes(st->lite, i);
}

int db_schema_version(struct db *db)
{
	int64_t v;

	return db_query_int(db, "PRAGMA user_version", &v) < 0 ? -1 : (int)v;
}

int64_t db_config_generation(struct db *db)
{
	int64_t v;

	if (db_query_int(db, "SELECT value FROM meta WHERE name = 'config_generation'", &v) < 0)
		return -1;
	return v;
}

int64_t db_accounted_at(struct db *db)
{
	int64_t v;

	/* No node has accounted anything yet: 0, as the seeded row of older schemas read. */
	if (db_query_int(db, "SELECT coalesce(max(updated_at), 0) FROM accounting", &v) < 0)
		return -1;
	return v;
}

int64_t db_now(void)
{
	return (int64_t)time(NULL);
}

/* Explains why version v cannot be used by a binary expecting want; 0 if v is usable
 * (equal, or older and migrate is set). */
static int db_version_check(struct db *db, int v, int want, int migrate, char *err, size_t errlen)
{
	if (v < 0)
		snprintf(err, errlen, "cannot read schema version: %.400s", db->err);
	else if (v == 0)
		snprintf(err, errlen, "no tally schema (run tallyctl or start the agent to create it)");
	else if (v > want)
		snprintf(err, errlen, "schema version %d is newer than this binary supports (%d); "
		         "upgrade tally", v, want);
	else if (v < want && !migrate)
		snprintf(err, errlen, "schema version %d is older than %d; run tallyctl or start "
		         "the agent once to migrate it", v, want);
	else
		return 0;
	return -1;
}

int db_migrate(struct db *db, const char *const *migrations, int count, char *err, size_t errlen)
{
	const int target = count + 1;
	char msg[DB_ERR_MAX], bump[64];
	int v = db_schema_version(db);

	if (v == target)
		return 0;
	for (;;) {
		if (db_exec(db, "BEGIN IMMEDIATE", err, errlen) < 0)
			return -1;
		/* Read again under the lock: another process may have migrated meanwhile. */
		v = db_schema_version(db);
		if (db_version_check(db, v, target, 1, err, errlen) < 0)
			goto fail;
		if (v == target)
			return db_exec(db, "COMMIT", err, errlen);
		snprintf(bump, sizeof(bump), "PRAGMA user_version = %d", v + 1);
		if (db_exec(db, migrations[v - 1], msg, sizeof(msg)) < 0 ||
		    db_exec(db, bump, msg, sizeof(msg)) < 0 ||
		    db_exec(db, "COMMIT", msg, sizeof(msg)) < 0) {
			snprintf(err, errlen, "migration from version %d to %d failed: %s", v, v + 1, msg);
			goto fail;
		}
	}
fail:
	db_rollback(db);
	return -1;
}

/* Applies schema.sql if the database is empty (version 0 and no objects). */
static int db_init_schema(struct db *db, char *err, size_t errlen)
{
	int64_t objects;
	int v;

	if (db_schema_version(db) != 0)
		return 0;
	if (db_exec(db, "BEGIN IMMEDIATE", err, errlen) < 0)
		return -1;
	v = db_schema_version(db);
	if (v != 0)
		return db_exec(db, "COMMIT", err, errlen);
	if (db_query_int(db, "SELECT count(*) FROM sqlite_master", &objects) < 0) {
		snprintf(err, errlen, "cannot inspect database: %.400s", db->err);
		goto fail;
	}
	if (objects > 0) {
		snprintf(err, errlen, "not a tally database (it has tables but no schema version)");
		goto fail;
	}
	if (db_exec(db, tally_schema_sql, err, errlen) < 0)
		goto fail;
	v = db_schema_version(db);
	if (v != DB_SCHEMA_VERSION) {
		snprintf(err, errlen, "sql/schema.sql sets version %d but this binary expects %d",
		         v, DB_SCHEMA_VERSION);
		goto fail;
	}
	return db_exec(db, "COMMIT", err, errlen);
fail:
	db_rollback(db);
	return -1;
}

/* Switches to WAL; an in-memory database reports "memory" and stays so. The switch
 * can fail with SQLITE_BUSY without consulting the busy handler (SQLite's deadlock
 * avoidance while another process creates the database), hence the retry loop. */
static int db_set_wal(sqlite3 *db, char *err, size_t errlen)
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
static char *db_probe_name(const char *path, int *uri)
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
static int db_lite_open(struct db *db, const char *path, enum db_mode mode, char *msg,
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

	if (mode == DB_PROBE && !(name = db_probe_name(path, &uri))) {
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
	if (mode != DB_READONLY && mode != DB_PROBE && db_set_wal(db->lite, msg, msglen) < 0)
		return -1;
	if (db_exec(db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", msg, msglen) < 0)
		return -1;
	if (mode == DB_CREATE)
		return db_init_schema(db, msg, msglen) < 0 ||
		       db_migrate(db, tally_migrations_sql, DB_SCHEMA_VERSION - 1, msg, msglen) < 0
		       ? -1 : 0;
	return db_version_check(db, db_schema_version(db), DB_SCHEMA_VERSION, 0, msg, msglen);
}

int db_open(const char *store, enum db_mode mode, struct db **out, char *err, size_t errlen)
{
	char msg[DB_ERR_MAX];
	struct db *db;

	*out = NULL;
	db = calloc(1, sizeof(*db));
	if (!db) {
		snprintf(err, errlen, "database %s: out of memory", store);
		return -1;
	}
	if (db_is_postgres(store)) {
		snprintf(err, errlen, "database: PostgreSQL is not supported by this build");
		free(db);
		return -1;
	}
	db->kind = DB_SQLITE;
	if (db_lite_open(db, store, mode, msg, sizeof(msg)) < 0) {
		snprintf(err, errlen, "database %s: %s", store, msg);
		db_close(db);
		return -1;
	}
	*out = db;
	return 0;
}

void db_close(struct db *db)
{
	if (!db)
		return;
	sqlite3_close(db->lite);
	free(db);
}
