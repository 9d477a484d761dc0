/* dbpg: the PostgreSQL half of the store (libpq), behind db.c's ops table: the
 * connection (lost and made anew), SQLite's parameters rewritten as $N, statements
 * prepared on the server, results read whole or streamed, text bound as valid UTF-8.
 * db.h says how it maps the API. Called from any thread, each with its own
 * connection. */
#include "dbpg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db-t.h"

#define DB_PG_MAX_PARAMS 32766      /* SQLite's highest parameter number */
#define DB_PG_DRAIN_MAX 256         /* rows read off before an abandoned query is cancelled */
#define DB_PG_SCHEMA_LOCK "499850701945"   /* "tally" in ASCII: the advisory lock of
                                            * schema changes */
/* The schema version, kept in meta (0 until set). */
#define DBPG_VERSION_SQL \
	"(SELECT coalesce(max(value), 0) FROM meta WHERE name = 'schema_version')"

/* PostgreSQL type OIDs (pg_type.dat; fixed since long before version 9). */
enum {
	DB_OID_BOOL = 16,
	DB_OID_BYTEA = 17,
	DB_OID_NAME = 19,
	DB_OID_INT8 = 20,
	DB_OID_INT2 = 21,
	DB_OID_INT4 = 23,
	DB_OID_TEXT = 25,
	DB_OID_OID = 26,
	DB_OID_JSON = 114,
	DB_OID_FLOAT4 = 700,
	DB_OID_FLOAT8 = 701,
	DB_OID_BPCHAR = 1042,
	DB_OID_VARCHAR = 1043,
	DB_OID_NUMERIC = 1700,
};

/* Generated from sql/pg/schema.sql by the Makefile. */
extern const char tally_pg_schema_sql[];

/* Generated from the files in sql/pg/migrations by the Makefile: entry i upgrades
 * version i + 1 to i + 2, DB_SCHEMA_VERSION - 1 entries: those below the first
 * PostgreSQL schema (9) are NULL, as no such database exists. */
extern const char *const tally_pg_migrations_sql[];

/* ---- the connection ---- */

/* A SQLSTATE as a db_status. */
static enum db_status dbpg_sqlstate(const char *state)
{
	if (!state)
		return DB_ERROR;
	if (strncmp(state, "23", 2) == 0)
		return DB_CONSTRAINT;
	if (strcmp(state, "53100") == 0)
		return DB_FULL;
	if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
	    strcmp(state, "55P03") == 0)
		return DB_BUSY;
	/* connection exceptions; the server shutting down or starting */
	if (strncmp(state, "08", 2) == 0 || strncmp(state, "57P0", 4) == 0)
		return DB_LOST;
	return DB_ERROR;
}

/* The connection broke: every statement must be prepared again on the next one, and
 * a transaction it was in is gone. */
static void dbpg_mark_lost(struct db *db)
{
	db->lost = 1;
	if (db->began)
		db->tx_lost = 1;
	db->began = 0;
	db->active = NULL;
}

/* The failure res (NULL: the connection's own) as a db_status, its message kept. */
static enum db_status dbpg_fail(struct db *db, const PGresult *res)
{
	enum db_status status;

	status = res ? dbpg_sqlstate(PQresultErrorField(res, PG_DIAG_SQLSTATE)) : DB_ERROR;
	if (res && *PQresultErrorMessage(res))
		db_set_err(db, "%s", PQresultErrorMessage(res));
	else
		db_set_err(db, "%s", PQerrorMessage(db->pg));
	if (status == DB_LOST || PQstatus(db->pg) != CONNECTION_OK) {
		dbpg_mark_lost(db);
		status = DB_LOST;
	}
	return status;
}

/* Notices (an IF NOT EXISTS that found the object, ...) would go to stderr. */
static void dbpg_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

/* Runs one fixed command and checks it; DB_OK or the failure. */
static enum db_status dbpg_command(struct db *db, const char *sql)
{
	PGresult *res = PQexec(db->pg, sql);
	enum db_status status = DB_OK;
	ExecStatusType rs = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

	if (rs != PGRES_COMMAND_OK && rs != PGRES_TUPLES_OK && rs != PGRES_EMPTY_QUERY)
		status = dbpg_fail(db, res);
	PQclear(res);
	return status;
}

/* What every new connection needs: notices dropped, read-only if asked. */
static enum db_status dbpg_session(struct db *db)
{
	PQsetNoticeProcessor(db->pg, dbpg_notice, NULL);
	if (db->readonly)
		return dbpg_command(db, "SET default_transaction_read_only = on");
	return DB_OK;
}

/* Reads the rest of the active statement's results into its buffer, so that another
 * command can use the connection and the statement still sees every row. */
