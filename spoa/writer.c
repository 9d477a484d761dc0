/* writer: the usage writer thread. writer_start, writer_stop and writer_load_counters
 * run on the main thread, writer_set_max_db_pages on any; everything else on the
 * writer's own thread, which alone uses its store connection (db.h: SQLite or
 * PostgreSQL, the same code).
 *
 * DESIGN
 * One thread owns all usage writes (as Redis's bio.c gives slow I/O to background
 * threads fed by job queues): the store serialises writers of a node anyway, and a
 * single writer with its statements prepared once needs no locks but the queue's. The
 * intake thread pushes rows into the bounded queue (queue.c) and never waits; the
 * writer pops what is there, up to batch_max rows, and stores them in one transaction
 * (IMMEDIATE on SQLite):
 *
 *   1. rows breaking a CHECK (writer_check) are counted dropped, rows whose request_id
 *      came earlier in the batch duplicates; the rest go in INSERTs of up to
 *      rows_per_statement rows each, ... ON CONFLICT (request_id) DO NOTHING RETURNING
 *      request_id: a row not returned was stored already (a duplicate record). On
 *      SQLite without RETURNING first: a statement that stored all its rows says so by
 *      its count; one that stored fewer has the batch rolled back and made again with
 *      RETURNING (a record stored already is rare: a retried transaction);
 *   2. the inserted rows, sorted by (hour, key, model, provider), become one upsert
 *      row per group into usage_hourly, and the same by day into usage_daily; without
 *      the key, into model_hourly and model_daily; without the model, into
 *      key_hourly and key_daily; by team instead of key (rows with a team), into
 *      team_hourly and team_daily, and by day with the model into team_model_daily;
 *      by key and end user (rows with one), by day into end_user_daily; by tag and
 *      key (a row once per tag), by day into tag_daily, and by tag alone into
 *      tag_total_daily; with neither, by hour into total_hourly (see
 *      writer_rollups); the groups of a table go in multi-row upserts too, each group
 *      once (PostgreSQL refuses one conflict key twice in a statement);
 *   3. the counters (counters_now changed by this batch, counters_apply) overwrite this
 *      node's accounting row, if the store's schema is still this agent's (a newer one
 *      fails the batch: writer_account_fmt);
 *   4. COMMIT; only then does the batch's effect reach the in-memory counters.
 *
 * So rows, rollups and counters always commit together. Batches form by themselves:
 * a light load commits each row at once (WAL with synchronous=NORMAL: no fsync per
 * commit), a heavy one finds rows waiting after each commit and writes them together.
 *
 * Multi-row statements, measured (100 000 rows in batches of 8192, one statement per
 * row against 64 rows per statement, a loaded 2-core machine): PostgreSQL on loopback
 * 6 400-6 700 rows/s against 24 000-27 000, as each statement is a round trip; SQLite
 * about 50 000 against 55 000-65 000 (with RETURNING either way), and 128 rows gain
 * nothing more on either. A row count that is not a multiple goes as powers of two,
 * each size prepared at start (a prepare inside a transaction could fail without saying
 * why: a lock or a lost connection would read as any error). RETURNING cost SQLite
 * ~10-20% of the writer thread's CPU (500 000 rows of bench-writer, alternated runs:
 * 4.5 s against 4.2 s without it, 6.4 against 5.2 in a busier minute; SQLite buffers
 * the returned rows until the statement ends), hence the count there; PostgreSQL keeps
 * RETURNING, as a batch made again would cost it round trips. So counted, the writer
 * on SQLite takes 1.03x the CPU of the single-row writer before db.h (8b8a20e, schema
 * 7) on the same rows without schema 8's index on requests (model, started_at), and
 * makes ~0.8x its rows/s with it: the index is one more B-tree per row, ~1.7 us
 * (docs/performance.md, "Schema 8").
 *
 * A row the store refuses (a constraint the C checks do not cover: it could only come
 * from a bug upstream) fails its whole multi-row statement, and on PostgreSQL the whole
 * transaction. The batch is then rolled back and at once tried again a row at a time,
 * each row in a savepoint: the refused row is counted dropped alone and never fails its
 * batch. On SQLite the CHECKs themselves are skipped (WRITER_CONNECTION_SQL), on
 * PostgreSQL they cannot be, which is why writer_check runs first on both.
 *
 * When a transaction fails (locked by another process, disk or size cap full, I/O
 * error, PostgreSQL's connection lost) it is rolled back, counted in stats.errors and
 * retried with a backoff of 10 ms doubling to 500 ms, for up to retry_ms. Meanwhile the
 * writer pops nothing: the queue fills and the intake spills what it refuses.
 *
 * A store outage costs latency, never rows (spill.h). After retry_ms the batch is given
 * up and its rows go to the spill, a file in the journal directory; so do the rows the
 * full queue refuses. A spilled row's journal entries stay unreleased until it is
 * committed: after a crash the journal replays it (the spill file is emptied at start),
 * and ON CONFLICT (request_id) makes a row stored twice a duplicate, never a second
 * row. While the store fails, each idle tick (and each queue batch) tries it once; once
 * a commit succeeds, the spilled rows go before the queue's, a batch at a time, oldest
 * first: the queue then fills behind them and overflows into the spill, so the rows are
 * stored in about the order they came and the lag only shrinks while the writer is
 * faster than the load. (Alternating with the queue instead would store the newest rows
 * first and keep the file from ever emptying under a steady load.) Only rows beyond
 * --spill-max-mb are counted dropped. At a stop with the store failing, spilled rows
 * stay in the journal for the next run, neither written nor dropped (the next run
 * counts them received again: counters_recover). The counters reach the database with
 * the next commit; when the queue stays empty, an idle tick commits them alone (this
 * also works on a full database, where the accounting row is rewritten in place). Once
 * an hour the thread also prunes stored_responses past the provider's retention.
 *
 * Several nodes (PostgreSQL). Each agent writes its own accounting row, keyed by its
 * node name. Two agents with one name would overwrite each other's totals, so the
 * writer holds a session advisory lock on the name (writer_session): a second writer
 * is refused at start. A reconnect (db.h) ends the session and its lock, and may go
 * unseen (db.c reconnects before a statement when it finds the connection closed), so
 * every transaction takes the lock again first (held already, it is only counted
 * twice): a transaction commits only while this session holds the node, and the
 * writer writes nothing while another agent does. */
#include "writer.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acct.h"
#include "counters.h"
#include "db.h"
#include "latency.h"
#include "log.h"
#include "owner.h"
#include "period.h"
#include "price.h"
#include "rollup.h"
#include "rowcols.h"
#include "satadd.h"
#include "spill.h"
#include "stats.h"
#include "thread.h"

#define WRITER_IDLE_MS       250   /* idle tick: store counters that moved */
#define WRITER_LINGER_MS     10    /* after a partial batch: rows become visible <= ~10 ms later */
#define WRITER_BUSY_MS       100   /* the store's own wait for a lock before failing */
#define WRITER_PRUNE_S       3600  /* stored responses past retention go this often */
#define WRITER_PRUNE_ROWS    10000 /* at most this many at a time: the thread stays quick */
#define WRITER_BACKOFF_MIN   10
#define WRITER_BACKOFF_MAX   500
#define WRITER_SIZES         8     /* statements of 1, 2, 4 .. WRITER_ROWS_MAX rows */
/* The advisory lock class of node names ("taly"); PostgreSQL keys a two-part lock apart
 * from the one-part locks db.c takes while migrating. */
#define WRITER_LOCK_CLASS    "1952541817"

_Static_assert(WRITER_ROWS_MAX == 1 << (WRITER_SIZES - 1), "WRITER_SIZES");
/* SQLite takes 32766 parameters; libpq reads a statement's parameter description (4
 * bytes each) only up to 30000 bytes, and loses the connection's sync beyond. */
_Static_assert(WRITER_ROWS_MAX * (4 + ROLLUP_SUMS) * 4 + 6 < 30000 &&
               WRITER_ROWS_MAX * ROWCOL_COLUMNS * 4 + 6 < 30000, "parameters per statement");

/* What became of row i of a batch (struct writer's state). */
enum writer_fate {
	WRITER_PENDING,    /* sent to the store, not (yet) returned: stored already */
	WRITER_INSERTED,
	WRITER_DUPLICATE,
	WRITER_DROPPED,    /* refused by a constraint */
};

/* How an attempt learns which rows were stored already. */
enum writer_mode {
	WRITER_COUNTED,    /* SQLite: INSERTs without RETURNING, each checked by its count */
	WRITER_RETURNED,   /* ... RETURNING request_id: the rows not returned */
	WRITER_EACH_ROW,   /* one row at a time, each in a savepoint (a row was refused) */
};

