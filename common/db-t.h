/* Types shared by db.c and its two backends, dblite.c (SQLite) and dbpg.c
 * (PostgreSQL): the connection and statement layouts and struct db_ops, the table
 * through which db.c's public API reaches the backend db_open chose. Internal to
 * common/db*.c: callers use db.h only. */
#ifndef TALLY_DB_T_H
#define TALLY_DB_T_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "db.h"

#define DB_ERR_MAX 512
#define DB_PG_INT_LEN 24

struct db {
	const struct db_ops *ops;
	/* SQLite */
	sqlite3 *lite;
	/* PostgreSQL */
	PGconn *pg;
	int readonly;            /* DB_READONLY, DB_PROBE: read-only sessions */
	int lost;                /* the connection broke: reconnect before the next command */
	int began;               /* inside a db_begin ... db_commit */
	int tx_lost;             /* the connection broke inside one: DB_LOST until rollback */
	unsigned gen;            /* connections so far: a statement prepared on an older one
	                          * is prepared again */
	unsigned next_name;      /* prepared statements' names */
	struct db_stmt *active;  /* the statement whose rows are still coming in */
	char err[DB_ERR_MAX];
};

enum db_run {
	DB_RUN_IDLE,       /* reset: the next step runs it */
	DB_RUN_STREAM,     /* its rows are coming in on the connection (db->active) */
	DB_RUN_BUFFERED,   /* its remaining results were read into buf (another command ran) */
	DB_RUN_WHOLE,      /* not streaming: its whole result is in row, rowi the current row */
	DB_RUN_FINISHED,   /* DB_DONE or a failure was returned */
};

struct db_stmt {
	struct db *db;
	int64_t changes;
	int stream;             /* db_prepare_stream (PostgreSQL: single-row mode) */
	/* SQLite */
	sqlite3_stmt *lite;
	/* PostgreSQL */
	char *sql;              /* with $N parameters */
	char name[24];
	unsigned gen;           /* db->gen it is prepared on */
	PGresult *desc;         /* parameter and column types, column names */
	Oid *types;             /* parameter types forced at prepare (INT8 for INT4), or 0 */
	int nparams;
	char **pnames;          /* ":name" of each parameter, or NULL */
	const char **values;    /* bindings: NULL is SQL NULL */
	int *lengths;
	int *formats;           /* 1: binary (bytes as they are) */
	char (*ints)[DB_PG_INT_LEN];
	char **copies;          /* a binding's own bytes: text made valid UTF-8, or text
	                         * NUL-terminated for a parameter of another type */
	enum db_run run;
	int cancel_ok;          /* it runs outside a transaction: cancelling harms nothing */
	PGresult *row;          /* the current row: a row's own result, or the whole result */
	int rowi;               /* the current row's index in row (0 when streaming) */
	PGresult **buf;         /* DB_RUN_BUFFERED: the results still to step through */
	size_t nbuf, pos, cap;
	int short_buf;          /* one did not fit (no memory): the run fails */
	char **blobs;           /* the current row's decoded BYTEA, by column */
	size_t *blob_len;
};

/* One backend. Each entry does what the db.h function of its name does, on this
 * backend; db.c has done the backend-neutral part (NULL checks, allocating and freeing
 * the structs). Failures leave their message in db->err (db_set_err). */
struct db_ops {
	enum db_kind kind;
	/* Opens store into db (allocated, ops set); msg says why not. The schema is
	 * checked by db.c afterwards. db->close is called on failure too. */
	int (*open)(struct db *db, const char *store, enum db_mode mode, char *msg,
	            size_t msglen);
	void (*close)(struct db *db);
	/* Runs fixed SQL, several statements allowed. */
	enum db_status (*exec)(struct db *db, const char *sql);
	int (*query_int)(struct db *db, const char *sql, int64_t *out);
	enum db_status (*begin)(struct db *db);
	enum db_status (*commit)(struct db *db);
	void (*rollback)(struct db *db);
	int (*in_transaction)(struct db *db);
	/* Prepares sql into st (allocated, db and stream set); on failure db.c finalizes
	 * st, so finalize frees what prepare got so far (and never st itself). */
	int (*prepare)(struct db *db, const char *sql, struct db_stmt *st);
	void (*finalize)(struct db_stmt *st);
	int (*bind_int)(struct db_stmt *st, int i, int64_t v);
	int (*bind_text)(struct db_stmt *st, int i, const char *s, size_t len);
	int (*bind_blob)(struct db_stmt *st, int i, const void *p, size_t len);
	int (*bind_null)(struct db_stmt *st, int i);
	int (*param_count)(struct db_stmt *st);
	int (*param_index)(struct db_stmt *st, const char *name);
	enum db_status (*step)(struct db_stmt *st);
	void (*reset)(struct db_stmt *st);
	void (*clear_bindings)(struct db_stmt *st);
	int (*col_count)(struct db_stmt *st);
	const char *(*col_name)(struct db_stmt *st, int i);
	enum db_type (*col_type)(struct db_stmt *st, int i);
	int64_t (*col_int)(struct db_stmt *st, int i);
	const char *(*col_text)(struct db_stmt *st, int i);
	const void *(*col_blob)(struct db_stmt *st, int i);
	size_t (*col_bytes)(struct db_stmt *st, int i);
	/* The schema's version (0: no tally schema), or -1. */
	int (*schema_version)(struct db *db);
	/* The schema, as the migration logic of db.c needs it: */
	const char *schema_lock_sql;   /* run first in a schema change's transaction, or NULL
	                                * (the transaction itself locks) */
	const char *schema_share_sql;  /* the same lock shared (db_schema_hold), or NULL */
	const char *version_sql;       /* an expression reading the version (tally's schema) */
	const char *version_set_fmt;   /* SQL setting the version to %d */
	const char *objects_sql;       /* counts the objects of the database */
	const char *schema_file;       /* the newest schema: its file, for messages */
	const char *schema_sql;        /* and its SQL */
	const char *const *migrations; /* DB_SCHEMA_VERSION - 1 entries, see db_migrate */
};

void db_set_err(struct db *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