static void dbpg_settle(struct db *db)
{
	struct db_stmt *st = db->active;
	PGresult *res;

	if (!st)
		return;
	db->active = NULL;
	st->run = DB_RUN_BUFFERED;
	while ((res = PQgetResult(db->pg))) {
		if (st->nbuf == st->cap) {
			size_t cap = st->cap ? 2 * st->cap : 64;
			PGresult **buf = realloc(st->buf, cap * sizeof(*buf));

			if (!buf) {
				st->short_buf = 1;
				PQclear(res);
				continue;
			}
			st->buf = buf;
			st->cap = cap;
		}
		st->buf[st->nbuf++] = res;
	}
}

/* Makes the connection ready for a command: reconnected if it broke (not while a
 * transaction it broke in is still to be rolled back), the active statement settled.
 * DB_OK, or DB_LOST with the reason in db->err. */
static enum db_status dbpg_ready(struct db *db)
{
	if (db->tx_lost) {
		db_set_err(db, "the connection to PostgreSQL broke inside the transaction "
		           "(roll it back)");
		return DB_LOST;
	}
	if (db->lost || PQstatus(db->pg) != CONNECTION_OK) {
		PQreset(db->pg);
		if (PQstatus(db->pg) != CONNECTION_OK) {
			db_set_err(db, "connection lost: %s", PQerrorMessage(db->pg));
			db->lost = 1;
			return DB_LOST;
		}
		db->lost = 0;
		db->began = 0;
		db->active = NULL;
		db->gen++;
		if (dbpg_session(db) != DB_OK)
			return DB_LOST;
	}
	dbpg_settle(db);
	return DB_OK;
}

/* ---- commands and transactions ---- */

static enum db_status dbpg_exec(struct db *db, const char *sql)
{
	enum db_status status = dbpg_ready(db);

	return status == DB_OK ? dbpg_command(db, sql) : status;
}

/* A PostgreSQL value in text form as an integer: booleans as 1 and 0, a numeric or
 * float by its integer part. */
static int64_t dbpg_int(const char *s, Oid type)
{
	const char *p = s + (s[0] == '-');
	uint64_t v = 0;
	int n;

	if (type == DB_OID_BOOL)
		return s[0] == 't';
	if (type == DB_OID_FLOAT4 || type == DB_OID_FLOAT8)
		return (int64_t)strtod(s, NULL);
	/* A summary reads ~30 integers a row: strtoll (locale, bases) was a quarter of its
	 * time. Up to 18 digits cannot overflow; anything longer or odd goes to strtoll,
	 * which saturates. A NUMERIC's fraction ends the digits, as for strtoll. */
	for (n = 0; n < 19 && p[n] >= '0' && p[n] <= '9'; n++)
		v = v * 10 + (uint64_t)(p[n] - '0');
	if (n == 0 || n == 19)
		return (int64_t)strtoll(s, NULL, 10);
	return s[0] == '-' ? -(int64_t)v : (int64_t)v;
}

/* One round trip: cheap enough to poll. */
static int dbpg_query_int(struct db *db, const char *sql, int64_t *out)
{
	PGresult *res = NULL;
	int rc = -1;

	if (dbpg_ready(db) != DB_OK)
		goto out;
	res = PQexec(db->pg, sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		dbpg_fail(db, res);
		goto out;
	}
	if (PQntuples(res) < 1 || PQnfields(res) < 1) {
		db_set_err(db, "no row");
		goto out;
	}
	*out = PQgetisnull(res, 0, 0) ? 0 : dbpg_int(PQgetvalue(res, 0, 0), PQftype(res, 0));
	rc = 0;
out:
	PQclear(res);
	return rc;
}

static enum db_status dbpg_begin(struct db *db)
{
	enum db_status status;

	/* a transaction lost with the connection is over: begin anew on a new one */
	db->tx_lost = 0;
	status = dbpg_ready(db);
	if (status == DB_OK)
		status = dbpg_command(db, "BEGIN");
	db->began = status == DB_OK;
	return status;
}

static enum db_status dbpg_commit(struct db *db)
{
	enum db_status status;
	PGresult *res;

	status = dbpg_ready(db);
	if (status != DB_OK)
		return status;
	res = PQexec(db->pg, "COMMIT");
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		status = dbpg_fail(db, res);
	} else if (strcmp(PQcmdStatus(res), "COMMIT") != 0) {
		/* a statement in it failed: PostgreSQL answers COMMIT with ROLLBACK */
		db_set_err(db, "the transaction was rolled back: a statement in it failed");
		status = DB_ERROR;
	}
	if (status != DB_LOST)
		db->began = 0;
	PQclear(res);
	return status;
}