/* Sort key of an inserted row for the rollups. */
struct writer_group {
	int64_t period;               /* unix seconds: start of the hour or day */
	int64_t key_id;               /* the key's or the team's id; 0: none, or a rollup
	                               * without either */
	int by_model;                 /* model and provider count: the rollup has them */
	const char *name;             /* the end user or the tag, after the key; NULL: none */
	size_t name_len;
	const struct acct_row *row;
};

/* One group's sums, one row of a rollup upsert. */
struct writer_sum {
	const struct writer_group *g;
	int64_t sum[ROLLUP_SUMS];
};

/* The rollup tables: per key and model (a key with a model filter, or by model or
 * provider); ~200 times smaller, per model only (every figure not by key); per key
 * only (by key without a model filter: a row per key, not per key and model); per team
 * (team summaries and budgets; rows without a team are in none), and per team and model
 * (a team's budgets per model); per key and end user
 * (rows with both); per tag and key (a row with n tags in n groups), and per tag
 * alone (every tag's report and budget: a row per tag and day, not per key too); and
 * the hour's totals (by hour without a filter: a row per hour, not per model). */
enum writer_dim { WRITER_DIM_NONE, WRITER_DIM_KEY, WRITER_DIM_TEAM, WRITER_DIM_END_USER,
                  WRITER_DIM_TAG, WRITER_DIM_TAG_TOTAL };

static const struct writer_rollup_table {
	const char *table, *unit;     /* unit: the period's column */
	enum period_kind period;
	enum writer_dim dim;          /* the id column after the period, if any */
	int by_model;
} writer_rollups[] = {
	{ "usage_hourly", "hour", PERIOD_HOUR, WRITER_DIM_KEY, 1 },
	{ "usage_daily", "day", PERIOD_DAY, WRITER_DIM_KEY, 1 },
	{ "model_hourly", "hour", PERIOD_HOUR, WRITER_DIM_NONE, 1 },
	{ "model_daily", "day", PERIOD_DAY, WRITER_DIM_NONE, 1 },
	{ "key_hourly", "hour", PERIOD_HOUR, WRITER_DIM_KEY, 0 },
	{ "key_daily", "day", PERIOD_DAY, WRITER_DIM_KEY, 0 },
	{ "team_hourly", "hour", PERIOD_HOUR, WRITER_DIM_TEAM, 0 },
	{ "team_daily", "day", PERIOD_DAY, WRITER_DIM_TEAM, 0 },
	{ "team_model_daily", "day", PERIOD_DAY, WRITER_DIM_TEAM, 1 },
	{ "end_user_daily", "day", PERIOD_DAY, WRITER_DIM_END_USER, 0 },
	{ "tag_daily", "day", PERIOD_DAY, WRITER_DIM_TAG, 0 },
	{ "tag_total_daily", "day", PERIOD_DAY, WRITER_DIM_TAG_TOTAL, 0 },
	{ "total_hourly", "hour", PERIOD_HOUR, WRITER_DIM_NONE, 0 },
};

/* The columns of a rollup's dimension, each with its leading comma; "" for none. */
static const char *writer_dim_column(enum writer_dim d)
{
	return d == WRITER_DIM_KEY ? ", key_id" : d == WRITER_DIM_TEAM ? ", team_id"
	     : d == WRITER_DIM_END_USER ? ", key_id, end_user" : d == WRITER_DIM_TAG ? ", key_id, tag"
	     : d == WRITER_DIM_TAG_TOTAL ? ", tag" : "";
}

/* 1 if a rollup of dimension d has an id column (the key's, the team's). */
static int writer_dim_keyed(enum writer_dim d)
{
	return d != WRITER_DIM_NONE && d != WRITER_DIM_TAG_TOTAL;
}

/* 1 if a rollup of dimension d has a name (the end user, the tag). */
static int writer_dim_named(enum writer_dim d)
{
	return d == WRITER_DIM_END_USER || d == WRITER_DIM_TAG || d == WRITER_DIM_TAG_TOTAL;
}

/* 1 if a rollup of dimension d counts a row once per tag. */
static int writer_dim_tagged(enum writer_dim d)
{
	return d == WRITER_DIM_TAG || d == WRITER_DIM_TAG_TOTAL;
}
#define WRITER_ROLLUPS (sizeof(writer_rollups) / sizeof(writer_rollups[0]))

struct writer {
	struct queue *q;
	int batch_max;
	int retry_ms;
	int rows;                     /* rows per INSERT, a power of two */
	void (*on_done)(void *arg, const struct acct_row *rows, size_t n, int committed);
	void *on_done_arg;
	pthread_t thread;
	char node[128];
	/* Writer thread only, after writer_start. */
	struct db *db;
	struct db_stmt *insert_stored, *prune, *account, *lock;
	struct db_stmt *savepoint, *release, *undo;
	struct db_stmt *insert[WRITER_SIZES];                 /* 2^i rows, up to rows */
	struct db_stmt *counted[WRITER_SIZES];                /* SQLite: the same, no RETURNING */
	struct db_stmt *rollup[WRITER_ROLLUPS][WRITER_SIZES]; /* writer_rollups' upserts */
	int64_t pruned_at;            /* unix seconds of the last prune; 0: none yet */
	struct acct_row *batch;       /* batch_max rows */
	unsigned char *fate;          /* batch_max: enum writer_fate of each row */
	char (*fallback)[PRICE_FALLBACK_NAMES_MAX]; /* batch_max: each row's priced_fallback
	                                              * as bound */
	const struct acct_row **sent; /* batch_max: rows sent, sorted by request_id */
	struct writer_group *groups;  /* batch_max entries */
	struct writer_group *tagged;  /* batch_max * TAGS_MAX: a group per row and tag */
	struct writer_sum *sums;      /* batch_max * TAGS_MAX entries */
	struct counters stored;       /* last totals committed */
	int gave_up;                  /* the last batch was given up: the store fails */
	struct spill *spill;          /* rows waiting on disk; NULL: none, given-up rows drop */
	size_t drained;               /* spilled rows stored since the spill was last empty */
	uint64_t drain_start_ns;      /* when the first of them was */
	int short_count;              /* the last attempt's counted INSERT stored fewer rows */
	char errmsg[256];             /* the last failed attempt's message */
	int64_t default_pages;        /* SQLite's max_page_count when no cap is set */
	int64_t applied_pages;        /* cap in force on the connection; 0: none */
	atomic_int_fast64_t want_pages;  /* any thread: cap requested; 0: none */
};

/* The stored response a create made, with the create's row; an id stored already keeps
 * its first key (owner.h). */
static const char writer_stored_sql[] =
	"INSERT INTO stored_responses (response_id, key_id, model, request_id, created_at)"
	" VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (response_id) DO NOTHING";

/* Stored responses past the provider's retention (owner.h) name nothing any more. */
static const char writer_prune_sql[] =
	"DELETE FROM stored_responses WHERE response_id IN (SELECT response_id FROM"
	" stored_responses WHERE created_at < ?1 LIMIT ?2)";

/* The node's counters, only while the store's schema is this agent's (?11): a node of
 * a newer release may migrate a shared store under a running agent, which would then
 * write only the tables it knows, and a rollup the migration added would miss its rows
 * for good. So the batch fails instead (writer_store_counts says why), and its rows
 * wait in the journal and the spill for the upgraded agent. The batch holds the schema
 * from its start (db_schema_hold), so no migration commits between this check and the
 * batch's commit, nor back-fills a table without the batch's rows. %s: the store's
 * db_schema_version_sql. */
static const char writer_account_fmt[] =
	"UPDATE accounting SET received = ?1, written = ?2, dropped = ?3, duplicates = ?4,"
	" timed_out = ?5, unpriced = ?6, updated_at = ?7, unauthenticated = ?8,"
	" pending_overflow = ?9 WHERE node = ?10 AND %s = ?11";

/* A new node starts at zero; an existing row is left as it is. */
static const char writer_node_sql[] =
	"INSERT INTO accounting (node, received, written, dropped, duplicates, timed_out,"
	" unpriced, updated_at, unauthenticated, pending_overflow)"
	" VALUES (?1, 0, 0, 0, 0, 0, 0, ?2, 0, 0) ON CONFLICT (node) DO NOTHING";

/* PostgreSQL: the node's lock for this session (taking it again while held only counts
 * it twice), and a lock wait bounded as SQLite's busy timeout bounds it. */
