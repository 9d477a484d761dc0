/* db: the store behind db.h, SQLite (a path) or PostgreSQL (a URL, through libpq):
 * opening, creating and migrating the schema, and the statement API each backend maps
 * (db.h says how). Called from any thread, each with its own connection. Creating and
 * migrating a schema are serialised between processes racing to open a new database
 * (tallyctl, agents): SQLite takes an IMMEDIATE transaction, PostgreSQL a transaction
 * advisory lock, and both read the version again under it. */
#include "db.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#define DB_WAL_RETRY_MS 10
#define DB_ERR_MAX 512
#define DB_PG_MAX_PARAMS 32766      /* SQLite's highest parameter number */
#define DB_PG_DRAIN_MAX 256         /* rows read off before an abandoned query is cancelled */
#define DB_PG_SCHEMA_LOCK "499850701945"   /* "tally" in ASCII: the advisory lock of
                                            * schema changes */
#define DB_PG_INT_LEN 24

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

/* Generated from sql/schema.sql and sql/pg/schema.sql by the Makefile. */
extern const char tally_schema_sql[];
extern const char tally_pg_schema_sql[];

/* Generated from the files in sql/migrations by the Makefile: entry i upgrades version
 * i + 1 to i + 2; NULL ends the list. A migration is frozen once released: schema.sql
 * moves on, a migration never does. */
extern const char *const tally_migrations_sql[];

/* The same for PostgreSQL (sql/pg/migrations), DB_SCHEMA_VERSION - 1 entries: those
 * below the first PostgreSQL schema (9) are NULL, as no such database exists. */
extern const char *const tally_pg_migrations_sql[];

struct db {
	enum db_kind kind;
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
	sqlite3_stmt *lite;
	int64_t changes;
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
	int stream;             /* db_prepare_stream: single-row mode */
	int cancel_ok;          /* it runs outside a transaction: cancelling harms nothing */
	PGresult *row;          /* the current row: a row's own result, or the whole result */
	int rowi;               /* the current row's index in row (0 when streaming) */
	PGresult **buf;         /* DB_RUN_BUFFERED: the results still to step through */
	size_t nbuf, pos, cap;
	int short_buf;          /* one did not fit (no memory): the run fails */
	char **blobs;           /* the current row's decoded BYTEA, by column */
	size_t *blob_len;
};

static void db_set_err(struct db *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void db_set_err(struct db *db, const char *fmt, ...)
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
	return db->kind;
}

const char *db_errmsg(struct db *db)
{
	return db->err;
}

/* ---- PostgreSQL: the connection ---- */

/* A SQLSTATE as a db_status. */
static enum db_status db_pg_sqlstate(const char *state)
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
static void db_pg_mark_lost(struct db *db)
{
	db->lost = 1;
	if (db->began)
		db->tx_lost = 1;
	db->began = 0;
	db->active = NULL;
}

/* The failure res (NULL: the connection's own) as a db_status, its message kept. */
static enum db_status db_pg_fail(struct db *db, const PGresult *res)
{
	enum db_status status;

	status = res ? db_pg_sqlstate(PQresultErrorField(res, PG_DIAG_SQLSTATE)) : DB_ERROR;
	if (res && *PQresultErrorMessage(res))
		db_set_err(db, "%s", PQresultErrorMessage(res));
	else
		db_set_err(db, "%s", PQerrorMessage(db->pg));
	if (status == DB_LOST || PQstatus(db->pg) != CONNECTION_OK) {
		db_pg_mark_lost(db);
		status = DB_LOST;
	}
	return status;
}

/* Notices (an IF NOT EXISTS that found the object, ...) would go to stderr. */
static void db_pg_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

/* Runs one fixed command and checks it; DB_OK or the failure. */
static enum db_status db_pg_command(struct db *db, const char *sql)
{
	PGresult *res = PQexec(db->pg, sql);
	enum db_status status = DB_OK;
	ExecStatusType rs = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

	if (rs != PGRES_COMMAND_OK && rs != PGRES_TUPLES_OK && rs != PGRES_EMPTY_QUERY)
		status = db_pg_fail(db, res);
	PQclear(res);
	return status;
}

/* What every new connection needs: notices dropped, read-only if asked. */
static enum db_status db_pg_session(struct db *db)
{
	PQsetNoticeProcessor(db->pg, db_pg_notice, NULL);
	if (db->readonly)
		return db_pg_command(db, "SET default_transaction_read_only = on");
	return DB_OK;
}

