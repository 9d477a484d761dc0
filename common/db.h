/* db: the tally store, SQLite (a file path) or PostgreSQL (a postgresql:// URL), behind
 * one small statement API, plus opening, creating and migrating the schema. Any thread
 * may call these; a connection (struct db) and its statements must be used by one
 * thread at a time (give each thread its own).
 *
 * WHY ONE API FOR TWO ENGINES
 * The agent, tallyctl and queryd hold their logic once and run it on either store. The
 * API is SQLite's shape (prepare, bind, step, column) because every caller was written
 * against it; the PostgreSQL side (libpq) maps it:
 *   - SQL is written once with SQLite's parameters: ?N, ? and :name. For PostgreSQL
 *     they are rewritten to $N (outside quotes and comments; "::" casts are left alone),
 *     :name numbered by first appearance as SQLite numbers them, so db_param_index
 *     agrees on both. Prefer CAST(x AS BIGINT) to "::" in shared SQL.
 *   - Statements are prepared on the server (PQprepare) and run with text parameters.
 *     A statement's whole result is read at its first step, in one PGresult (a result
 *     per row cost microseconds a row, most of a summary's time), and the connection
 *     is free again; one prepared by db_prepare_stream runs in single-row mode, so a
 *     long result (an export) streams instead of filling memory.
 *   - Integers are 64-bit on both (the PostgreSQL schema uses BIGINT throughout); a
 *     column of SUM() comes back as NUMERIC text and still reads as an int64.
 *   - A lost PostgreSQL connection fails the call in progress with DB_LOST; the next
 *     db_begin or db_step reconnects and prepares the statements again, so a statement
 *     handle stays valid across an outage. A transaction the connection broke in
 *     stays DB_LOST (every call) until db_rollback: none of it runs on the new one.
 *   - A failed statement inside a PostgreSQL transaction aborts the transaction (its
 *     db_commit returns DB_ERROR); on SQLite only the statement fails. Where a
 *     conflict is expected, say so in the SQL (INSERT ... ON CONFLICT).
 *   - PostgreSQL's text holds only UTF-8 without NUL: text bound with bytes that are
 *     not (a peer's stray byte) is stored with U+FFFD in their place, where PostgreSQL
 *     would refuse the row; SQLite stores the bytes as given.
 *
 * Schemas: sql/schema.sql (SQLite, version in PRAGMA user_version) and
 * sql/pg/schema.sql (PostgreSQL, version in meta 'schema_version') always describe the
 * newest schema, DB_SCHEMA_VERSION; older databases are brought up by the ordered
 * migrations of sql/migrations (SQLite) and sql/pg/migrations (PostgreSQL). */
#ifndef TALLY_DB_H
#define TALLY_DB_H

#include <stddef.h>
#include <stdint.h>

#define DB_SCHEMA_VERSION 22
#define DB_BUSY_TIMEOUT_MS 5000

struct db;
struct db_stmt;

enum db_kind {
	DB_SQLITE,
	DB_POSTGRES,
};

enum db_mode {
	DB_READONLY,   /* existing database at DB_SCHEMA_VERSION, read only (queryd) */
	DB_READWRITE,  /* existing database at DB_SCHEMA_VERSION */
	DB_CREATE,     /* create the schema if needed, migrate an older schema */
	DB_PROBE,      /* existing database at DB_SCHEMA_VERSION, read only and, for SQLite,
	                * leaving no file behind (--self-check): with no -wal beside it (the
	                * file then holds every committed change) it is read as immutable,
	                * because a read-only connection would create -wal and -shm files,
	                * owned by whoever checks, that the agent might then be unable to
	                * open */
};

/* What a call returned. Every failure is one of the last five; db_errmsg says more. */
enum db_status {
	DB_OK = 0,
	DB_ROW,         /* db_step: a row is ready to read */
	DB_DONE,        /* db_step: the statement ran to its end */
	DB_ERROR,       /* anything else: bad SQL, I/O error, ... */
	DB_CONSTRAINT,  /* a UNIQUE, CHECK, NOT NULL or foreign key refused the change */
	DB_BUSY,        /* locked by another connection past the busy timeout */
	DB_FULL,        /* disk full, or SQLite's max_page_count reached */
	DB_LOST,        /* PostgreSQL: the connection broke (see above) */
};

/* A column's type in the current row. */
enum db_type {
	DB_NULL,
	DB_INT,
	DB_TEXT,
	DB_BLOB,
};

/* 1 if store names a PostgreSQL database (starts with "postgresql://" or
 * "postgres://"), else 0 (a SQLite path). */
int db_is_postgres(const char *store);

/* store as it may be printed (logs, errors): a URL's password, in its user part or a
 * password= parameter, replaced by "***"; a path as it is. Returns buf (truncated to
 * len). */
const char *db_store_name(const char *store, char *buf, size_t len);

/* Opens store. SQLite: WAL, synchronous=NORMAL, foreign_keys=ON, a busy timeout of
 * DB_BUSY_TIMEOUT_MS (DB_READONLY and DB_PROBE leave the journal mode as the file has
 * it), no SQLite mutexes. PostgreSQL: a libpq connection (DB_READONLY and DB_PROBE
 * sessions are read only). A schema newer than this binary is always refused; an
 * older one is refused unless mode is DB_CREATE, which migrates it; creating and
 * migrating are serialised between processes (SQLite: an IMMEDIATE transaction,
 * PostgreSQL: an advisory lock). On success *out owns the connection (db_close).
 * Returns 0, or -1 with a message naming the store (a URL's password left out) in err
 * and *out set to NULL. */