static const char writer_lock_sql[] =
	"SELECT CAST(pg_try_advisory_lock(" WRITER_LOCK_CLASS ", hashtext(?1)) AS INTEGER),"
	" set_config('lock_timeout', '100ms', false)";

/* ---- binding ---- */

/* Text from a fixed-size field (bounded even without its NUL); "" binds NULL. */
static int writer_bind_text(struct db_stmt *st, int i, const char *s, size_t size)
{
	size_t n = strnlen(s, size);

	return n ? db_bind_text(st, i, s, n) : db_bind_null(st, i);
}

/* A count or duration: negative (ACCT_NONE, or garbage) binds NULL. */
static int writer_bind_count(struct db_stmt *st, int i, int64_t v)
{
	return v >= 0 ? db_bind_int(st, i, v) : db_bind_null(st, i);
}

static int writer_bind_name(struct db_stmt *st, int i, const char *s)
{
	return db_bind_text(st, i, s, strlen(s));
}

/* Text from a fixed-size field, "" as it is (a rollup's key). */
static int writer_bind_key(struct db_stmt *st, int i, const char *s, size_t size)
{
	return db_bind_text(st, i, s, strnlen(s, size));
}

#define BIND_TEXT(st, i, r, field) writer_bind_text(st, i, (r)->field, sizeof((r)->field))

/* An HTTP status: 0 (none) or less binds NULL. */
static int writer_bind_status(struct db_stmt *st, int i, int v)
{
	return v > 0 ? db_bind_int(st, i, v) : db_bind_null(st, i);
}

/* A flag: 0 or 1, anything else (ACCT_NONE: unknown) binds NULL. */
static int writer_bind_flag(struct db_stmt *st, int i, int v)
{
	return v == 0 || v == 1 ? db_bind_int(st, i, v) : db_bind_null(st, i);
}

/* Price classes charged at a fallback rate, by their names written into buf; none
 * binds NULL. */
static int writer_bind_fallback(struct db_stmt *st, int i, unsigned v,
                                char buf[PRICE_FALLBACK_NAMES_MAX])
{
	price_fallback_names(v, buf, PRICE_FALLBACK_NAMES_MAX);
	return writer_bind_text(st, i, buf, PRICE_FALLBACK_NAMES_MAX);
}

/* A column of rowcols.h bound from its field of r, as its kind says. */
#define WRITER_BIND_TEXT(st, i, r, field) BIND_TEXT(st, i, r, field)
#define WRITER_BIND_COUNT(st, i, r, field) writer_bind_count(st, i, (r)->field)
#define WRITER_BIND_TIME(st, i, r, field) db_bind_int(st, i, (r)->field)
#define WRITER_BIND_STATUS(st, i, r, field) writer_bind_status(st, i, (r)->field)
#define WRITER_BIND_FLAG(st, i, r, field) writer_bind_flag(st, i, (r)->field)
#define WRITER_BIND_OUTCOME(st, i, r, field) \
	writer_bind_name(st, i, acct_outcome_name((r)->field))
#define WRITER_BIND_SOURCE(st, i, r, field) \
	writer_bind_name(st, i, acct_usage_source_name((r)->field))
#define WRITER_BIND_FALLBACK(st, i, r, field) writer_bind_fallback(st, i, (r)->field, fallback)
#define WRITER_BIND_COLUMN(column, kind, field) rc |= WRITER_BIND_##kind(st, ++i, r, field);

/* Binds r as the row whose parameters follow p (p + 1 .. p + ROWCOL_COLUMNS), the
 * columns of rowcols.h in order; its priced_fallback's names are written into fallback,
 * which must outlive the step (SQLite binds text without copying it). */
static int writer_bind_row(struct db_stmt *st, int p, const struct acct_row *r,
                           char fallback[PRICE_FALLBACK_NAMES_MAX])
{
	int rc = 0, i = p;

	ROWCOLS(WRITER_BIND_COLUMN)
	return rc ? -1 : 0;
}

/* Runs a prepared statement that returns no row; resets it. Returns DB_DONE on
 * success, else the failure. */
static enum db_status writer_run(struct db_stmt *st)
{
	enum db_status rc = db_step(st);

	if (rc == DB_ROW)
		rc = DB_DONE;   /* a row nobody reads (set_config's) */
	db_reset(st);
	return rc;
}

/* The same value as a term of a sum, where unknown counts as 0. */
static int64_t writer_term(int64_t v)
{
	return v >= 0 ? v : 0;
}

/* ---- statements ---- */

/* Appends to a growing string; *len stays the length. Returns 0, or -1 out of memory
 * (buf is then freed). */
static int writer_append(char **buf, size_t *len, size_t *cap, const char *s)
{
	size_t n = strlen(s);
	char *p;

	if (*len + n + 1 > *cap) {
		*cap = (*len + n + 1) * 2;
		p = realloc(*buf, *cap);
		if (!p) {
			free(*buf);
			*buf = NULL;
			return -1;
		}
		*buf = p;
	}
	memcpy(*buf + *len, s, n + 1);
	*len += n;
	return 0;
}

/* "(?, ?, ..., ?)" of n parameters, preceded by ", " unless first. */
static int writer_append_tuple(char **buf, size_t *len, size_t *cap, int n, int first)
{
	int i, rc = first ? 0 : writer_append(buf, len, cap, ", ");

	for (i = 0; i < n && rc == 0; i++)
		rc = writer_append(buf, len, cap, i ? ", ?" : "(?");
	return rc ? rc : writer_append(buf, len, cap, ")");
}

/* The INSERT of rows requests rows, returning the ids stored if returning, or NULL
 * out of memory (free it). */
static char *writer_insert_sql(int rows, int returning)
{
	size_t len = 0, cap = 0;
	char *sql = NULL;
	int i, rc = writer_append(&sql, &len, &cap, "INSERT INTO requests (");

	for (i = 0; i < ROWCOL_COLUMNS && rc == 0; i++) {
		rc = writer_append(&sql, &len, &cap, rowcols[i].name);
		if (rc == 0)
			rc = writer_append(&sql, &len, &cap, i + 1 < ROWCOL_COLUMNS ? ", " : ")");
	}
	if (rc == 0)
		rc = writer_append(&sql, &len, &cap, " VALUES ");
	for (i = 0; i < rows && rc == 0; i++)
		rc = writer_append_tuple(&sql, &len, &cap, ROWCOL_COLUMNS, i == 0);
	if (rc == 0)
		rc = writer_append(&sql, &len, &cap, " ON CONFLICT (request_id) DO NOTHING");
	if (rc == 0 && returning)
		rc = writer_append(&sql, &len, &cap, " RETURNING request_id");
	return rc ? NULL : sql;
}

/* The upsert adding rows groups' sums to rollup t: for each, the period, then the key
 * or team (tables of that dimension only), model and provider (by_model tables only) and the sums. The
 * existing row is named by its table: an unqualified column would be ambiguous on
 * PostgreSQL. Built from the column list so that the tables and the latency buckets
 * cannot disagree. NULL out of memory (free it). */
static char *writer_rollup_sql(const struct writer_rollup_table *t, int rows)
{
	char col[32], part[160];
	size_t len = 0, cap = 0;
	char *sql = NULL;
	int i, rc, width = 1 + writer_dim_keyed(t->dim) + writer_dim_named(t->dim) +
	                  2 * t->by_model + ROLLUP_SUMS;

	snprintf(part, sizeof(part), "INSERT INTO %s (%s%s%s", t->table, t->unit,
	         writer_dim_column(t->dim), t->by_model ? ", model, provider" : "");
	rc = writer_append(&sql, &len, &cap, part);
	for (i = 0; i < ROLLUP_SUMS && rc == 0; i++) {
		rollup_column(i, col, sizeof(col));
		snprintf(part, sizeof(part), ", %s", col);
		rc = writer_append(&sql, &len, &cap, part);
	}
	if (rc == 0)
		rc = writer_append(&sql, &len, &cap, ") VALUES ");
	for (i = 0; i < rows && rc == 0; i++)
		rc = writer_append_tuple(&sql, &len, &cap, width, i == 0);
	snprintf(part, sizeof(part), " ON CONFLICT (%s%s%s) DO UPDATE SET ", t->unit,
	         writer_dim_column(t->dim), t->by_model ? ", model, provider" : "");
	if (rc == 0)
		rc = writer_append(&sql, &len, &cap, part);
	for (i = 0; i < ROLLUP_SUMS && rc == 0; i++) {
		rollup_column(i, col, sizeof(col));
		snprintf(part, sizeof(part), "%s%s = %s.%s + excluded.%s", i ? ", " : "", col,
		         t->table, col, col);
		rc = writer_append(&sql, &len, &cap, part);
	}
	return rc ? NULL : sql;
}