/* Reads the rest of the active statement's results into its buffer, so that another
 * command can use the connection and the statement still sees every row. */
static void db_pg_settle(struct db *db)
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
static enum db_status db_pg_ready(struct db *db)
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
		if (db_pg_session(db) != DB_OK)
			return DB_LOST;
	}
	db_pg_settle(db);
	return DB_OK;
}

/* ---- both: commands and transactions ---- */

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

/* Runs fixed SQL (several statements allowed) on either store. */
static enum db_status db_run_sql(struct db *db, const char *sql)
{
	enum db_status status;

	if (db->kind == DB_SQLITE)
		return db_lite_exec(db, sql);
	status = db_pg_ready(db);
	return status == DB_OK ? db_pg_command(db, sql) : status;
}

int db_exec(struct db *db, const char *sql, char *err, size_t errlen)
{
	if (db_run_sql(db, sql) != DB_OK) {
		snprintf(err, errlen, "%s", db->err);
		return -1;
	}
	return 0;
}

/* A PostgreSQL value in text form as an integer: booleans as 1 and 0, a numeric or
 * float by its integer part. */
static int64_t db_pg_int(const char *s, Oid type)
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

int db_query_int(struct db *db, const char *sql, int64_t *out)
{
	struct db_stmt *st = NULL;
	PGresult *res = NULL;
	int rc = -1;

	if (db->kind == DB_POSTGRES) {
		/* one round trip: cheap enough to poll */
		if (db_pg_ready(db) != DB_OK)
			goto out;
		res = PQexec(db->pg, sql);
		if (PQresultStatus(res) != PGRES_TUPLES_OK) {
			db_pg_fail(db, res);
			goto out;
		}
		if (PQntuples(res) < 1 || PQnfields(res) < 1) {
			db_set_err(db, "no row");
			goto out;
		}
		*out = PQgetisnull(res, 0, 0) ? 0 : db_pg_int(PQgetvalue(res, 0, 0), PQftype(res, 0));
		rc = 0;
		goto out;
	}
	if (db_prepare(db, sql, &st) < 0)
		goto out;
	if (db_step(st) != DB_ROW)
		goto out;
	*out = db_col_int(st, 0);
	rc = 0;
out:
	PQclear(res);
	db_finalize(st);
	return rc;
}

enum db_status db_begin(struct db *db)
{
	enum db_status status;

	if (db->kind == DB_SQLITE)
		return db_lite_exec(db, "BEGIN IMMEDIATE");
	/* a transaction lost with the connection is over: begin anew on a new one */
	db->tx_lost = 0;
	status = db_pg_ready(db);
	if (status == DB_OK)
		status = db_pg_command(db, "BEGIN");
	db->began = status == DB_OK;
	return status;
}

enum db_status db_commit(struct db *db)
{
	enum db_status status;
	PGresult *res;

	if (db->kind == DB_SQLITE)
		return db_lite_exec(db, "COMMIT");
	status = db_pg_ready(db);
	if (status != DB_OK)
		return status;
	res = PQexec(db->pg, "COMMIT");
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		status = db_pg_fail(db, res);
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

void db_rollback(struct db *db)
{
	if (db->kind == DB_SQLITE) {
		if (!sqlite3_get_autocommit(db->lite))
			sqlite3_exec(db->lite, "ROLLBACK", NULL, NULL, NULL);
		return;
	}
	db->tx_lost = 0;
	if (db->lost) {
		db->began = 0;
		return;
	}
	db_pg_settle(db);
	if (db->began || PQtransactionStatus(db->pg) == PQTRANS_INTRANS ||
	    PQtransactionStatus(db->pg) == PQTRANS_INERROR)
		db_pg_command(db, "ROLLBACK");
	db->began = 0;
}

int db_in_transaction(struct db *db)
{
	PGTransactionStatusType s;

	if (db->kind == DB_SQLITE)
		return !sqlite3_get_autocommit(db->lite);
	if (db->tx_lost)
		return 1;
	if (db->lost)
		return 0;
	s = PQtransactionStatus(db->pg);
	if (s == PQTRANS_ACTIVE)
		return db->began;
	return s == PQTRANS_INTRANS || s == PQTRANS_INERROR;
}

/* ---- PostgreSQL: statements ---- */

static int db_ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || (unsigned char)c >= 0x80;
}