static void dbpg_rollback(struct db *db)
{
	db->tx_lost = 0;
	if (db->lost) {
		db->began = 0;
		return;
	}
	dbpg_settle(db);
	if (db->began || PQtransactionStatus(db->pg) == PQTRANS_INTRANS ||
	    PQtransactionStatus(db->pg) == PQTRANS_INERROR)
		dbpg_command(db, "ROLLBACK");
	db->began = 0;
}

static int dbpg_in_transaction(struct db *db)
{
	PGTransactionStatusType s;

	if (db->tx_lost)
		return 1;
	if (db->lost)
		return 0;
	s = PQtransactionStatus(db->pg);
	if (s == PQTRANS_ACTIVE)
		return db->began;
	return s == PQTRANS_INTRANS || s == PQTRANS_INERROR;
}

/* ---- preparing and running statements ---- */

static int dbpg_ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || (unsigned char)c >= 0x80;
}

/* Copies sql from *i up to and including the end of the quoted text, comment or
 * dollar-quoted string starting there (returns 1), or copies nothing (returns 0). */
static int dbpg_skip(const char *sql, size_t *i, char *out, size_t *o)
{
	size_t start = *i, j = *i, k;
	const char *close;
	int depth;

	if (sql[j] == '\'') {
		/* E'...' strings escape with backslashes; '' is two adjacent strings */
		int esc = j > 0 && (sql[j - 1] == 'E' || sql[j - 1] == 'e') &&
		          (j < 2 || !dbpg_ident_char(sql[j - 2]));

		for (j++; sql[j] && sql[j] != '\''; j++)
			if (esc && sql[j] == '\\' && sql[j + 1])
				j++;
		j += sql[j] != '\0';
	} else if (sql[j] == '"') {
		for (j++; sql[j] && sql[j] != '"'; j++)
			;
		j += sql[j] != '\0';
	} else if (sql[j] == '-' && sql[j + 1] == '-') {
		j += strcspn(sql + j, "\n");
	} else if (sql[j] == '/' && sql[j + 1] == '*') {
		/* PostgreSQL's block comments nest */
		for (depth = 1, j += 2; sql[j] && depth > 0; j++) {
			if (sql[j] == '/' && sql[j + 1] == '*')
				depth++, j++;
			else if (sql[j] == '*' && sql[j + 1] == '/')
				depth--, j++;
		}
	} else if (sql[j] == '$' && (j == 0 || !dbpg_ident_char(sql[j - 1]))) {
		/* $tag$ ... $tag$ (tag empty or an identifier, not $1) */
		for (k = j + 1; dbpg_ident_char(sql[k]) && !(k == j + 1 && sql[k] >= '0' && sql[k] <= '9');
		     k++)
			;
		if (sql[k] != '$')
			return 0;
		k++;
		close = sql + k;
		for (;;) {
			close = strstr(close, "$");
			if (!close)
				break;
			if (strncmp(close, sql + j, k - j) == 0)
				break;
			close++;
		}
		j = close ? (size_t)(close - sql) + (k - j) : strlen(sql);
	} else {
		return 0;
	}
	memcpy(out + *o, sql + start, j - start);
	*o += j - start;
	*i = j;
	return 1;
}

/* Rewrites SQLite's parameters (?NNN, ?, :name) as $N, numbered as SQLite numbers them:
 * ?NNN is NNN, ? and a new :name one more than the highest so far, a :name seen before
 * its number. Quotes, comments and "::" casts are left as they are. *names gets the
 * name of each number (":name", or NULL), *count the highest. 0, or -1 with db->err. */
static int dbpg_rewrite(struct db *db, const char *sql, char **out, char ***names, int *count)
{
	size_t len = strlen(sql), i = 0, o = 0, n;
	char *text, **nm = NULL;
	int max = 0, idx, k;

	*out = NULL;
	*names = NULL;
	*count = 0;
	/* "?" grows the most: to "$NNNNN" (at most 32766) */
	text = malloc(6 * len + 1);
	if (!text)
		goto nomem;
	while (sql[i]) {
		if (dbpg_skip(sql, &i, text, &o))
			continue;
		if (sql[i] == ':' && sql[i + 1] == ':') {
			memcpy(text + o, "::", 2);
			o += 2;
			i += 2;
			continue;
		}
		if (sql[i] == '?' || (sql[i] == ':' && dbpg_ident_char(sql[i + 1]))) {
			n = 1;
			while (dbpg_ident_char(sql[i + n]))
				n++;
			if (sql[i] == '?' && n > 1) {
				char num[8];

				if (n - 1 > 5 || strspn(sql + i + 1, "0123456789") < n - 1) {
					db_set_err(db, "bad parameter ?%.*s", (int)(n - 1), sql + i + 1);
					goto out;
				}
				memcpy(num, sql + i + 1, n - 1);
				num[n - 1] = '\0';
				idx = atoi(num);
			} else if (sql[i] == '?') {
				idx = max + 1;
			} else {
				for (idx = 0, k = 0; k < max; k++)
					if (nm[k] && strlen(nm[k]) == n && strncmp(nm[k], sql + i, n) == 0)
						idx = k + 1;
				if (!idx)
					idx = max + 1;
			}
			if (idx < 1 || idx > DB_PG_MAX_PARAMS) {
				db_set_err(db, "parameter number %d out of range", idx);
				goto out;
			}
			if (idx > max) {
				char **more = realloc(nm, (size_t)idx * sizeof(*nm));

				if (!more)
					goto nomem;
				nm = more;
				for (k = max; k < idx; k++)
					nm[k] = NULL;
				max = idx;
			}
			if (sql[i] == ':' && !nm[idx - 1] && !(nm[idx - 1] = strndup(sql + i, n)))
				goto nomem;
			o += (size_t)sprintf(text + o, "$%d", idx);
			i += n;
			continue;
		}
		text[o++] = sql[i++];
	}
	text[o] = '\0';
	*out = text;
	*names = nm;
	*count = max;
	return 0;
nomem:
	db_set_err(db, "out of memory");
out:
	for (k = 0; k < max; k++)
		free(nm[k]);
	free(nm);
	free(text);
	return -1;
}

