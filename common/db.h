/* db: opening the tally SQLite database, creating and migrating its schema, and small
 * helpers every binary needs. Any thread may call these; an sqlite3 connection must
 * be used by one thread at a time (give each thread its own).
 *
 * sql/schema.sql is compiled in as tally_schema_sql and always describes the newest
 * schema (version DB_SCHEMA_VERSION, kept in PRAGMA user_version). */
#ifndef TALLY_DB_H
#define TALLY_DB_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#define DB_SCHEMA_VERSION 8
#define DB_BUSY_TIMEOUT_MS 5000

enum db_mode {
	DB_READONLY,   /* existing database at DB_SCHEMA_VERSION, read only (queryd) */
	DB_READWRITE,  /* existing database at DB_SCHEMA_VERSION */
	DB_CREATE,     /* create the file and schema if needed, migrate an older schema */
	DB_PROBE,      /* existing database at DB_SCHEMA_VERSION, read only and leaving no
	                * file behind (--self-check): with no -wal beside it (the file then
	                * holds every committed change) it is read as immutable, because a read-only
	                * connection would create -wal and -shm files, owned by whoever
	                * checks, that the agent might then be unable to open */
};

/* Opens path with WAL, synchronous=NORMAL, foreign_keys=ON and a busy timeout of
 * DB_BUSY_TIMEOUT_MS (DB_READONLY and DB_PROBE leave the journal mode as the file has
 * it). A schema newer than this binary is always refused; an older one
 * is refused unless mode is DB_CREATE, which migrates it. On success *out owns the
 * connection (close with sqlite3_close). The connection is opened without SQLite's own
 * mutexes: it must stay on one thread at a time (every caller's does). Returns 0, or -1
 * with a message in err and *out set to NULL. */
int db_open(const char *path, enum db_mode mode, sqlite3 **out, char *err, size_t errlen);

/* PRAGMA user_version, or -1 on error. */
int db_schema_version(sqlite3 *db);

/* meta.config_generation, or -1 on error. Cheap enough to poll. */
int64_t db_config_generation(sqlite3 *db);

/* When the accounting counters were last committed (accounting.updated_at, unix
 * seconds): about when the agent last accounted a row. -1 on error. */
int64_t db_accounted_at(sqlite3 *db);

/* Runs fixed SQL (one or more statements, never built from user input).
 * Returns 0, or -1 with sqlite's message in err. */
int db_exec(sqlite3 *db, const char *sql, char *err, size_t errlen);

/* Runs fixed SQL whose first row's first column is an integer into *out.
 * Returns 0, or -1 (an error, or no row). */
int db_query_int(sqlite3 *db, const char *sql, int64_t *out);

/* Current time in unix seconds, the unit of every *_at column. */
int64_t db_now(void);

/* Brings an initialised database up to version count + 1 by running migrations[v - 1]
 * for each version v below that, each step in its own IMMEDIATE transaction together
 * with the user_version bump, so a failed step leaves the database at version v.
 * A database newer than count + 1 is refused. db_open() calls it with the built-in
 * list; it is public so tests can supply their own. Returns 0, or -1 with a message. */
int db_migrate(sqlite3 *db, const char *const *migrations, int count, char *err, size_t errlen);

#endif