/* Prepares the statement of 2^size rows into requests (t -1 with RETURNING, t -2
 * without) or rollup table t. 0, or -1 with a message (the SQL is fixed: a schema that
 * does not match). */
static int writer_prepare_rows(struct writer *w, int t, int size, char *err, size_t errlen)
{
	struct db_stmt **slot = t == -2 ? &w->counted[size] : t < 0 ? &w->insert[size]
	                                                           : &w->rollup[t][size];
	char *sql = t < 0 ? writer_insert_sql(1 << size, t == -1)
	                  : writer_rollup_sql(&writer_rollups[t], 1 << size);
	int rc = -1;

	if (!sql)
		snprintf(err, errlen, "out of memory");
	else if (db_prepare(w->db, sql, slot) < 0)
		snprintf(err, errlen, "%s: %s", t < 0 ? "requests" : writer_rollups[t].table,
		         db_errmsg(w->db));
	else
		rc = 0;
	free(sql);
	return rc;
}

/* The largest size (log2) of a statement for n > 0 rows, at most w->rows. */
static int writer_size(const struct writer *w, size_t n)
{
	int size = 0;

	while ((size_t)2 << size <= n && 2 << size <= w->rows)
		size++;
	return size;
}

/* ---- rows ---- */

/* The schema's CHECK constraints on requests, which SQLite's connection skips (see
 * WRITER_CONNECTION_SQL) and PostgreSQL's would apply to a whole statement:
 * writer_bind_row binds stream as 0, 1 or NULL, so only the outcome and usage_source
 * names remain, and the id that must be there. A CHECK added to the schema belongs here
 * too. NULL if r passes, else which failed, worded as SQLite would. */
static const char *writer_check(const struct acct_row *r)
{
	if (!r->request_id[0])
		return "NOT NULL constraint failed: requests.request_id";
	if ((unsigned)r->outcome >= ACCT_OUTCOME_COUNT)
		return "CHECK constraint failed: outcome";
	if ((unsigned)r->usage_source >= ACCT_USAGE_SOURCE_COUNT)
		return "CHECK constraint failed: usage_source";
	return NULL;
}

static void writer_refused(const struct acct_row *r, const char *msg, struct counters *d)
{
	/* The message quotes the constraint, which may span lines: its first says enough. */
	log_error("writer: row %.*s refused (%.*s): counted dropped",
	          ACCT_ID_MAX, r->request_id, (int)strcspn(msg, "\n"), msg);
	stats_add(&stats.errors[STATS_ERR_WRITE_OTHER], 1);
	d->dropped++;
}

static int writer_id_cmp(const void *pa, const void *pb)
{
	const struct acct_row *a = *(const struct acct_row *const *)pa;
	const struct acct_row *b = *(const struct acct_row *const *)pb;
	int c = strncmp(a->request_id, b->request_id, sizeof(a->request_id));

	/* The same id: the earlier arrival first, as it is the one stored. */
	return c ? c : (a > b) - (a < b);
}

