/* db: the store behind db.h, SQLite (a path, dblite.c) or PostgreSQL (a URL, dbpg.c):
 * the public API as a call through the ops table db_open chose by the store, and once,
 * over those ops, opening, creating and migrating the schema. Called from any thread,
 * each with its own connection. Creating and migrating a schema are serialised
 * between processes racing to open a new database (tallyctl, agents): SQLite takes an
 * IMMEDIATE transaction, PostgreSQL a transaction advisory lock, and both read the
 * version again under it. */
#include "db.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db-t.h"
#include "dblite.h"
#include "dbpg.h"

void db_set_err(struct db *db, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(db->err, sizeof(db->err), fmt, ap);
	va_end(ap);
	/* libpq's messages end in a newline */
	n = strlen(db->err);
	while (n > 0 && (db->err[n - 1] == '\n' || db->err[n - 1] == ' '))
		db->err[--n] = '\0';
}

int db_is_postgres(const char *store)
{
	return strncmp(store, "postgresql://", 13) == 0 || strncmp(store, "postgres://", 11) == 0;
}

/* Appends n bytes of s to buf (size len) at *o, truncating. */
static void db_put(char *buf, size_t len, size_t *o, const char *s, size_t n)
{
	if (*o + 1 >= len)
		return;
	if (n > len - 1 - *o)
		n = len - 1 - *o;
	memcpy(buf + *o, s, n);
	*o += n;
	buf[*o] = '\0';
}

const char *db_store_name(const char *store, char *buf, size_t len)
{
	const char *p, *auth, *end, *at, *colon;
	size_t o = 0;

	if (len == 0)
		return buf;
	buf[0] = '\0';
	if (!db_is_postgres(store)) {
		db_put(buf, len, &o, store, strlen(store));
		return buf;
	}
	auth = strstr(store, "://") + 3;
	end = auth + strcspn(auth, "/?#");
	at = NULL;
	for (p = auth; p < end; p++)
		if (*p == '@')
			at = p;
	colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	if (colon) {
		db_put(buf, len, &o, store, (size_t)(colon + 1 - store));
		db_put(buf, len, &o, "***", 3);
		p = at;
	} else {
		p = store;
	}
	/* the rest, each password=VALUE of the query replaced */
	while (*p) {
		const char *q = strstr(p, "password=");

		if (!q || q < end || (q[-1] != '?' && q[-1] != '&')) {
			if (!q || q < end) {
				db_put(buf, len, &o, p, strlen(p));
				break;
			}
			db_put(buf, len, &o, p, (size_t)(q + 9 - p));
			p = q + 9;
			continue;
		}
		db_put(buf, len, &o, p, (size_t)(q + 9 - p));
		db_put(buf, len, &o, "***", 3);
		p = q + 9 + strcspn(q + 9, "&#");
	}
	return buf;
}

enum db_kind db_kind(const struct db *db)
{
	return db->ops->kind;
}

const char *db_errmsg(struct db *db)
{
	return db->err;
}

/* ---- commands and transactions ---- */

int db_exec(struct db *db, const char *sql, char *err, size_t errlen)
{
	if (db->ops->exec(db, sql) != DB_OK) {
		snprintf(err, errlen, "%s", db->err);
		return -1;
	}
	return 0;
}

int db_query_int(struct db *db, const char *sql, int64_t *out)
{
	return db->ops->query_int(db, sql, out);
}

enum db_status db_begin(struct db *db)
{
	return db->ops->begin(db);
}

enum db_status db_commit(struct db *db)
{
	return db->ops->commit(db);
}

void db_rollback(struct db *db)
{
	db->ops->rollback(db);
}

int db_in_transaction(struct db *db)
{
	return db->ops->in_transaction(db);
}

/* ---- statements ---- */