/* Prepares st on the current connection and describes it. A parameter PostgreSQL
 * takes for an INT4 or INT2 (from "? * 1000", say) is prepared again as an INT8: every
 * integer of tally's is 64-bit. */
static enum db_status dbpg_prepare_on_server(struct db_stmt *st)
{
	struct db *db = st->db;
	PGresult *res;
	char dealloc[48];
	int pass, i, again;

	for (pass = 0; pass < 2; pass++) {
		res = PQprepare(db->pg, st->name, st->sql, st->types ? st->nparams : 0, st->types);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			enum db_status status = dbpg_fail(db, res);

			PQclear(res);
			return status;
		}
		PQclear(res);
		PQclear(st->desc);
		st->desc = PQdescribePrepared(db->pg, st->name);
		if (PQresultStatus(st->desc) != PGRES_COMMAND_OK)
			return dbpg_fail(db, st->desc);
		if (st->types || PQnparams(st->desc) != st->nparams)
			break;
		for (again = 0, i = 0; i < st->nparams; i++) {
			Oid t = PQparamtype(st->desc, i);

			again |= t == DB_OID_INT4 || t == DB_OID_INT2;
		}
		if (!again)
			break;
		st->types = calloc((size_t)st->nparams, sizeof(*st->types));
		if (!st->types) {
			db_set_err(db, "out of memory");
			return DB_ERROR;
		}
		for (i = 0; i < st->nparams; i++) {
			Oid t = PQparamtype(st->desc, i);

			st->types[i] = t == DB_OID_INT4 || t == DB_OID_INT2 ? DB_OID_INT8 : t;
		}
		snprintf(dealloc, sizeof(dealloc), "DEALLOCATE %s", st->name);
		if (dbpg_command(db, dealloc) != DB_OK)
			return DB_ERROR;
	}
	if (PQnparams(st->desc) != st->nparams) {
		db_set_err(db, "PostgreSQL counts %d parameters where SQLite would count %d",
		           PQnparams(st->desc), st->nparams);
		return DB_ERROR;
	}
	st->gen = db->gen;
	return DB_OK;
}

static int dbpg_prepare(struct db *db, const char *sql, struct db_stmt *st)
{
	size_t n;

	if (dbpg_rewrite(db, sql, &st->sql, &st->pnames, &st->nparams) < 0)
		return -1;
	n = (size_t)(st->nparams ? st->nparams : 1);
	st->values = calloc(n, sizeof(*st->values));
	st->lengths = calloc(n, sizeof(*st->lengths));
	st->formats = calloc(n, sizeof(*st->formats));
	st->ints = calloc(n, sizeof(*st->ints));
	st->copies = calloc(n, sizeof(*st->copies));
	if (!st->values || !st->lengths || !st->formats || !st->ints || !st->copies) {
		db_set_err(db, "out of memory");
		return -1;
	}
	snprintf(st->name, sizeof(st->name), "tally_%u", db->next_name++);
	if (dbpg_ready(db) != DB_OK || dbpg_prepare_on_server(st) != DB_OK)
		return -1;
	return 0;
}

/* Forgets the current row's decoded blobs (kept in its result). */
static void dbpg_forget_blobs(struct db_stmt *st)
{
	int i, n = st->desc ? PQnfields(st->desc) : 0;

	for (i = 0; st->blobs && i < n; i++)
		st->blobs[i] = NULL;
}

/* Forgets the current row and its result (which holds the blobs). */
static void dbpg_drop_row(struct db_stmt *st)
{
	PQclear(st->row);
	st->row = NULL;
	st->rowi = 0;
	dbpg_forget_blobs(st);
}