/* Marks the row of sent[0..n) whose id is id as inserted (sent is sorted by id). */
static void writer_mark(struct writer *w, const struct acct_row **sent, size_t n,
                        const char *id)
{
	size_t lo = 0, hi = n, mid;
	int c;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		c = strncmp(sent[mid]->request_id, id, sizeof(sent[mid]->request_id));
		if (c == 0) {
			w->fate[sent[mid] - w->batch] = WRITER_INSERTED;
			return;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
}

/* Inserts sent[0..n) with one statement of n rows (n a power of two). Counted: all
 * are marked inserted if the store took n rows, else w->short_count is set. */
static enum db_status writer_insert_chunk(struct writer *w, const struct acct_row **sent,
                                          size_t n, int size, int counted)
{
	struct db_stmt *st = counted ? w->counted[size] : w->insert[size];
	enum db_status rc;
	size_t i;

	for (i = 0; i < n; i++)
		if (writer_bind_row(st, (int)i * ROWCOL_COLUMNS, sent[i],
		                    w->fallback[sent[i] - w->batch]) < 0)
			return DB_ERROR;
	while ((rc = db_step(st)) == DB_ROW) {
		const char *id = db_col_text(st, 0);

		if (id)
			writer_mark(w, sent, n, id);
	}
	if (counted && rc == DB_DONE) {
		if (db_changes(st) == (int64_t)n)
			for (i = 0; i < n; i++)
				w->fate[sent[i] - w->batch] = WRITER_INSERTED;
		else
			w->short_count = 1;
	}
	db_reset(st);
	return rc;
}

/* Step 1 for rows[0..n): each row's fate, and d. DB_DONE, or the failure (DB_CONSTRAINT:
 * some row was refused, try again a row at a time). Counted, a statement that stored
 * fewer rows than it had sets w->short_count: which ones is unknown, try again
 * returned. */
static enum db_status writer_insert_rows(struct writer *w, size_t n, int counted,
                                         struct counters *d)
{
	const char *refused;
	size_t i, m = 0, k, done;
	enum db_status rc;
	int size;

	for (i = 0; i < n; i++) {
		w->fate[i] = WRITER_PENDING;
		if ((refused = writer_check(&w->batch[i])) != NULL) {
			writer_refused(&w->batch[i], refused, d);
			w->fate[i] = WRITER_DROPPED;
		} else {
			w->sent[m++] = &w->batch[i];
		}
	}
	qsort(w->sent, m, sizeof(*w->sent), writer_id_cmp);
	for (i = 0, k = 0; i < m; i++) {
		if (k && strncmp(w->sent[k - 1]->request_id, w->sent[i]->request_id,
		                 sizeof(w->sent[i]->request_id)) == 0)
			w->fate[w->sent[i] - w->batch] = WRITER_DUPLICATE;
		else
			w->sent[k++] = w->sent[i];
	}
	for (done = 0; done < k; done += (size_t)1 << size) {
		size = writer_size(w, k - done);
		rc = writer_insert_chunk(w, w->sent + done, (size_t)1 << size, size, counted);
		if (rc != DB_DONE || w->short_count)
			return rc;
	}
	return DB_DONE;
}

/* Step 1 a row at a time, each in a savepoint, for a batch some row of which the store
 * refused. DB_DONE, or the failure that fails the transaction. */
static enum db_status writer_insert_each(struct writer *w, size_t n, struct counters *d)
{
	struct db_stmt *st = w->insert[0];
	const struct acct_row *r;
	const char *refused;
	enum db_status rc;
	size_t i;

	for (i = 0; i < n; i++) {
		r = &w->batch[i];
		w->fate[i] = WRITER_DUPLICATE;
		if ((refused = writer_check(r)) != NULL) {
			writer_refused(r, refused, d);
			w->fate[i] = WRITER_DROPPED;
			continue;
		}
		if ((rc = writer_run(w->savepoint)) != DB_DONE)
			return rc;
		if (writer_bind_row(st, 0, r, w->fallback[i]) < 0)
			return DB_ERROR;
		while ((rc = db_step(st)) == DB_ROW)
			w->fate[i] = WRITER_INSERTED;
		db_reset(st);
		if (rc == DB_CONSTRAINT) {
			writer_refused(r, db_errmsg(w->db), d);
			w->fate[i] = WRITER_DROPPED;
			if ((rc = writer_run(w->undo)) != DB_DONE)
				return rc;
		} else if (rc != DB_DONE) {
			return rc;
		}
		if ((rc = writer_run(w->release)) != DB_DONE)
			return rc;
	}
	return DB_DONE;
}

/* Notes the stored response row r's create made. DB_DONE, or the failure. */
static enum db_status writer_stored(struct writer *w, const struct acct_row *r)
{
	struct db_stmt *st = w->insert_stored;
	int rc = BIND_TEXT(st, 1, r, response_id);

	rc |= db_bind_int(st, 2, r->key_id);
	rc |= writer_bind_key(st, 3, r->model_requested, sizeof(r->model_requested));
	rc |= BIND_TEXT(st, 4, r, request_id);
	rc |= db_bind_int(st, 5, r->started_at_ms / 1000);
	return rc ? DB_ERROR : writer_run(st);
}

/* Stored responses of the inserted rows, in arrival order (the first claim of an id
 * keeps it). A refused one costs its key that response's later reads, never the row:
 * on SQLite the failed statement alone is undone; on PostgreSQL it fails the
 * transaction, unless each_row (then it is in a savepoint). */
static enum db_status writer_stored_rows(struct writer *w, size_t n, int each_row)
{
	const struct acct_row *r;
	enum db_status rc;
	size_t i;

	for (i = 0; i < n; i++) {
		r = &w->batch[i];
		if (w->fate[i] != WRITER_INSERTED || !r->response_id[0] || r->key_id < 0)
			continue;
		if (each_row && (rc = writer_run(w->savepoint)) != DB_DONE)
			return rc;
		rc = writer_stored(w, r);
		if (rc == DB_CONSTRAINT && (each_row || db_kind(w->db) == DB_SQLITE)) {
			log_error("writer: stored response of row %.*s refused (%s)", ACCT_ID_MAX,
			          r->request_id, db_errmsg(w->db));
			if (each_row && (rc = writer_run(w->undo)) != DB_DONE)
				return rc;
			rc = DB_DONE;
		}
		if (rc != DB_DONE)
			return rc;
		if (each_row && (rc = writer_run(w->release)) != DB_DONE)
			return rc;
	}
	return DB_DONE;
}

/* ---- rollups ---- */

static int writer_group_cmp(const void *pa, const void *pb)
{
	const struct writer_group *a = pa, *b = pb;
	int c;

	if (a->period != b->period)
		return a->period < b->period ? -1 : 1;
	if (a->key_id != b->key_id)
		return a->key_id < b->key_id ? -1 : 1;
	if (a->name) {
		c = memcmp(a->name, b->name, a->name_len < b->name_len ? a->name_len : b->name_len);
		return c ? c : a->name_len < b->name_len ? -1 : a->name_len > b->name_len;
	}
	if (!a->by_model)
		return 0;
	c = strncmp(a->row->model, b->row->model, sizeof(a->row->model));
	return c ? c : strncmp(a->row->provider, b->row->provider, sizeof(a->row->provider));
}

/* Adds row r to the sums (rollup.h's columns). */
static void writer_sum_add(int64_t sum[ROLLUP_SUMS], const struct acct_row *r)
{
	sum[ROLLUP_REQUESTS]++;
	sum[ROLLUP_ERRORS] += r->outcome != ACCT_COMPLETE;
	sum[ROLLUP_STREAMS] += r->stream == 1;
	sum[ROLLUP_PROMPT_TOKENS] = satadd(sum[ROLLUP_PROMPT_TOKENS], writer_term(r->prompt_tokens));
	sum[ROLLUP_COMPLETION_TOKENS] = satadd(sum[ROLLUP_COMPLETION_TOKENS],
	                                       writer_term(r->completion_tokens));
	sum[ROLLUP_CACHED_TOKENS] = satadd(sum[ROLLUP_CACHED_TOKENS], writer_term(r->cached_tokens));
	sum[ROLLUP_CACHE_CREATION_TOKENS] = satadd(sum[ROLLUP_CACHE_CREATION_TOKENS],
	                                           writer_term(r->cache_creation_tokens));
	sum[ROLLUP_REASONING_TOKENS] = satadd(sum[ROLLUP_REASONING_TOKENS],
	                                      writer_term(r->reasoning_tokens));
	sum[ROLLUP_COST] = satadd(sum[ROLLUP_COST], writer_term(r->cost_micros));
	sum[ROLLUP_UNPRICED] += r->unpriced != 0;
	sum[ROLLUP_DURATION] = satadd(sum[ROLLUP_DURATION], writer_term(r->duration_ms));
	sum[ROLLUP_ESTIMATED] += r->estimated_tokens >= 0;
	sum[ROLLUP_ESTIMATED_TOKENS] = satadd(sum[ROLLUP_ESTIMATED_TOKENS],
	                                      writer_term(r->estimated_tokens));
	sum[ROLLUP_AUDIO_INPUT_TOKENS] = satadd(sum[ROLLUP_AUDIO_INPUT_TOKENS],
	                                        writer_term(r->audio_input_tokens));
	sum[ROLLUP_AUDIO_OUTPUT_TOKENS] = satadd(sum[ROLLUP_AUDIO_OUTPUT_TOKENS],
	                                         writer_term(r->audio_output_tokens));
	sum[ROLLUP_WEB_SEARCH_CALLS] = satadd(sum[ROLLUP_WEB_SEARCH_CALLS],
	                                      writer_term(r->web_search_calls));
	sum[ROLLUP_ESTIMATED_COST] = satadd(sum[ROLLUP_ESTIMATED_COST],
	                                    writer_term(r->estimated_cost_micros));
	if (r->duration_ms >= 0)
		sum[ROLLUP_NAMED + latency_bucket(r->duration_ms)]++;
}

/* Binds groups sums[0..n) into a statement of n rows of table t. */
static int writer_bind_sums(struct db_stmt *st, const struct writer_rollup_table *t,
                            const struct writer_sum *sums, size_t n)
{
	int rc = 0, p = 1, k;
	size_t i;

	for (i = 0; i < n; i++) {
		const struct writer_group *g = sums[i].g;

		rc |= db_bind_int(st, p++, g->period);
		if (writer_dim_keyed(t->dim))
			rc |= db_bind_int(st, p++, g->key_id);
		if (writer_dim_named(t->dim))
			rc |= db_bind_text(st, p++, g->name, g->name_len);
		if (t->by_model) {
			rc |= writer_bind_key(st, p++, g->row->model, sizeof(g->row->model));
			rc |= writer_bind_key(st, p++, g->row->provider, sizeof(g->row->provider));
		}
		for (k = 0; k < ROLLUP_SUMS; k++)
			rc |= db_bind_int(st, p++, sums[i].sum[k]);
	}
	return rc ? -1 : 0;
}

/* A row's id in a rollup of dimension d: its key's (0: none, as the keyed tables
 * count requests without a known key), its team's (0: none), its key's when it names
 * an end user or carries tags (0: either is missing), or 0. Across keys (tag totals)
 * 1 stands for every key, so that a tag's total counts the rows tag_daily does. */
static int64_t writer_group_id(enum writer_dim d, const struct acct_row *r)
{
	int64_t id = d == WRITER_DIM_KEY ? r->key_id : d == WRITER_DIM_TEAM ? r->team_id
	           : d == WRITER_DIM_END_USER && r->end_user[0] ? r->key_id
	           : writer_dim_tagged(d) && r->tags[0] ? r->key_id : 0;

	return id <= 0 ? 0 : d == WRITER_DIM_TAG_TOTAL ? 1 : id;
}

/* The groups of rollup t over the n inserted rows (w->groups[i].row): one per row, or
 * for tags one per row and tag (into w->tagged). Returns the array and its count. */
static struct writer_group *writer_groups_of(struct writer *w, size_t n,
                                             const struct writer_rollup_table *rt, size_t *count)
{
	size_t j;

	*count = n;
	for (j = 0; j < n; j++) {
		struct writer_group *g = &w->groups[j];

		g->period = period_start_ms(rt->period, g->row->started_at_ms) / 1000;
		g->key_id = writer_group_id(rt->dim, g->row);
		g->by_model = rt->by_model;
		g->name = rt->dim == WRITER_DIM_END_USER ? g->row->end_user : NULL;
		g->name_len = g->name ? strnlen(g->name, sizeof(g->row->end_user)) : 0;
	}
	if (!writer_dim_tagged(rt->dim))
		return w->groups;
	*count = 0;
	for (j = 0; j < n; j++) {
		const char *p = w->groups[j].row->tags, *end = p + strnlen(p, TAGS_TEXT_MAX);

		while (w->groups[j].key_id && p < end && *count < (size_t)w->batch_max * TAGS_MAX) {
			const char *comma = memchr(p, ',', (size_t)(end - p));
			struct writer_group *g = &w->tagged[(*count)++];

			*g = w->groups[j];
			g->name = p;
			g->name_len = (size_t)((comma ? comma : end) - p);
			p = comma ? comma + 1 : end;
		}
	}
	return w->tagged;
}

/* The n inserted rows (w->groups[i].row) summed by (period, key or team, end user or
 * tag, model, provider) of rollup t, each left out for a table without it (a team table
 * leaves out the rows without a team, the end users' and tags' the rows without a key
 * and end user or tags), and added in upserts of up to w->rows groups. */
static enum db_status writer_rollup(struct writer *w, size_t n, size_t t)
{
	const struct writer_rollup_table *rt = &writer_rollups[t];
	struct writer_group *groups;
	struct db_stmt *st;
	size_t i = 0, j, ngroups = 0, done;
	enum db_status rc;
	int size;

	groups = writer_groups_of(w, n, rt, &n);
	qsort(groups, n, sizeof(*groups), writer_group_cmp);
	while (i < n) {
		struct writer_sum *s;

		if ((rt->dim == WRITER_DIM_TEAM || writer_dim_named(rt->dim)) && groups[i].key_id == 0) {
			i++;
			continue;
		}
		s = &w->sums[ngroups++];
		s->g = &groups[i];
		memset(s->sum, 0, sizeof(s->sum));
		for (j = i; j < n && writer_group_cmp(s->g, &groups[j]) == 0; j++)
			writer_sum_add(s->sum, groups[j].row);
		i = j;
	}
	for (done = 0; done < ngroups; done += (size_t)1 << size) {
		size = writer_size(w, ngroups - done);
		st = w->rollup[t][size];
		if (writer_bind_sums(st, rt, w->sums + done, (size_t)1 << size) < 0)
			return DB_ERROR;
		if ((rc = writer_run(st)) != DB_DONE)
			return rc;
	}
	return DB_DONE;
}

/* ---- counters ---- */

static enum db_status writer_store_counts(struct writer *w, const struct counters *c)
{
	struct db_stmt *st = w->account;
	enum db_status rc;
	int bad;

	bad = db_bind_int(st, 1, (int64_t)c->received);
	bad |= db_bind_int(st, 2, (int64_t)c->written);
	bad |= db_bind_int(st, 3, (int64_t)c->dropped);
	bad |= db_bind_int(st, 4, (int64_t)c->duplicates);
	bad |= db_bind_int(st, 5, (int64_t)c->timed_out);
	bad |= db_bind_int(st, 6, (int64_t)c->unpriced);
	bad |= db_bind_int(st, 7, db_now());
	bad |= db_bind_int(st, 8, (int64_t)c->unauthenticated);
	bad |= db_bind_int(st, 9, (int64_t)c->pending_overflow);
	bad |= writer_bind_name(st, 10, w->node);
	bad |= db_bind_int(st, 11, DB_SCHEMA_VERSION);
	if (bad)
		return DB_ERROR;
	rc = db_step(st);
	if (rc == DB_DONE && db_changes(st) != 1) {
		int version = db_schema_version(w->db);

		if (version != DB_SCHEMA_VERSION)
			snprintf(w->errmsg, sizeof(w->errmsg), "the store is at schema %d, this agent "
			         "writes schema %d (another node or tallyctl migrated it): nothing is "
			         "stored until this agent is upgraded; its rows wait in the journal",
			         version, DB_SCHEMA_VERSION);
		else
			snprintf(w->errmsg, sizeof(w->errmsg), "the accounting row of node %s is "
			         "missing", w->node);
		rc = DB_ERROR;
	}
	db_reset(st);
	return rc;
}

/* ---- transactions ---- */

static void writer_apply_cap(struct writer *w)
{
	int64_t want = atomic_load(&w->want_pages);
	char sql[64], err[128];

	if (want == w->applied_pages || db_kind(w->db) != DB_SQLITE)
		return;
	snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %" PRId64,
	         want > 0 ? want : w->default_pages);
	if (db_exec(w->db, sql, err, sizeof(err)) == 0)
		w->applied_pages = want;
}