int db_open(const char *store, enum db_mode mode, struct db **out, char *err, size_t errlen);

/* Closes db; NULL is a no-op. Finalize its statements first. */
void db_close(struct db *db);

enum db_kind db_kind(const struct db *db);

/* The last error on db, or "" (valid until the next call on db). */
const char *db_errmsg(struct db *db);

/* Runs fixed SQL (one or more statements, never built from peer input, no
 * parameters). Returns 0, or -1 with the store's message in err. */
int db_exec(struct db *db, const char *sql, char *err, size_t errlen);

/* Runs fixed SQL whose first row's first column is an integer into *out.
 * Returns 0, or -1 (an error, or no row). */
int db_query_int(struct db *db, const char *sql, int64_t *out);

/* Transactions. db_begin takes the write lock at once on SQLite (BEGIN IMMEDIATE) so
 * a writer never fails half way on a lock; on PostgreSQL it is BEGIN (and reconnects
 * first if the connection was lost). db_rollback is a no-op outside a transaction.
 * Return DB_OK or the failure. */
enum db_status db_begin(struct db *db);
enum db_status db_commit(struct db *db);
void db_rollback(struct db *db);
int db_in_transaction(struct db *db);

/* Prepares sql (one statement; parameters as above). Returns 0, or -1 with the error
 * in db_errmsg(db). *out belongs to db and must be finalized before db_close. */
int db_prepare(struct db *db, const char *sql, struct db_stmt **out);
/* As db_prepare, for a result that may be too long to hold at once (an export, a load
 * of every row since a time): on PostgreSQL its rows come in one at a time, where
 * db_prepare's statement holds its whole result from the first step until the run
 * ends. The same on SQLite, which always steps row by row. */
int db_prepare_stream(struct db *db, const char *sql, struct db_stmt **out);
void db_finalize(struct db_stmt *st);   /* NULL is a no-op */

/* Binding, parameters numbered from 1. Text and blobs are NOT copied: s must stay
 * unchanged until the statement has been stepped to its end or reset (the writer
 * binds its rows' fields in place). len: bytes, no NUL needed. Return 0, or -1 for
 * an index out of range (or no memory). */
int db_bind_int(struct db_stmt *st, int i, int64_t v);
int db_bind_text(struct db_stmt *st, int i, const char *s, size_t len);
int db_bind_blob(struct db_stmt *st, int i, const void *p, size_t len);
int db_bind_null(struct db_stmt *st, int i);
int db_param_count(struct db_stmt *st);
/* The number of parameter name (":name"), 0 if the statement has none so named. */
int db_param_index(struct db_stmt *st, const char *name);

/* Runs the statement or moves to its next row: DB_ROW, DB_DONE or a failure. After
 * DB_DONE or a failure, db_reset before stepping again. */
enum db_status db_step(struct db_stmt *st);

/* Rows the statement's last run inserted, updated or deleted (valid after DB_DONE). */
int64_t db_changes(struct db_stmt *st);

/* Ends the current run (the rest of a result is discarded) so the statement can run
 * again; bindings stay. db_clear_bindings sets every parameter to NULL. */
void db_reset(struct db_stmt *st);
void db_clear_bindings(struct db_stmt *st);

/* Columns of the current row, numbered from 0; count and names are also known before
 * the first step. db_col_text is NULL for NULL and NUL-terminated; text and blob
 * pointers are valid until the next step or reset. A blob column of PostgreSQL
 * (BYTEA) is decoded; db_col_bytes is the length of a text or blob value. */
int db_col_count(struct db_stmt *st);
const char *db_col_name(struct db_stmt *st, int i);
enum db_type db_col_type(struct db_stmt *st, int i);
int64_t db_col_int(struct db_stmt *st, int i);
const char *db_col_text(struct db_stmt *st, int i);
const void *db_col_blob(struct db_stmt *st, int i);
size_t db_col_bytes(struct db_stmt *st, int i);

/* The schema version of db, or -1 on error. */
int db_schema_version(struct db *db);

/* A scalar SQL expression (parenthesised) reading the schema version of a database
 * holding tally's schema, for statements that check it as they run. */
const char *db_schema_version_sql(struct db *db);

/* Keeps any migration out until the open transaction ends, so that what it reads of
 * the schema version holds at its commit: on PostgreSQL the migrations' advisory lock,
 * shared (a migration waits for the transaction, or the transaction for a migration
 * under way); on SQLite nothing, as a writer's IMMEDIATE transaction already excludes
 * one. DB_OK, or the store's error. */
enum db_status db_schema_hold(struct db *db);

/* meta.config_generation, or -1 on error. Cheap enough to poll. */
int64_t db_config_generation(struct db *db);

/* When the accounting counters were last committed (accounting.updated_at, unix
 * seconds, the newest of any node's): about when an agent last accounted a row.
 * -1 on error. */
int64_t db_accounted_at(struct db *db);

/* Current time in unix seconds, the unit of every *_at column. */
int64_t db_now(void);

/* Brings an initialised database up to version count + 1 by running migrations[v - 1]
 * for each version v below that, each step in its own transaction together with the
 * version bump, so a failed step leaves the database at version v. A database newer
 * than count + 1 is refused. db_open() calls it with the built-in list of db's kind;
 * it is public so tests can supply their own. Returns 0, or -1 with a message. */
int db_migrate(struct db *db, const char *const *migrations, int count, char *err,
               size_t errlen);

#endif