/* Ends st's run: the rest of a streaming result is read off (a long one cancelled when
 * that harms no transaction), a buffered one freed. */
static void dbpg_end_run(struct db_stmt *st)
{
	struct db *db = st->db;
	PGresult *res;
	size_t n = 0;

	dbpg_drop_row(st);
	if (st->run == DB_RUN_STREAM && db->active == st) {
		while ((res = PQgetResult(db->pg))) {
			PQclear(res);
			if (++n == DB_PG_DRAIN_MAX && st->cancel_ok) {
				PGcancel *c = PQgetCancel(db->pg);
				char buf[256];

				if (c) {
					PQcancel(c, buf, sizeof(buf));
					PQfreeCancel(c);
				}
			}
		}
		db->active = NULL;
		if (PQstatus(db->pg) != CONNECTION_OK)
			dbpg_mark_lost(db);
	}
	while (st->pos < st->nbuf)
		PQclear(st->buf[st->pos++]);
	st->nbuf = st->pos = 0;
	st->short_buf = 0;
	st->run = DB_RUN_IDLE;
}

/* Sends st with its bindings, rows to come one at a time if it streams. */
static enum db_status dbpg_send(struct db_stmt *st)
{
	struct db *db = st->db;
	enum db_status status = dbpg_ready(db);

	if (status != DB_OK)
		return status;
	if (st->gen != db->gen && (status = dbpg_prepare_on_server(st)) != DB_OK)
		return status;
	st->cancel_ok = PQtransactionStatus(db->pg) == PQTRANS_IDLE;
	if (!PQsendQueryPrepared(db->pg, st->name, st->nparams, st->values, st->lengths,
	                         st->formats, 0))
		return dbpg_fail(db, NULL);
	/* A row's own PGresult costs microseconds (a copy of the column descriptions, an
	 * allocation), most of a summary's time on thousands of rows; one result for the
	 * whole run costs that once. Only a statement whose result may be too long to
	 * hold (an export) streams. */
	if (st->stream)
		PQsetSingleRowMode(db->pg);
	st->run = DB_RUN_STREAM;
	db->active = st;
	return DB_OK;
}

/* Rows a run's closing result says it inserted, updated or deleted. */
static int64_t dbpg_changes(PGresult *res)
{
	const char *tag = PQcmdStatus(res);

	return strncmp(tag, "INSERT", 6) == 0 || strncmp(tag, "UPDATE", 6) == 0 ||
	       strncmp(tag, "DELETE", 6) == 0 || strncmp(tag, "MERGE", 5) == 0
	       ? strtoll(PQcmdTuples(res), NULL, 10) : 0;
}

/* db_step on PostgreSQL. */
static enum db_status dbpg_step(struct db_stmt *st)
{
	struct db *db = st->db;
	enum db_status status;
	PGresult *res;

	if (st->run == DB_RUN_WHOLE) {
		dbpg_forget_blobs(st);
		if (++st->rowi < PQntuples(st->row))
			return DB_ROW;
		st->changes = dbpg_changes(st->row);
		dbpg_drop_row(st);
		st->run = DB_RUN_FINISHED;
		return DB_DONE;
	}
	if (st->run == DB_RUN_FINISHED)
		dbpg_end_run(st);   /* as sqlite3_step: stepping a finished statement runs it again */
	if (st->run == DB_RUN_IDLE && (status = dbpg_send(st)) != DB_OK) {
		st->run = DB_RUN_FINISHED;
		return status;
	}
	dbpg_drop_row(st);
	if (st->run == DB_RUN_STREAM && db->active != st) {
		/* its connection broke under another call and was made anew since */
		db_set_err(db, "the connection to PostgreSQL broke while the rows came in");
		st->run = DB_RUN_FINISHED;
		return DB_LOST;
	}
	if (st->run == DB_RUN_BUFFERED && st->short_buf) {
		db_set_err(db, "out of memory reading the rows ahead");
		st->run = DB_RUN_FINISHED;
		return DB_ERROR;
	}
	if (st->run == DB_RUN_STREAM)
		res = PQgetResult(db->pg);
	else
		res = st->pos < st->nbuf ? st->buf[st->pos++] : NULL;
	if (res && PQresultStatus(res) == PGRES_SINGLE_TUPLE) {
		st->row = res;
		return DB_ROW;
	}
	if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0 && !st->stream) {
		/* the whole result: the connection is free again once its end is read */
		PGresult *end;

		if (db->active == st) {
			while ((end = PQgetResult(db->pg)))
				PQclear(end);
			db->active = NULL;
		}
		st->row = res;
		st->run = DB_RUN_WHOLE;
		return DB_ROW;
	}
	status = DB_DONE;
	if (!res) {
		/* every run ends with a closing result: none means the connection broke */
		status = dbpg_fail(db, NULL);
		if (!db->err[0])
			db_set_err(db, "the statement ended without a result");
	} else if (PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK) {
		st->changes = dbpg_changes(res);
	} else {
		status = dbpg_fail(db, res);
	}
	PQclear(res);
	if (st->run == DB_RUN_STREAM && db->active == st) {
		while ((res = PQgetResult(db->pg)))
			PQclear(res);
		db->active = NULL;
	}
	st->run = DB_RUN_FINISHED;
	return status;
}

