/* db: opens the database, applies sql/schema.sql to an empty one and runs the ordered
 * migrations on an older one. Called from any thread, each with its own connection;
 * schema creation and migration take an IMMEDIATE transaction, so processes racing
 * to open a new database (tallyctl, the agent) serialise instead of colliding. */
#include "db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DB_WAL_RETRY_MS 10

/* Generated from sql/schema.sql by the Makefile. */
extern const char tally_schema_sql[];

/* Generated from the files in sql/migrations by the Makefile: entry i upgrades version
 * i + 1 to i + 2; NULL ends the list. A migration is frozen once released: schema.sql
 * moves on, a migration never does. */
extern const char *const tally_migrations_sql[];

int db_exec(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		snprintf(err, errlen, "%s", msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

static void db_rollback(sqlite3 *db)
{
	if (!sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

int db_query_int(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st = NULL;
	int rc = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	if (sqlite3_step(st) != SQLITE_ROW)
		goto out;
	*out = sqlite3_column_int64(st, 0);
	rc = 0;
out:
	sqlite3_finalize(st);
	return rc;
}

int db_schema_version(sqlite3 *db)
{
	int64_t v;

	return db_query_int(db, "PRAGMA user_version", &v) < 0 ? -1 : (int)v;
}

int64_t db_config_generation(sqlite3 *db)
{
	int64_t v;

	if (db_query_int(db, "SELECT value FROM meta WHERE name = 'config_generation'", &v) < 0)
		return -1;
	return v;
}

int64_t db_accounted_at(sqlite3 *db)
{
	int64_t v;

	if (db_query_int(db, "SELECT updated_at FROM accounting WHERE id = 1", &v) < 0)
		return -1;
	return v;
}

int64_t db_now(void)
{
	return (int64_t)time(NULL);
}

/* Explains why version v cannot be used by a binary expecting want; 0 if v is usable
 * (equal, or older and migrate is set). */
static int db_version_check(sqlite3 *db, int v, int want, int migrate, char *err, size_t errlen)
{
	if (v < 0)
		snprintf(err, errlen, "cannot read schema version: %s", sqlite3_errmsg(db));
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

int db_migrate(sqlite3 *db, const char *const *migrations, int count, char *err, size_t errlen)
{
	const int target = count + 1;
	char msg[512], bump[64];
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
static int db_init_schema(sqlite3 *db, char *err, size_t errlen)
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
		snprintf(err, errlen, "cannot inspect database: %s", sqlite3_errmsg(db));
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

int db_open(const char *path, enum db_mode mode, sqlite3 **out, char *err, size_t errlen)
{
	static const int flags[] = {
		[DB_READONLY] = SQLITE_OPEN_READONLY,
		[DB_READWRITE] = SQLITE_OPEN_READWRITE,
		[DB_CREATE] = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
		[DB_PROBE] = SQLITE_OPEN_READONLY,
	};
	sqlite3 *db = NULL;
	char msg[512], *name = (char *)path;
	int rc, uri = 0;

	*out = NULL;
	if (mode == DB_PROBE && !(name = db_probe_name(path, &uri))) {
		snprintf(msg, sizeof(msg), "out of memory");
		goto fail;
	}
	rc = sqlite3_open_v2(name, &db, flags[mode] | SQLITE_OPEN_NOMUTEX | (uri ? SQLITE_OPEN_URI : 0),
	                     NULL);
	if (name != path)
		free(name);
	if (rc != SQLITE_OK) {
		snprintf(msg, sizeof(msg), "%s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		goto fail;
	}
	sqlite3_extended_result_codes(db, 1);
	sqlite3_busy_timeout(db, DB_BUSY_TIMEOUT_MS);
	if (mode != DB_READONLY && mode != DB_PROBE && db_set_wal(db, msg, sizeof(msg)) < 0)
		goto fail;
	if (db_exec(db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", msg, sizeof(msg)) < 0)
		goto fail;
	if (mode == DB_CREATE) {
		if (db_init_schema(db, msg, sizeof(msg)) < 0 ||
		    db_migrate(db, tally_migrations_sql, DB_SCHEMA_VERSION - 1, msg, sizeof(msg)) < 0)
			goto fail;
	} else if (db_version_check(db, db_schema_version(db), DB_SCHEMA_VERSION, 0,
	                            msg, sizeof(msg)) < 0) {
		goto fail;
	}
	*out = db;
	return 0;
fail:
	snprintf(err, errlen, "database %s: %s", path, msg);
	sqlite3_close(db);
	return -1;
}