/* PostgreSQL: takes the node's advisory lock for this session (see DESIGN). DB_DONE,
 * DB_BUSY if another agent holds it, or the failure. SQLite: nothing to do. */
static enum db_status writer_session(struct writer *w)
{
	enum db_status rc;
	int64_t held = 0;

	if (db_kind(w->db) != DB_POSTGRES)
		return DB_DONE;
	if (writer_bind_name(w->lock, 1, w->node) < 0)
		return DB_ERROR;
	rc = db_step(w->lock);
	if (rc == DB_ROW) {
		held = db_col_int(w->lock, 0);
		rc = DB_DONE;
	}
	db_reset(w->lock);
	if (rc == DB_DONE && held != 1) {
		snprintf(w->errmsg, sizeof(w->errmsg), "node %s is in use by another agent (its"
		         " advisory lock is held): give each agent its own --node", w->node);
		rc = DB_BUSY;
	}
	return rc;
}

/* One attempt at storing w->batch[0..n) (none: the counters alone) in one transaction,
 * in the given mode. Returns DB_OK, with the counters applied, or the failure after a
 * rollback (its message in w->errmsg; w->short_count: a counted attempt fell short). */
static enum db_status writer_attempt(struct writer *w, size_t n, enum writer_mode mode)
{
	struct counters d = { 0 }, c;
	uint64_t start;
	size_t i, ngroups = 0;
	enum db_status rc;

	w->errmsg[0] = '\0';
	w->short_count = 0;
	writer_apply_cap(w);
	start = stats_now_ns();
	rc = db_begin(w->db);
	if (rc != DB_OK || (rc = db_schema_hold(w->db)) != DB_OK)
		goto fail;
	if ((rc = writer_session(w)) != DB_DONE)
		goto fail;
	rc = mode == WRITER_EACH_ROW ? writer_insert_each(w, n, &d)
	                             : writer_insert_rows(w, n, mode == WRITER_COUNTED, &d);
	if (rc == DB_DONE && w->short_count) {
		snprintf(w->errmsg, sizeof(w->errmsg), "some rows were stored already");
		rc = DB_ERROR;
	}
	if (rc == DB_DONE)
		rc = writer_stored_rows(w, n, mode == WRITER_EACH_ROW);
	if (rc != DB_DONE)
		goto fail;
	for (i = 0; i < n; i++) {
		const struct acct_row *r = &w->batch[i];

		if (w->fate[i] == WRITER_PENDING || w->fate[i] == WRITER_DUPLICATE) {
			d.duplicates++;
		} else if (w->fate[i] == WRITER_INSERTED) {
			w->groups[ngroups++] = (struct writer_group){ .row = r };
			d.written++;
			d.timed_out += r->outcome == ACCT_NO_RECORD;
			d.unpriced += r->unpriced != 0;
		}
	}
	for (i = 0; i < WRITER_ROLLUPS; i++) {
		rc = writer_rollup(w, ngroups, i);
		if (rc != DB_DONE)
			goto fail;
	}
	c = counters_now();
	counters_apply(&c, &d);
	rc = writer_store_counts(w, &c);
	if (rc != DB_DONE)
		goto fail;
	rc = db_commit(w->db);
	if (rc != DB_OK)
		goto fail;
	counters_settle(&d);
	w->stored = c;
	stats_add(&stats.batches, 1);
	stats_hist_observe(&stats.batch_latency, stats_now_ns() - start);
	atomic_store_explicit(&stats.writer_committed_ms, (int64_t)time(NULL) * 1000,
	                      memory_order_relaxed);
	return DB_OK;
fail:
	if (!w->errmsg[0])
		snprintf(w->errmsg, sizeof(w->errmsg), "%s", db_errmsg(w->db));
	db_rollback(w->db);
	return rc == DB_OK || rc == DB_DONE || rc == DB_ROW ? DB_ERROR : rc;
}

static enum stats_error writer_error_kind(enum db_status rc)
{
	switch (rc) {
	case DB_BUSY:
		return STATS_ERR_WRITE_BUSY;
	case DB_FULL:
		return STATS_ERR_WRITE_FULL;
	case DB_LOST:
		return STATS_ERR_WRITE_LOST;
	default:
		return STATS_ERR_WRITE_OTHER;
	}
}

static void writer_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Stores the first n rows of w->batch (none: the counters alone, if they moved since
 * the last commit), trying for up to budget_ms. Returns 0, or -1 when it gave up. */