/* The length of the valid UTF-8 sequence at s (at most n bytes), or 0 if there is
 * none or it is a NUL: PostgreSQL's text holds neither. */
static size_t dbpg_utf8_len(const unsigned char *s, size_t n)
{
	size_t len, k;
	uint32_t c;

	if (s[0] == 0)
		return 0;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, c = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, c = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, c = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[k] & 0x3f);
	}
	/* overlong forms, surrogates, past U+10FFFF */
	if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return len;
}

/* A copy of the n bytes at s with each byte that is not valid UTF-8 (or a NUL) as
 * U+FFFD, NUL-terminated, its length in *out; NULL if s is valid as it is (or no
 * memory: *out is then 0). SQLite stores text as given; PostgreSQL would refuse the
 * row, and with it the writer's whole batch, for a peer's stray byte. */
static char *dbpg_utf8_fix(const char *s, size_t n, size_t *out)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, o = 0, k;
	char *copy;

	*out = 0;
	while (i < n && (k = dbpg_utf8_len(u + i, n - i)) > 0)
		i += k;
	if (i == n)
		return NULL;
	copy = malloc(3 * n + 1);
	if (!copy)
		return NULL;
	for (i = 0; i < n; i += k) {
		k = dbpg_utf8_len(u + i, n - i);
		if (k) {
			memcpy(copy + o, s + i, k);
			o += k;
		} else {
			memcpy(copy + o, "\xef\xbf\xbd", 3);
			o += 3;
			k = 1;
		}
	}
	copy[o] = '\0';
	*out = o;
	return copy;
}

/* Binds v (n bytes) to parameter i as PostgreSQL wants it: bytes as they are where
 * the parameter takes text or bytes (text made valid UTF-8), else a NUL-terminated
 * copy in text form. */
static int dbpg_bind_bytes(struct db_stmt *st, int i, const char *v, size_t n, int blob)
{
	size_t fixed;
	Oid t;

	if (i < 1 || i > st->nparams || n > INT32_MAX) {
		db_set_err(st->db, "bind: parameter %d out of range", i);
		return -1;
	}
	i--;
	free(st->copies[i]);
	st->copies[i] = NULL;
	t = PQparamtype(st->desc, i);
	if (blob || t == DB_OID_BYTEA) {
		st->values[i] = v ? v : "";
		st->lengths[i] = (int)n;
		st->formats[i] = 1;
		return 0;
	}
	if (t == DB_OID_TEXT || t == DB_OID_VARCHAR || t == DB_OID_BPCHAR || t == DB_OID_NAME ||
	    t == DB_OID_JSON) {
		st->copies[i] = v ? dbpg_utf8_fix(v, n, &fixed) : NULL;
		if (st->copies[i]) {
			v = st->copies[i];
			n = fixed;
		}
		st->values[i] = v ? v : "";
		st->lengths[i] = (int)n;
		st->formats[i] = 1;
		return 0;
	}
	/* another type reads the text form: a NUL would end it, so a stray byte is kept
	 * as PostgreSQL then refuses it */
	st->copies[i] = strndup(v ? v : "", n);
	if (!st->copies[i]) {
		db_set_err(st->db, "out of memory");
		return -1;
	}
	st->values[i] = st->copies[i];
	st->lengths[i] = 0;
	st->formats[i] = 0;
	return 0;
}

/* ---- the statement API ---- */

static void dbpg_finalize(struct db_stmt *st)
{
	struct db *db = st->db;
	char dealloc[48];
	int i;

	dbpg_end_run(st);
	/* the server keeps a prepared statement as long as its connection */
	if (st->desc && st->gen == db->gen && !db->lost) {
		snprintf(dealloc, sizeof(dealloc), "DEALLOCATE %s", st->name);
		dbpg_settle(db);
		PQclear(PQexec(db->pg, dealloc));
	}
	PQclear(st->desc);
	for (i = 0; i < st->nparams; i++) {
		if (st->pnames)
			free(st->pnames[i]);
		if (st->copies)
			free(st->copies[i]);
	}
	free(st->pnames);
	free(st->copies);
	free(st->sql);
	free(st->types);
	free(st->values);
	free(st->lengths);
	free(st->formats);
	free(st->ints);
	free(st->buf);
	free(st->blobs);
	free(st->blob_len);
}