/* Copies sql from *i up to and including the end of the quoted text, comment or
 * dollar-quoted string starting there (returns 1), or copies nothing (returns 0). */
static int db_pg_skip(const char *sql, size_t *i, char *out, size_t *o)
{
	size_t start = *i, j = *i, k;
	const char *close;
	int depth;

	if (sql[j] == '\'') {
		/* E'...' strings escape with backslashes; '' is two adjacent strings */
		int esc = j > 0 && (sql[j - 1] == 'E' || sql[j - 1] == 'e') &&
		          (j < 2 || !db_ident_char(sql[j - 2]));

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
	} else if (sql[j] == '$' && (j == 0 || !db_ident_char(sql[j - 1]))) {
		/* $tag$ ... $tag$ (tag empty or an identifier, not $1) */
		for (k = j + 1; db_ident_char(sql[k]) && !(k == j + 1 && sql[k] >= '0' && sql[k] <= '9');
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
static int db_pg_rewrite(struct db *db, const char *sql, char **out, char ***names, int *count)
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
		if (db_pg_skip(sql, &i, text, &o))
			continue;
		if (sql[i] == ':' && sql[i + 1] == ':') {
			memcpy(text + o, "::", 2);
			o += 2;
			i += 2;
			continue;
		}
		if (sql[i] == '?' || (sql[i] == ':' && db_ident_char(sql[i + 1]))) {
			n = 1;
			while (db_ident_char(sql[i + n]))
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
static enum db_status db_pg_prepare_on_server(struct db_stmt *st)
{
	struct db *db = st->db;
	PGresult *res;
	char dealloc[48];
	int pass, i, again;

	for (pass = 0; pass < 2; pass++) {
		res = PQprepare(db->pg, st->name, st->sql, st->types ? st->nparams : 0, st->types);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			enum db_status status = db_pg_fail(db, res);

			PQclear(res);
			return status;
		}
		PQclear(res);
		PQclear(st->desc);
		st->desc = PQdescribePrepared(db->pg, st->name);
		if (PQresultStatus(st->desc) != PGRES_COMMAND_OK)
			return db_pg_fail(db, st->desc);
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
		if (db_pg_command(db, dealloc) != DB_OK)
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

static int db_pg_prepare(struct db *db, const char *sql, struct db_stmt *st)
{
	size_t n;

	if (db_pg_rewrite(db, sql, &st->sql, &st->pnames, &st->nparams) < 0)
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
	if (db_pg_ready(db) != DB_OK || db_pg_prepare_on_server(st) != DB_OK)
		return -1;
	return 0;
}

/* Forgets the current row's decoded blobs (kept in its result). */
static void db_pg_forget_blobs(struct db_stmt *st)
{
	int i, n = st->desc ? PQnfields(st->desc) : 0;

	for (i = 0; st->blobs && i < n; i++)
		st->blobs[i] = NULL;
}

/* Forgets the current row and its result (which holds the blobs). */
static void db_pg_drop_row(struct db_stmt *st)
{
	PQclear(st->row);
	st->row = NULL;
	st->rowi = 0;
	db_pg_forget_blobs(st);
}

/* Ends st's run: the rest of a streaming result is read off (a long one cancelled when
 * that harms no transaction), a buffered one freed. */
static void db_pg_end_run(struct db_stmt *st)
{
	struct db *db = st->db;
	PGresult *res;
	size_t n = 0;

	db_pg_drop_row(st);
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
			db_pg_mark_lost(db);
	}
	while (st->pos < st->nbuf)
		PQclear(st->buf[st->pos++]);
	st->nbuf = st->pos = 0;
	st->short_buf = 0;
	st->run = DB_RUN_IDLE;
}

/* Sends st with its bindings, rows to come one at a time if it streams. */
static enum db_status db_pg_send(struct db_stmt *st)
{
	struct db *db = st->db;
	enum db_status status = db_pg_ready(db);

	if (status != DB_OK)
		return status;
	if (st->gen != db->gen && (status = db_pg_prepare_on_server(st)) != DB_OK)
		return status;
	st->cancel_ok = PQtransactionStatus(db->pg) == PQTRANS_IDLE;
	if (!PQsendQueryPrepared(db->pg, st->name, st->nparams, st->values, st->lengths,
	                         st->formats, 0))
		return db_pg_fail(db, NULL);
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
static int64_t db_pg_changes(PGresult *res)
{
	const char *tag = PQcmdStatus(res);

	return strncmp(tag, "INSERT", 6) == 0 || strncmp(tag, "UPDATE", 6) == 0 ||
	       strncmp(tag, "DELETE", 6) == 0 || strncmp(tag, "MERGE", 5) == 0
	       ? strtoll(PQcmdTuples(res), NULL, 10) : 0;
}

/* db_step on PostgreSQL. */
static enum db_status db_pg_step(struct db_stmt *st)
{
	struct db *db = st->db;
	enum db_status status;
	PGresult *res;

	if (st->run == DB_RUN_WHOLE) {
		db_pg_forget_blobs(st);
		if (++st->rowi < PQntuples(st->row))
			return DB_ROW;
		st->changes = db_pg_changes(st->row);
		db_pg_drop_row(st);
		st->run = DB_RUN_FINISHED;
		return DB_DONE;
	}
	if (st->run == DB_RUN_FINISHED)
		db_pg_end_run(st);   /* as sqlite3_step: stepping a finished statement runs it again */
	if (st->run == DB_RUN_IDLE && (status = db_pg_send(st)) != DB_OK) {
		st->run = DB_RUN_FINISHED;
		return status;
	}
	db_pg_drop_row(st);
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
		status = db_pg_fail(db, NULL);
		if (!db->err[0])
			db_set_err(db, "the statement ended without a result");
	} else if (PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK) {
		st->changes = db_pg_changes(res);
	} else {
		status = db_pg_fail(db, res);
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
static size_t db_utf8_len(const unsigned char *s, size_t n)
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
static char *db_utf8_fix(const char *s, size_t n, size_t *out)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, o = 0, k;
	char *copy;

	*out = 0;
	while (i < n && (k = db_utf8_len(u + i, n - i)) > 0)
		i += k;
	if (i == n)
		return NULL;
	copy = malloc(3 * n + 1);
	if (!copy)
		return NULL;
	for (i = 0; i < n; i += k) {
		k = db_utf8_len(u + i, n - i);
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
static int db_pg_bind_bytes(struct db_stmt *st, int i, const char *v, size_t n, int blob)
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
		st->copies[i] = v ? db_utf8_fix(v, n, &fixed) : NULL;
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

/* ---- both: statements ---- */

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
	if (db->kind == DB_POSTGRES) {
		if (db_pg_prepare(db, sql, st) < 0)
			goto fail;
		*out = st;
		return 0;
	}
	if (sqlite3_prepare_v2(db->lite, sql, -1, &st->lite, NULL) != SQLITE_OK) {
		db_set_err(db, "%s", sqlite3_errmsg(db->lite));
		goto fail;
	}
	if (!st->lite) {
		db_set_err(db, "no statement in the SQL");
		goto fail;
	}
	*out = st;
	return 0;
fail:
	db_finalize(st);
	return -1;
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
	struct db *db;
	char dealloc[48];
	int i;

	if (!st)
		return;
	db = st->db;
	if (db->kind == DB_SQLITE) {
		sqlite3_finalize(st->lite);
		free(st);
		return;
	}
	db_pg_end_run(st);
	/* the server keeps a prepared statement as long as its connection */
	if (st->desc && st->gen == db->gen && !db->lost) {
		snprintf(dealloc, sizeof(dealloc), "DEALLOCATE %s", st->name);
		db_pg_settle(db);
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
	if (st->db->kind == DB_SQLITE)
		return db_lite_bound(st, sqlite3_bind_int64(st->lite, i, v));
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

int db_bind_text(struct db_stmt *st, int i, const char *s, size_t len)
{
	if (st->db->kind == DB_POSTGRES)
		return db_pg_bind_bytes(st, i, s, len, 0);
	/* A NULL pointer would bind SQL NULL: an empty string is still a string. */
	return db_lite_bound(st, sqlite3_bind_text64(st->lite, i, s ? s : "", len, SQLITE_STATIC,
	                                             SQLITE_UTF8));
}

int db_bind_blob(struct db_stmt *st, int i, const void *p, size_t len)
{
	if (st->db->kind == DB_POSTGRES)
		return db_pg_bind_bytes(st, i, p, len, 1);
	if (!p || len == 0)
		return db_lite_bound(st, sqlite3_bind_zeroblob(st->lite, i, 0));
	return db_lite_bound(st, sqlite3_bind_blob64(st->lite, i, p, len, SQLITE_STATIC));
}

int db_bind_null(struct db_stmt *st, int i)
{
	if (st->db->kind == DB_SQLITE)
		return db_lite_bound(st, sqlite3_bind_null(st->lite, i));
	if (i < 1 || i > st->nparams) {
		db_set_err(st->db, "bind: parameter %d out of range", i);
		return -1;
	}
	free(st->copies[i - 1]);
	st->copies[i - 1] = NULL;
	st->values[i - 1] = NULL;
	return 0;
}

int db_param_count(struct db_stmt *st)
{
	if (st->db->kind == DB_POSTGRES)
		return st->nparams;
	return sqlite3_bind_parameter_count(st->lite);
}

int db_param_index(struct db_stmt *st, const char *name)
{
	int i;

	if (st->db->kind == DB_SQLITE)
		return sqlite3_bind_parameter_index(st->lite, name);
	for (i = 0; i < st->nparams; i++)
		if (st->pnames[i] && strcmp(st->pnames[i], name) == 0)
			return i + 1;
	return 0;
}

enum db_status db_step(struct db_stmt *st)
{
	int rc;

	if (st->db->kind == DB_POSTGRES)
		return db_pg_step(st);
	rc = sqlite3_step(st->lite);
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
	if (st->db->kind == DB_POSTGRES)
		db_pg_end_run(st);
	else
		sqlite3_reset(st->lite);
}

void db_clear_bindings(struct db_stmt *st)
{
	int i;

	if (st->db->kind == DB_SQLITE) {
		sqlite3_clear_bindings(st->lite);
		return;
	}
	for (i = 1; i <= st->nparams; i++)
		db_bind_null(st, i);
}

/* ---- both: columns ---- */

/* 1 if column i of st's current PostgreSQL row exists and is not NULL. */
static int db_pg_has(struct db_stmt *st, int i)
{
	return st->row && i >= 0 && i < PQnfields(st->row) && !PQgetisnull(st->row, st->rowi, i);
}

/* Column i of the current row decoded from BYTEA's text form; NULL if none. */
static const char *db_pg_blob(struct db_stmt *st, int i, size_t *len)
{
	int n = PQnfields(st->desc);

	*len = 0;
	if (!db_pg_has(st, i))
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

int db_col_count(struct db_stmt *st)
{
	if (st->db->kind == DB_POSTGRES)
		return st->desc ? PQnfields(st->desc) : 0;
	return sqlite3_column_count(st->lite);
}

const char *db_col_name(struct db_stmt *st, int i)
{
	if (st->db->kind == DB_POSTGRES)
		return st->desc && i >= 0 && i < PQnfields(st->desc) ? PQfname(st->desc, i) : NULL;
	return sqlite3_column_name(st->lite, i);
}

enum db_type db_col_type(struct db_stmt *st, int i)
{
	if (st->db->kind == DB_POSTGRES) {
		if (!db_pg_has(st, i))
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
	if (st->db->kind == DB_POSTGRES)
		return db_pg_has(st, i)
		       ? db_pg_int(PQgetvalue(st->row, st->rowi, i), PQftype(st->row, i)) : 0;
	return sqlite3_column_int64(st->lite, i);
}

const char *db_col_text(struct db_stmt *st, int i)
{
	size_t len;

	if (st->db->kind == DB_POSTGRES) {
		if (!db_pg_has(st, i))
			return NULL;
		if (PQftype(st->row, i) == DB_OID_BYTEA)
			return db_pg_blob(st, i, &len);
		return PQgetvalue(st->row, st->rowi, i);
	}
	return (const char *)sqlite3_column_text(st->lite, i);
}

const void *db_col_blob(struct db_stmt *st, int i)
{
	size_t len;

	if (st->db->kind == DB_POSTGRES) {
		if (!db_pg_has(st, i))
			return NULL;
		if (PQftype(st->row, i) == DB_OID_BYTEA)
			return db_pg_blob(st, i, &len);
		return PQgetvalue(st->row, st->rowi, i);
	}
	return sqlite3_column_blob(st->lite, i);
}

size_t db_col_bytes(struct db_stmt *st, int i)
{
	size_t len;

	if (st->db->kind == DB_POSTGRES) {
		if (!db_pg_has(st, i))
			return 0;
		if (PQftype(st->row, i) == DB_OID_BYTEA) {
			db_pg_blob(st, i, &len);
			return len;
		}
		return (size_t)PQgetlength(st->row, st->rowi, i);
	}
	return (size_t)sqlite3_column_bytes(st->lite, i);
}

/* ---- both: schema ---- */

int db_schema_version(struct db *db)
{
	int64_t v;

	if (db->kind == DB_POSTGRES) {
		if (db_query_int(db, "SELECT count(*) FROM pg_catalog.pg_tables"
		                     " WHERE schemaname = current_schema() AND tablename = 'meta'",
		                 &v) < 0)
			return -1;
		if (v == 0)
			return 0;
		return db_query_int(db, "SELECT coalesce(max(value), 0) FROM meta"
		                        " WHERE name = 'schema_version'", &v) < 0 ? -1 : (int)v;
	}
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

/* Begins the transaction a schema change runs in, holding every other process's
 * off: SQLite's IMMEDIATE transaction is the database's write lock; on PostgreSQL an
 * advisory lock, released at its end. */
static int db_schema_begin(struct db *db, char *err, size_t errlen)
{
	if (db_begin(db) != DB_OK)
		goto fail;
	if (db->kind == DB_POSTGRES &&
	    db_run_sql(db, "SELECT pg_advisory_xact_lock(" DB_PG_SCHEMA_LOCK ")") != DB_OK)
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
		if (db->kind == DB_POSTGRES)
			snprintf(bump, sizeof(bump), "UPDATE meta SET value = %d"
			         " WHERE name = 'schema_version'", v + 1);
		else
			snprintf(bump, sizeof(bump), "PRAGMA user_version = %d", v + 1);
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
	const char *objects_sql = db->kind == DB_POSTGRES
		? "SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
		  " ON n.oid = c.relnamespace WHERE n.nspname = current_schema()"
		: "SELECT count(*) FROM sqlite_master";
	const char *file = db->kind == DB_POSTGRES ? "sql/pg/schema.sql" : "sql/schema.sql";
	int64_t objects;
	int v;

	if (db_schema_version(db) != 0)
		return 0;
	if (db_schema_begin(db, err, errlen) < 0)
		return -1;
	v = db_schema_version(db);
	if (v != 0)
		return db_schema_commit(db, err, errlen);
	if (db_query_int(db, objects_sql, &objects) < 0) {
		snprintf(err, errlen, "cannot inspect database: %.400s", db->err);
		goto fail;
	}
	if (objects > 0) {
		snprintf(err, errlen, "not a tally database (it has tables but no schema version)");
		goto fail;
	}
	if (db_exec(db, db->kind == DB_POSTGRES ? tally_pg_schema_sql : tally_schema_sql,
	            err, errlen) < 0)
		goto fail;
	v = db_schema_version(db);
	if (v != DB_SCHEMA_VERSION) {
		snprintf(err, errlen, "%s sets version %d but this binary expects %d", file, v,
		         DB_SCHEMA_VERSION);
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
		       db_migrate(db, db->kind == DB_POSTGRES ? tally_pg_migrations_sql
		                                                : tally_migrations_sql,
		                  DB_SCHEMA_VERSION - 1, msg, msglen) < 0 ? -1 : 0;
	return db_version_check(db, db_schema_version(db), DB_SCHEMA_VERSION, 0, msg, msglen);
}

/* ---- opening ---- */

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
	return db_check_schema(db, mode, msg, msglen);
}

/* Connects to the PostgreSQL database at url into db (see db_open); msg says why not.
 * Defaults go before the URL, which may override them: a server that stops
 * answering (a host gone, a partition) fails a call within about half a minute
 * (keepalives, tcp_user_timeout) instead of blocking its thread for good. */
static int db_pg_open(struct db *db, const char *url, enum db_mode mode, char *msg,
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
	if (db_pg_session(db) != DB_OK) {
		snprintf(msg, msglen, "%s", db->err);
		return -1;
	}
	return db_check_schema(db, mode, msg, msglen);
}

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
	} else if (db_is_postgres(store)) {
		db->kind = DB_POSTGRES;
		rc = db_pg_open(db, store, mode, msg, sizeof(msg));
	} else {
		db->kind = DB_SQLITE;
		rc = db_lite_open(db, store, mode, msg, sizeof(msg));
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
	sqlite3_close(db->lite);
	PQfinish(db->pg);
	free(db);
}