/* db_prepare and db_prepare_stream. */
static int db_prepare_mode(struct db *db, const char *sql, int stream, struct db_stmt **out)
{
	struct db_stmt *st;

	*out = NULL;
	st = calloc(1, sizeof(*st));
	if (!st) {
		db_set_err(db, "out of memory");
		return -1;
	}
	st->db = db;
	st->stream = stream;
	if (db->ops->prepare(db, sql, st) < 0) {
		db_finalize(st);
		return -1;
	}
	*out = st;
	return 0;
}

int db_prepare(struct db *db, const char *sql, struct db_stmt **out)
{
	return db_prepare_mode(db, sql, 0, out);
}

int db_prepare_stream(struct db *db, const char *sql, struct db_stmt **out)
{
	return db_prepare_mode(db, sql, 1, out);
}

void db_finalize(struct db_stmt *st)
{
	if (!st)
		return;
	st->db->ops->finalize(st);
	free(st);
}

int db_bind_int(struct db_stmt *st, int i, int64_t v)
{
	return st->db->ops->bind_int(st, i, v);
}

int db_bind_text(struct db_stmt *st, int i, const char *s, size_t len)
{
	return st->db->ops->bind_text(st, i, s, len);
}

int db_bind_blob(struct db_stmt *st, int i, const void *p, size_t len)
{
	return st->db->ops->bind_blob(st, i, p, len);
}

int db_bind_null(struct db_stmt *st, int i)
{
	return st->db->ops->bind_null(st, i);
}

int db_param_count(struct db_stmt *st)
{
	return st->db->ops->param_count(st);
}

int db_param_index(struct db_stmt *st, const char *name)
{
	return st->db->ops->param_index(st, name);
}

enum db_status db_step(struct db_stmt *st)
{
	return st->db->ops->step(st);
}

int64_t db_changes(struct db_stmt *st)
{
	return st->changes;
}

void db_reset(struct db_stmt *st)
{
	st->db->ops->reset(st);
}

void db_clear_bindings(struct db_stmt *st)
{
	st->db->ops->clear_bindings(st);
}

/* ---- columns ---- */

int db_col_count(struct db_stmt *st)
{
	return st->db->ops->col_count(st);
}

const char *db_col_name(struct db_stmt *st, int i)
{
	return st->db->ops->col_name(st, i);
}

enum db_type db_col_type(struct db_stmt *st, int i)
{
	return st->db->ops->col_type(st, i);
}

int64_t db_col_int(struct db_stmt *st, int i)
{
	return st->db->ops->col_int(st, i);
}

const char *db_col_text(struct db_stmt *st, int i)
{
	return st->db->ops->col_text(st, i);
}

const void *db_col_blob(struct db_stmt *st, int i)
{
	return st->db->ops->col_blob(st, i);
}

size_t db_col_bytes(struct db_stmt *st, int i)
{
	return st->db->ops->col_bytes(st, i);
}

/* ---- schema ---- */

int db_schema_version(struct db *db)
{
	return db->ops->schema_version(db);
}

const char *db_schema_version_sql(struct db *db)
{
	return db->ops->version_sql;
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

enum db_status db_schema_hold(struct db *db)
{
	return db->ops->schema_share_sql ? db->ops->exec(db, db->ops->schema_share_sql) : DB_OK;
}

/* Begins the transaction a schema change runs in, holding every other process's
 * off: SQLite's IMMEDIATE transaction is the database's write lock; on PostgreSQL an
 * advisory lock, released at its end. */
static int db_schema_begin(struct db *db, char *err, size_t errlen)
{
	if (db_begin(db) != DB_OK)
		goto fail;
	if (db->ops->schema_lock_sql && db->ops->exec(db, db->ops->schema_lock_sql) != DB_OK)
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "%s", db->err);
	db_rollback(db);
	return -1;
}

static int db_schema_commit(struct db *db, char *err, size_t errlen)
{
	if (db_commit(db) == DB_OK)
		return 0;
	snprintf(err, errlen, "%s", db->err);
	db_rollback(db);
	return -1;
}