static int dbpg_bind_int(struct db_stmt *st, int i, int64_t v)
{
	if (i < 1 || i > st->nparams) {
		db_set_err(st->db, "bind: parameter %d out of range", i);
		return -1;
	}
	i--;
	free(st->copies[i]);
	st->copies[i] = NULL;
	snprintf(st->ints[i], sizeof(st->ints[i]), "%lld", (long long)v);
	st->values[i] = st->ints[i];
	st->lengths[i] = 0;
	st->formats[i] = 0;
	return 0;
}

static int dbpg_bind_text(struct db_stmt *st, int i, const char *s, size_t len)
{
	return dbpg_bind_bytes(st, i, s, len, 0);
}

static int dbpg_bind_blob(struct db_stmt *st, int i, const void *p, size_t len)
{
	return dbpg_bind_bytes(st, i, p, len, 1);
}

static int dbpg_bind_null(struct db_stmt *st, int i)
{
	if (i < 1 || i > st->nparams) {
		db_set_err(st->db, "bind: parameter %d out of range", i);
		return -1;
	}
	free(st->copies[i - 1]);
	st->copies[i - 1] = NULL;
	st->values[i - 1] = NULL;
	return 0;
}

static int dbpg_param_count(struct db_stmt *st)
{
	return st->nparams;
}

static int dbpg_param_index(struct db_stmt *st, const char *name)
{
	int i;

	for (i = 0; i < st->nparams; i++)
		if (st->pnames[i] && strcmp(st->pnames[i], name) == 0)
			return i + 1;
	return 0;
}

static void dbpg_clear_bindings(struct db_stmt *st)
{
	int i;

	for (i = 1; i <= st->nparams; i++)
		dbpg_bind_null(st, i);
}

/* ---- columns ---- */

/* 1 if column i of st's current row exists and is not NULL. */
static int dbpg_has(struct db_stmt *st, int i)
{
	return st->row && i >= 0 && i < PQnfields(st->row) && !PQgetisnull(st->row, st->rowi, i);
}

/* Column i of the current row decoded from BYTEA's text form; NULL if none. */
static const char *dbpg_blob(struct db_stmt *st, int i, size_t *len)
{
	int n = PQnfields(st->desc);

	*len = 0;
	if (!dbpg_has(st, i))
		return NULL;
	if (!st->blobs) {
		st->blobs = calloc((size_t)n, sizeof(*st->blobs));
		st->blob_len = calloc((size_t)n, sizeof(*st->blob_len));
		if (!st->blobs || !st->blob_len) {
			free(st->blobs);
			free(st->blob_len);
			st->blobs = NULL;
			st->blob_len = NULL;
			return NULL;
		}
	}
	if (!st->blobs[i]) {
		size_t bytes;
		const char *text = PQgetvalue(st->row, st->rowi, i);
		unsigned char *raw = PQunescapeBytea((const unsigned char *)text, &bytes);
		char *z;

		if (!raw)
			return NULL;
		/* kept in the row's result (freed by PQclear: at the next step when it streams,
		 * else when the run ends), NUL-terminated as db_col_text promises */
		z = PQresultAlloc(st->row, bytes + 1);
		if (z) {
			memcpy(z, raw, bytes);
			z[bytes] = '\0';
			st->blobs[i] = z;
			st->blob_len[i] = bytes;
		}
		PQfreemem(raw);
		if (!z)
			return NULL;
	}
	*len = st->blob_len[i];
	return st->blobs[i];
}
static int dbpg_col_count(struct db_stmt *st)
{
	return st->desc ? PQnfields(st->desc) : 0;
}

static const char *dbpg_col_name(struct db_stmt *st, int i)
{
	return st->desc && i >= 0 && i < PQnfields(st->desc) ? PQfname(st->desc, i) : NULL;
}

static enum db_type dbpg_col_type(struct db_stmt *st, int i)
{
	if (!dbpg_has(st, i))
		return DB_NULL;
	switch (PQftype(st->row, i)) {
	case DB_OID_BYTEA:
		return DB_BLOB;
	case DB_OID_INT8:
	case DB_OID_INT4:
	case DB_OID_INT2:
	case DB_OID_NUMERIC:
	case DB_OID_BOOL:
	case DB_OID_OID:
	case DB_OID_FLOAT4:
	case DB_OID_FLOAT8:
		return DB_INT;
	default:
		return DB_TEXT;
	}
}

static int64_t dbpg_col_int(struct db_stmt *st, int i)
{
	return dbpg_has(st, i)
	       ? dbpg_int(PQgetvalue(st->row, st->rowi, i), PQftype(st->row, i)) : 0;
}