static int writer_commit(struct writer *w, size_t n, int budget_ms)
{
	uint64_t start = stats_now_ns();
	int backoff = WRITER_BACKOFF_MIN, failures = 0;
	/* RETURNING costs SQLite 10-20% of the writer (DESIGN); PostgreSQL saves a
	 * statement's round trip with it. */
	enum writer_mode mode = db_kind(w->db) == DB_SQLITE ? WRITER_COUNTED : WRITER_RETURNED;
	enum db_status rc;
	struct counters c;
	int64_t left;

	if (n == 0) {
		c = counters_now();
		if (memcmp(&c, &w->stored, sizeof(c)) == 0)
			return 0;
	}
	while ((rc = writer_attempt(w, n, mode)) != DB_OK) {
		if (rc == DB_CONSTRAINT && mode != WRITER_EACH_ROW && n) {
			mode = WRITER_EACH_ROW;   /* some row was refused: find it, keep the rest */
			continue;
		}
		if (w->short_count) {
			mode = WRITER_RETURNED;   /* some row was stored already: find which */
			continue;
		}
		stats_add(&stats.errors[writer_error_kind(rc)], 1);
		left = budget_ms - (int64_t)((stats_now_ns() - start) / 1000000u);
		if (failures++ == 0 && left > 0)
			log_warn("writer: storing %zu rows failed (%s), retrying for up to %d ms",
			         n, w->errmsg, budget_ms);
		if (left <= 0) {
			if (n && budget_ms)
				log_warn("writer: gave up storing %zu rows after %d attempts (%s)", n,
				         failures, w->errmsg);
			return -1;
		}
		writer_sleep_ms(backoff < left ? backoff : (int)left);
		backoff = backoff * 2 < WRITER_BACKOFF_MAX ? backoff * 2 : WRITER_BACKOFF_MAX;
	}
	if (failures)
		log_info("writer: stored %zu rows after %d failed attempts", n, failures);
	return 0;
}

/* At most every WRITER_PRUNE_S (checked after each batch and idle tick): stored
 * responses older than the provider keeps them go, a bounded number at a time (the
 * next pass takes more). A failure waits for the next prune: nothing depends on it. */
static void writer_prune(struct writer *w)
{
	int64_t now = (int64_t)time(NULL);
	enum db_status rc;

	if (w->pruned_at && now - w->pruned_at < WRITER_PRUNE_S)
		return;
	db_bind_int(w->prune, 1, now - OWNER_RETENTION_S);
	db_bind_int(w->prune, 2, WRITER_PRUNE_ROWS);
	rc = db_step(w->prune);
	if (rc == DB_DONE && db_changes(w->prune) == WRITER_PRUNE_ROWS) {
		db_reset(w->prune);
		return;   /* more to go: the next idle tick goes on */
	}
	db_reset(w->prune);
	w->pruned_at = now;
}

/* After a batch was given up: its rows go to the spill, in order, until it is full
 * (or there is none). Returns how many went. */
static size_t writer_spill(struct writer *w, size_t n)
{
	size_t i = 0;

	if (w->spill)
		while (i < n && spill_push(w->spill, &w->batch[i]) == 0)
			i++;
	if (i)
		log_warn("writer: %zu rows wait on disk for the store (%zu spilled in all)", i,
		         spill_rows(w->spill));
	return i;
}

/* Stores the batch of n rows; if the store keeps failing, spills them, and counts
 * dropped only those the spill has no room for. Once stopping (closed) and the
 * database has already made the writer give a batch up, one attempt per batch: the
 * stop must end. A spilled row's journal entries stay unreleased: on_done is not
 * called for it. */
static void writer_batch(struct writer *w, size_t n, int closed)
{
	int committed = writer_commit(w, n, closed && w->gave_up ? 0 : w->retry_ms) == 0;
	size_t kept = 0;

	w->gave_up = !committed;
	if (!committed) {
		kept = writer_spill(w, n);
		if (kept < n) {
			log_error("writer: gave up %zu rows (%s): counted dropped", n - kept,
			          w->errmsg);
			counters_drop(n - kept);
			/* The counters alone may still fit (their row is rewritten in place). */
			writer_commit(w, 0, 0);
		}
	}
	if (w->on_done && kept < n)
		w->on_done(w->on_done_arg, w->batch + kept, n - kept, committed);
}

/* Stores the oldest spilled rows, a batch of them, trying for budget_ms (0: once, a
 * probe of a store that failed). Committed, they leave the spill and their journal
 * entries are released. 0, or -1 when the store still fails (the rows stay). */
static int writer_drain(struct writer *w, int budget_ms)
{
	size_t n = spill_read(w->spill, w->batch, (size_t)w->batch_max);

	if (n == 0)
		return 0;
	if (writer_commit(w, n, budget_ms) < 0) {
		w->gave_up = 1;
		return -1;
	}
	w->gave_up = 0;
	spill_advance(w->spill);
	if (w->drained == 0)
		w->drain_start_ns = stats_now_ns();
	w->drained += n;
	if (w->on_done)
		w->on_done(w->on_done_arg, w->batch, n, 1);
	if (spill_rows(w->spill) == 0) {
		double s = (double)(stats_now_ns() - w->drain_start_ns) / 1e9;

		log_info("writer: the spill is drained: %zu rows stored in %.1f s (%.0f rows/s)",
		         w->drained, s, s > 0 ? (double)w->drained / s : 0.);
		w->drained = 0;
	}
	return 0;
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	size_t n, waiting;
	int closed;

	for (;;) {
		/* Read before popping: once closed, an empty pop means nothing is left. */
		closed = queue_closed(w->q);
		waiting = w->spill ? spill_rows(w->spill) : 0;
		/* The store works: the spilled rows go first, oldest first, while the queue
		 * fills behind them (and overflows into the spill): the lag only shrinks. */
		if (waiting && !w->gave_up) {
			writer_drain(w, w->retry_ms);
			writer_prune(w);
			continue;
		}
		n = queue_pop(w->q, w->batch, (size_t)w->batch_max, WRITER_IDLE_MS);
		if (n > 0) {
			writer_batch(w, n, closed);
			/* A partial batch means a light load: let rows gather for a moment rather
			 * than commit a handful at a time (each commit costs a few page writes). */
			if (n < (size_t)w->batch_max && !closed)
				nanosleep(&(struct timespec){ 0, WRITER_LINGER_MS * 1000000L }, NULL);
		} else if (waiting) {
			/* Rows are spilled and the store failed: one attempt each idle tick. At a
			 * stop with the store still failing, they stay in the journal for the next
			 * run (neither written nor dropped: received then exceeds their sum). */
			if (writer_drain(w, 0) < 0 && closed)
				break;
		} else if (closed) {
			break;
		} else {
			writer_commit(w, 0, 0);   /* idle tick: the next one tries again */
		}
		writer_prune(w);
	}
	/* Drops counted since the last commit (the intake stopped before writer_stop). */
	writer_commit(w, 0, w->gave_up ? 0 : w->retry_ms);
	return NULL;
}

/* ---- start and stop ---- */

static void writer_free(struct writer *w)
{
	size_t i, k;

	db_finalize(w->insert_stored);
	db_finalize(w->prune);
	db_finalize(w->account);
	db_finalize(w->lock);
	db_finalize(w->savepoint);
	db_finalize(w->release);
	db_finalize(w->undo);
	for (k = 0; k < WRITER_SIZES; k++) {
		db_finalize(w->insert[k]);
		db_finalize(w->counted[k]);
		for (i = 0; i < WRITER_ROLLUPS; i++)
			db_finalize(w->rollup[i][k]);
	}
	db_close(w->db);
	free(w->batch);
	free(w->fate);
	free(w->fallback);
	free(w->sent);
	free(w->groups);
	free(w->sums);
	free(w->tagged);
	free(w);
}

/* The node's accounting row, created with zeros if new. 0, or -1 with a message. */
static int writer_node_row(struct db *db, const char *node, char *err, size_t errlen)
{
	struct db_stmt *st = NULL;
	enum db_status rc = DB_ERROR;

	if (db_prepare(db, writer_node_sql, &st) == 0 &&
	    writer_bind_name(st, 1, node) == 0 && db_bind_int(st, 2, db_now()) == 0)
		rc = db_step(st);
	if (rc != DB_DONE)
		snprintf(err, errlen, "cannot create the accounting row of node %s: %s", node,
		         db_errmsg(db));
	db_finalize(st);
	return rc == DB_DONE ? 0 : -1;
}

/* Connection settings, the node's lock and row, and statements. 0, or -1 with a
 * message. */