int db_migrate(struct db *db, const char *const *migrations, int count, char *err, size_t errlen)
{
	const int target = count + 1;
	char msg[DB_ERR_MAX], bump[96];
	int v = db_schema_version(db);

	if (v == target)
		return 0;
	for (;;) {
		if (db_schema_begin(db, err, errlen) < 0)
			return -1;
		/* Read again under the lock: another process may have migrated meanwhile. */
		v = db_schema_version(db);
		if (db_version_check(db, v, target, 1, err, errlen) < 0)
			goto fail;
		if (v == target)
			return db_schema_commit(db, err, errlen);
		if (!migrations[v - 1]) {
			snprintf(err, errlen, "no migration from version %d on this store", v);
			goto fail;
		}
		snprintf(bump, sizeof(bump), db->ops->version_set_fmt, v + 1);
		if (db_exec(db, migrations[v - 1], msg, sizeof(msg)) < 0 ||
		    db_exec(db, bump, msg, sizeof(msg)) < 0 ||
		    db_schema_commit(db, msg, sizeof(msg)) < 0) {
			snprintf(err, errlen, "migration from version %d to %d failed: %s", v, v + 1, msg);
			goto fail;
		}
	}
fail:
	db_rollback(db);
	return -1;
}

/* Applies the schema if the database is empty (version 0 and no objects). */
static int db_init_schema(struct db *db, char *err, size_t errlen)
{
	int64_t objects;
	int v;

	if (db_schema_version(db) != 0)
		return 0;
	if (db_schema_begin(db, err, errlen) < 0)
		return -1;
	v = db_schema_version(db);
	if (v != 0)
		return db_schema_commit(db, err, errlen);
	if (db_query_int(db, db->ops->objects_sql, &objects) < 0) {
		snprintf(err, errlen, "cannot inspect database: %.400s", db->err);
		goto fail;
	}
	if (objects > 0) {
		snprintf(err, errlen, "not a tally database (it has tables but no schema version)");
		goto fail;
	}
	if (db_exec(db, db->ops->schema_sql, err, errlen) < 0)
		goto fail;
	v = db_schema_version(db);
	if (v != DB_SCHEMA_VERSION) {
		snprintf(err, errlen, "%s sets version %d but this binary expects %d",
		         db->ops->schema_file, v, DB_SCHEMA_VERSION);
		goto fail;
	}
	return db_schema_commit(db, err, errlen);
fail:
	db_rollback(db);
	return -1;
}

/* Brings db to DB_SCHEMA_VERSION (DB_CREATE), or checks that it is there. */
static int db_check_schema(struct db *db, enum db_mode mode, char *msg, size_t msglen)
{
	if (mode == DB_CREATE)
		return db_init_schema(db, msg, msglen) < 0 ||
		       db_migrate(db, db->ops->migrations, DB_SCHEMA_VERSION - 1, msg, msglen) < 0
		       ? -1 : 0;
	return db_version_check(db, db_schema_version(db), DB_SCHEMA_VERSION, 0, msg, msglen);
}

/* ---- opening ---- */

int db_open(const char *store, enum db_mode mode, struct db **out, char *err, size_t errlen)
{
	char msg[DB_ERR_MAX], name[DB_ERR_MAX];
	struct db *db;
	int rc;

	*out = NULL;
	db = calloc(1, sizeof(*db));
	if (!db) {
		snprintf(msg, sizeof(msg), "out of memory");
		rc = -1;
	} else {
		db->ops = db_is_postgres(store) ? &dbpg_ops : &dblite_ops;
		rc = db->ops->open(db, store, mode, msg, sizeof(msg));
		if (rc == 0)
			rc = db_check_schema(db, mode, msg, sizeof(msg));
	}
	if (rc < 0) {
		snprintf(err, errlen, "database %s: %s", db_store_name(store, name, sizeof(name)), msg);
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
	db->ops->close(db);
	free(db);
}