/* db_col_text and db_col_blob: a BYTEA decoded, any other value in its text form. */
static const char *dbpg_col_value(struct db_stmt *st, int i)
{
	size_t len;

	if (!dbpg_has(st, i))
		return NULL;
	if (PQftype(st->row, i) == DB_OID_BYTEA)
		return dbpg_blob(st, i, &len);
	return PQgetvalue(st->row, st->rowi, i);
}

static const void *dbpg_col_blob(struct db_stmt *st, int i)
{
	return dbpg_col_value(st, i);
}

static size_t dbpg_col_bytes(struct db_stmt *st, int i)
{
	size_t len;

	if (!dbpg_has(st, i))
		return 0;
	if (PQftype(st->row, i) == DB_OID_BYTEA) {
		dbpg_blob(st, i, &len);
		return len;
	}
	return (size_t)PQgetlength(st->row, st->rowi, i);
}

/* ---- schema and opening ---- */

/* The version in meta 'schema_version'; 0 while there is no meta table. */
static int dbpg_schema_version(struct db *db)
{
	int64_t v;

	if (dbpg_query_int(db, "SELECT count(*) FROM pg_catalog.pg_tables"
	                       " WHERE schemaname = current_schema() AND tablename = 'meta'",
	                   &v) < 0)
		return -1;
	if (v == 0)
		return 0;
	return dbpg_query_int(db, "SELECT " DBPG_VERSION_SQL, &v) < 0 ? -1 : (int)v;
}

/* Connects to the PostgreSQL database at url into db (see db_open); msg says why not.
 * Defaults go before the URL, which may override them: a server that stops
 * answering (a host gone, a partition) fails a call within about half a minute
 * (keepalives, tcp_user_timeout) instead of blocking its thread for good. */
static int dbpg_open(struct db *db, const char *url, enum db_mode mode, char *msg,
                     size_t msglen)
{
	static const char *const keys[] = {
		"connect_timeout", "application_name", "client_encoding", "keepalives_idle",
		"keepalives_interval", "keepalives_count", "tcp_user_timeout", "dbname", NULL,
	};
	const char *values[] = { "10", "tally", "UTF8", "10", "5", "3", "30000", url, NULL };

	db->pg = PQconnectdbParams(keys, values, 1);
	if (!db->pg) {
		snprintf(msg, msglen, "out of memory");
		return -1;
	}
	if (PQstatus(db->pg) != CONNECTION_OK) {
		db_set_err(db, "%s", PQerrorMessage(db->pg));
		snprintf(msg, msglen, "%s", db->err);
		return -1;
	}
	db->readonly = mode == DB_READONLY || mode == DB_PROBE;
	if (dbpg_session(db) != DB_OK) {
		snprintf(msg, msglen, "%s", db->err);
		return -1;
	}
	return 0;
}

static void dbpg_close(struct db *db)
{
	PQfinish(db->pg);
}

const struct db_ops dbpg_ops = {
	.kind = DB_POSTGRES,
	.open = dbpg_open,
	.close = dbpg_close,
	.exec = dbpg_exec,
	.query_int = dbpg_query_int,
	.begin = dbpg_begin,
	.commit = dbpg_commit,
	.rollback = dbpg_rollback,
	.in_transaction = dbpg_in_transaction,
	.prepare = dbpg_prepare,
	.finalize = dbpg_finalize,
	.bind_int = dbpg_bind_int,
	.bind_text = dbpg_bind_text,
	.bind_blob = dbpg_bind_blob,
	.bind_null = dbpg_bind_null,
	.param_count = dbpg_param_count,
	.param_index = dbpg_param_index,
	.step = dbpg_step,
	.reset = dbpg_end_run,
	.clear_bindings = dbpg_clear_bindings,
	.col_count = dbpg_col_count,
	.col_name = dbpg_col_name,
	.col_type = dbpg_col_type,
	.col_int = dbpg_col_int,
	.col_text = dbpg_col_value,
	.col_blob = dbpg_col_blob,
	.col_bytes = dbpg_col_bytes,
	.schema_version = dbpg_schema_version,
	.schema_lock_sql = "SELECT pg_advisory_xact_lock(" DB_PG_SCHEMA_LOCK ")",
	.schema_share_sql = "SELECT pg_advisory_xact_lock_shared(" DB_PG_SCHEMA_LOCK ")",
	.version_sql = DBPG_VERSION_SQL,
	.version_set_fmt = "UPDATE meta SET value = %d WHERE name = 'schema_version'",
	.objects_sql = "SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
	               " ON n.oid = c.relnamespace WHERE n.nspname = current_schema()",
	.schema_file = "sql/pg/schema.sql",
	.schema_sql = tally_pg_schema_sql,
	.migrations = tally_pg_migrations_sql,
};