static int writer_prepare(struct writer *w, char *err, size_t errlen)
{
	char account[sizeof(writer_account_fmt) + 128];
	const struct {
		struct db_stmt **st;
		const char *sql;
	} stmts[] = {
		{ &w->insert_stored, writer_stored_sql },
		{ &w->prune, writer_prune_sql },
		{ &w->account, account },
		{ &w->savepoint, "SAVEPOINT writer_row" },
		{ &w->release, "RELEASE SAVEPOINT writer_row" },
		{ &w->undo, "ROLLBACK TO SAVEPOINT writer_row" },
	};
	char sql[64];
	size_t i;
	int size, t;

	snprintf(account, sizeof(account), writer_account_fmt, db_schema_version_sql(w->db));
	if (db_kind(w->db) == DB_SQLITE) {
		snprintf(sql, sizeof(sql), "PRAGMA busy_timeout = %d", WRITER_BUSY_MS);
		if (db_exec(w->db, sql, err, errlen) < 0 ||
		    db_exec(w->db, WRITER_CONNECTION_SQL, err, errlen) < 0)
			return -1;
		if (db_query_int(w->db, "PRAGMA max_page_count", &w->default_pages) < 0) {
			snprintf(err, errlen, "%s", db_errmsg(w->db));
			return -1;
		}
	} else {
		if (db_prepare(w->db, writer_lock_sql, &w->lock) < 0) {
			snprintf(err, errlen, "%s", db_errmsg(w->db));
			return -1;
		}
		if (writer_session(w) != DB_DONE) {
			snprintf(err, errlen, "%s", w->errmsg);
			return -1;
		}
	}
	if (writer_node_row(w->db, w->node, err, errlen) < 0)
		return -1;
	for (i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
		if (db_prepare(w->db, stmts[i].sql, stmts[i].st) < 0) {
			snprintf(err, errlen, "%s", db_errmsg(w->db));
			return -1;
		}
	}
	for (size = 0; size <= writer_size(w, WRITER_ROWS_MAX); size++)
		for (t = db_kind(w->db) == DB_SQLITE ? -2 : -1; t < (int)WRITER_ROLLUPS; t++)
			if (writer_prepare_rows(w, t, size, err, errlen) < 0)
				return -1;
	writer_apply_cap(w);
	if (db_kind(w->db) == DB_SQLITE && w->applied_pages != atomic_load(&w->want_pages)) {
		snprintf(err, errlen, "cannot set max_page_count: %s", db_errmsg(w->db));
		return -1;
	}
	return 0;
}

/* The node name to use: node, or the default for NULL or "". */
static const char *writer_node(const char *node)
{
	return node && *node ? node : WRITER_NODE_DEFAULT;
}

struct writer *writer_start(const struct writer_config *cfg, char *err, size_t errlen)
{
	struct writer *w = NULL;
	const char *node = writer_node(cfg->node);
	char msg[512];
	int rows = cfg->rows_per_statement ? cfg->rows_per_statement : WRITER_ROWS_DEFAULT;

	if (cfg->batch_max < 0 || cfg->batch_max > WRITER_BATCH_MAX || cfg->retry_ms < 0 ||
	    cfg->max_db_pages < 0 || !cfg->queue || rows < 1 || rows > WRITER_ROWS_MAX ||
	    (rows & (rows - 1)) || strlen(node) >= sizeof(w->node)) {
		snprintf(err, errlen, "writer: invalid configuration");
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		goto oom;
	w->q = cfg->queue;
	w->batch_max = cfg->batch_max ? cfg->batch_max : WRITER_BATCH_DEFAULT;
	w->retry_ms = cfg->retry_ms ? cfg->retry_ms : WRITER_RETRY_DEFAULT;
	w->rows = rows;
	w->on_done = cfg->on_done;
	w->spill = cfg->spill;
	w->on_done_arg = cfg->on_done_arg;
	snprintf(w->node, sizeof(w->node), "%s", node);
	atomic_init(&w->want_pages, cfg->max_db_pages);
	w->batch = calloc((size_t)w->batch_max, sizeof(*w->batch));
	w->fate = calloc((size_t)w->batch_max, sizeof(*w->fate));
	w->fallback = calloc((size_t)w->batch_max, sizeof(*w->fallback));
	w->sent = calloc((size_t)w->batch_max, sizeof(*w->sent));
	w->groups = calloc((size_t)w->batch_max, sizeof(*w->groups));
	w->tagged = calloc((size_t)w->batch_max * TAGS_MAX, sizeof(*w->tagged));
	w->sums = calloc((size_t)w->batch_max * TAGS_MAX, sizeof(*w->sums));
	if (!w->batch || !w->fate || !w->fallback || !w->sent || !w->groups || !w->tagged ||
	    !w->sums)
		goto oom;
	if (db_open(cfg->db_path, DB_READWRITE, &w->db, msg, sizeof(msg)) < 0) {
		snprintf(err, errlen, "writer: %s", msg);
		goto fail;
	}
	if (writer_prepare(w, msg, sizeof(msg)) < 0) {
		/* db_open's messages name the store without a URL's password; this one names
		 * the node instead. */
		snprintf(err, errlen, "writer: %s", msg);
		goto fail;
	}
	if (thread_start(&w->thread, "tally-writer", writer_main, w, err, errlen) < 0)
		goto fail;
	return w;
oom:
	snprintf(err, errlen, "writer: out of memory");
fail:
	if (w)
		writer_free(w);
	return NULL;
}

void writer_stop(struct writer *w)
{
	if (!w)
		return;
	queue_close(w->q);
	pthread_join(w->thread, NULL);
	writer_free(w);
}

void writer_set_max_db_pages(struct writer *w, int64_t pages)
{
	atomic_store(&w->want_pages, pages > 0 ? pages : 0);
}

/* PostgreSQL: refuses a node whose writer runs elsewhere (its session lock conflicts
 * with this transaction-scoped one, released at COMMIT). 0, or -1 with a message. */
static int writer_node_free(struct db *db, const char *node, char *err, size_t errlen)
{
	struct db_stmt *st = NULL;
	enum db_status rc = DB_ERROR;
	int64_t got = 0;

	if (db_kind(db) != DB_POSTGRES)
		return 0;
	if (db_prepare(db, "SELECT CAST(pg_try_advisory_xact_lock(" WRITER_LOCK_CLASS ","
	                   " hashtext(?1)) AS INTEGER)", &st) == 0 && writer_bind_name(st, 1, node) == 0)
		rc = db_step(st);
	if (rc == DB_ROW)
		got = db_col_int(st, 0);
	if (rc != DB_ROW)
		snprintf(err, errlen, "%s", db_errmsg(db));
	else if (got != 1)
		snprintf(err, errlen, "node %s is in use by another agent (its advisory lock is"
		         " held): give each agent its own --node", node);
	db_finalize(st);
	return rc == DB_ROW && got == 1 ? 0 : -1;
}

int writer_load_counters(struct db *db, const char *node, char *err, size_t errlen)
{
	struct db_stmt *st = NULL;
	struct counters c;
	int64_t lost;
	char msg[512];

	node = writer_node(node);
	if (db_begin(db) != DB_OK) {
		snprintf(msg, sizeof(msg), "%s", db_errmsg(db));
		goto fail;
	}
	if (writer_node_free(db, node, msg, sizeof(msg)) < 0 ||
	    writer_node_row(db, node, msg, sizeof(msg)) < 0)
		goto fail;
	if (db_prepare(db, "SELECT received, written, dropped, duplicates, timed_out, unpriced,"
	                   " unauthenticated, pending_overflow FROM accounting WHERE node = ?1",
	               &st) < 0 || writer_bind_name(st, 1, node) < 0 || db_step(st) != DB_ROW) {
		snprintf(msg, sizeof(msg), "cannot read the accounting row of node %s: %s", node,
		         db_errmsg(db));
		goto fail;
	}
	c = (struct counters){
		.received = (uint64_t)db_col_int(st, 0),
		.written = (uint64_t)db_col_int(st, 1),
		.dropped = (uint64_t)db_col_int(st, 2),
		.duplicates = (uint64_t)db_col_int(st, 3),
		.timed_out = (uint64_t)db_col_int(st, 4),
		.unpriced = (uint64_t)db_col_int(st, 5),
		.unauthenticated = (uint64_t)db_col_int(st, 6),
		.pending_overflow = (uint64_t)db_col_int(st, 7),
	};
	db_finalize(st);
	st = NULL;
	lost = counters_recover(&c);
	if (lost != 0) {
		if (db_prepare(db, "UPDATE accounting SET received = written + dropped"
		                   " WHERE node = ?1", &st) < 0 ||
		    writer_bind_name(st, 1, node) < 0 || db_step(st) != DB_DONE) {
			snprintf(msg, sizeof(msg), "%s", db_errmsg(db));
			goto fail;
		}
		db_finalize(st);
		st = NULL;
	}
	if (db_commit(db) != DB_OK) {
		snprintf(msg, sizeof(msg), "%s", db_errmsg(db));
		goto fail;
	}
	if (lost != 0)
		log_info("accounting: %" PRId64 " transactions were in flight when the agent last "
		         "stopped; the journal accounts for them again", lost);
	counters_set(&c);
	return 0;
fail:
	snprintf(err, errlen, "accounting: %s", msg);
	db_finalize(st);
	db_rollback(db);
	return -1;
}
