/* writer: the usage writer thread. writer_start, writer_stop and writer_load_counters
 * run on the main thread, writer_set_max_db_pages on any; everything else on the
 * writer's own thread, which alone uses its SQLite connection.
 *
 * DESIGN
 * One thread owns all usage writes (as Redis's bio.c gives slow I/O to background
 * threads fed by job queues): SQLite serialises writers anyway, and a single writer
 * with its statements prepared once needs no locks but the queue's. The intake thread
 * pushes rows into the bounded queue (queue.c) and never waits; the writer pops what
 * is there, up to batch_max rows, and stores them in one IMMEDIATE transaction:
 *
 *   1. INSERT each row ... ON CONFLICT(request_id) DO NOTHING: no change means the
 *      transaction was already stored (a duplicate record);
 *   2. the inserted rows, sorted by (hour, key, model, provider), become one upsert
 *      per group into usage_hourly, and the same by day into usage_daily; without
 *      the key, into model_hourly and model_daily; without the model, into
 *      key_hourly and key_daily; with neither, by hour into total_hourly (see
 *      WRITER_ROLLUPS);
 *   3. the counters (counters_now changed by this batch, counters_apply) overwrite the accounting
 *      row;
 *   4. COMMIT; only then does the batch's effect reach the in-memory counters.
 *
 * So rows, rollups and counters always commit together. Batches form by themselves:
 * a light load commits each row at once (WAL with synchronous=NORMAL: no fsync per
 * commit), a heavy one finds rows waiting after each commit and writes them together.
 *
 * When a transaction fails (locked by another process, disk or size cap full, I/O
 * error) it is rolled back, counted in stats.errors and retried with a backoff of
 * 10 ms doubling to 500 ms, for up to retry_ms. Meanwhile the writer pops nothing: the
 * queue fills and the intake counts its drops. After retry_ms the batch is given up
 * and its rows counted dropped. The counters reach the database with the next commit;
 * when the queue stays empty, an idle tick commits them alone (this also works on a
 * full database, where the accounting row is rewritten in place). A row that breaks a
 * constraint (it could only come from a bug upstream; the CHECKs are tested here, not
 * by SQLite, see WRITER_CONNECTION_SQL) is counted dropped on its own; it never fails
 * its batch. Once an hour the thread also prunes stored_responses past the provider's
 * retention. */
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
#include "rollup.h"
#include "satadd.h"
#include "stats.h"
#include "thread.h"

#define WRITER_IDLE_MS       250   /* idle tick: store counters that moved */
#define WRITER_LINGER_MS     10    /* after a partial batch: rows become visible <= ~10 ms later */
#define WRITER_BUSY_MS       100   /* SQLite's own wait for a lock before failing */
#define WRITER_PRUNE_S       3600  /* stored responses past retention go this often */
#define WRITER_PRUNE_ROWS    10000 /* at most this many at a time: the thread stays quick */
#define WRITER_BACKOFF_MIN   10
#define WRITER_BACKOFF_MAX   500

/* Sort key of an inserted row for the rollups. */
struct writer_group {
	int64_t period;               /* unix seconds: start of the hour or day */
	int64_t key_id;               /* 0: no key, or a rollup without keys */
	int by_model;                 /* model and provider count: the rollup has them */
	const struct acct_row *row;
};

/* The rollup tables: per key and model (a key with a model filter, or by model or
 * provider); ~200 times smaller, per model only (every figure not by key); per key
 * only (by key without a model filter: a row per key, not per key and model); and the
 * hour's totals (by hour without a filter: a row per hour, not per model). */
static const struct writer_rollup_table {
	const char *table, *unit;     /* unit: the period's column */
	enum period_kind period;
	int keyed, by_model;
} writer_rollups[] = {
	{ "usage_hourly", "hour", PERIOD_HOUR, 1, 1 },
	{ "usage_daily", "day", PERIOD_DAY, 1, 1 },
	{ "model_hourly", "hour", PERIOD_HOUR, 0, 1 },
	{ "model_daily", "day", PERIOD_DAY, 0, 1 },
	{ "key_hourly", "hour", PERIOD_HOUR, 1, 0 },
	{ "key_daily", "day", PERIOD_DAY, 1, 0 },
	{ "total_hourly", "hour", PERIOD_HOUR, 0, 0 },
};
#define WRITER_ROLLUPS (sizeof(writer_rollups) / sizeof(writer_rollups[0]))

struct writer {
	struct queue *q;
	int batch_max;
	int retry_ms;
	void (*on_done)(void *arg, const struct acct_row *rows, size_t n, int committed);
	void *on_done_arg;
	pthread_t thread;
	/* Writer thread only, after writer_start. */
	sqlite3 *db;
	sqlite3_stmt *begin, *commit, *insert, *insert_stored, *prune, *account;
	int64_t pruned_at;            /* unix seconds of the last prune; 0: none yet */
	sqlite3_stmt *rollup[WRITER_ROLLUPS];   /* writer_rollups' upserts */
	struct acct_row *batch;       /* batch_max rows */
	struct writer_group *groups;  /* batch_max entries */
	struct counters stored;  /* last totals committed */
	int gave_up;                  /* the last batch was given up */
	int64_t default_pages;        /* SQLite's max_page_count when no cap is set */
	int64_t applied_pages;        /* cap in force on the connection; 0: none */
	atomic_int_fast64_t want_pages;  /* any thread: cap requested; 0: none */
};

static const char writer_insert_sql[] =
	"INSERT INTO requests (request_id, key_id, model, model_requested, provider, verdict,"
	" status, stream, prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens,"
	" reasoning_tokens, cost_micros, outcome, usage_source, termination, started_at,"
	" duration_ms, ttfb_ms, bytes_in, bytes_out, estimated_tokens, estimated_cost_micros,"
	" cache_creation_1h_tokens, audio_input_tokens, audio_output_tokens,"
	" accepted_prediction_tokens, rejected_prediction_tokens, web_search_calls, service_tier)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,"
	" ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31)"
	" ON CONFLICT (request_id) DO NOTHING";

/* The stored response a create made, with the create's row; an id stored already keeps
 * its first key (owner.h). */
static const char writer_stored_sql[] =
	"INSERT INTO stored_responses (response_id, key_id, model, request_id, created_at)"
	" VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (response_id) DO NOTHING";

/* Stored responses past the provider's retention (owner.h) name nothing any more. */
static const char writer_prune_sql[] =
	"DELETE FROM stored_responses WHERE response_id IN (SELECT response_id FROM"
	" stored_responses WHERE created_at < ?1 LIMIT ?2)";

static const char writer_account_sql[] =
	"UPDATE accounting SET received = ?1, written = ?2, dropped = ?3, duplicates = ?4,"
	" timed_out = ?5, unpriced = ?6, updated_at = ?7, unauthenticated = ?8,"
	" pending_overflow = ?9 WHERE id = 1";

/* ---- binding ---- */

/* Text from a fixed-size field (bounded even without its NUL); "" binds NULL. */
static int writer_bind_text(sqlite3_stmt *st, int i, const char *s, size_t size)
{
	size_t n = strnlen(s, size);

	return n ? sqlite3_bind_text(st, i, s, (int)n, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

/* A count or duration: negative (ACCT_NONE, or garbage) binds NULL. */
static int writer_bind_count(sqlite3_stmt *st, int i, int64_t v)
{
	return v >= 0 ? sqlite3_bind_int64(st, i, v) : sqlite3_bind_null(st, i);
}

/* The same value as a term of a sum, where unknown counts as 0. */
static int64_t writer_term(int64_t v)
{
	return v >= 0 ? v : 0;
}

#define BIND_TEXT(st, i, r, field) writer_bind_text(st, i, (r)->field, sizeof((r)->field))

static int writer_bind_row(sqlite3_stmt *st, const struct acct_row *r)
{
	int rc = BIND_TEXT(st, 1, r, request_id);

	rc |= writer_bind_count(st, 2, r->key_id);
	rc |= BIND_TEXT(st, 3, r, model);
	rc |= BIND_TEXT(st, 4, r, model_requested);
	rc |= BIND_TEXT(st, 5, r, provider);
	rc |= BIND_TEXT(st, 6, r, verdict);
	rc |= r->status > 0 ? sqlite3_bind_int(st, 7, r->status) : sqlite3_bind_null(st, 7);
	rc |= r->stream == 0 || r->stream == 1 ? sqlite3_bind_int(st, 8, r->stream)
	                                       : sqlite3_bind_null(st, 8);
	rc |= writer_bind_count(st, 9, r->prompt_tokens);
	rc |= writer_bind_count(st, 10, r->completion_tokens);
	rc |= writer_bind_count(st, 11, r->cached_tokens);
	rc |= writer_bind_count(st, 12, r->cache_creation_tokens);
	rc |= writer_bind_count(st, 13, r->reasoning_tokens);
	rc |= writer_bind_count(st, 14, r->cost_micros);
	rc |= sqlite3_bind_text(st, 15, acct_outcome_name(r->outcome), -1, SQLITE_STATIC);
	rc |= sqlite3_bind_text(st, 16, acct_usage_source_name(r->usage_source), -1, SQLITE_STATIC);
	rc |= BIND_TEXT(st, 17, r, termination);
	rc |= sqlite3_bind_int64(st, 18, r->started_at_ms);
	rc |= writer_bind_count(st, 19, r->duration_ms);
	rc |= writer_bind_count(st, 20, r->ttfb_ms);
	rc |= writer_bind_count(st, 21, r->bytes_in);
	rc |= writer_bind_count(st, 22, r->bytes_out);
	rc |= writer_bind_count(st, 23, r->estimated_tokens);
	rc |= writer_bind_count(st, 24, r->estimated_cost_micros);
	rc |= writer_bind_count(st, 25, r->cache_creation_1h_tokens);
	rc |= writer_bind_count(st, 26, r->audio_input_tokens);
	rc |= writer_bind_count(st, 27, r->audio_output_tokens);
	rc |= writer_bind_count(st, 28, r->accepted_prediction_tokens);
	rc |= writer_bind_count(st, 29, r->rejected_prediction_tokens);
	rc |= writer_bind_count(st, 30, r->web_search_calls);
	rc |= BIND_TEXT(st, 31, r, service_tier);
	/* SQLITE_OK is 0: any failure leaves a bit set. */
	return rc ? SQLITE_ERROR : SQLITE_OK;
}

/* Runs a prepared statement that returns no row; resets it. Returns the step's code
 * (SQLITE_DONE on success). */
static int writer_run(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	return rc;
}

/* ---- rollups ---- */

/* The upsert adding one group's sums to rollup t: parameters ?1 the period, then the
 * key (keyed tables only), model and provider (by_model tables only) and the sums.
 * Built from the column list so that the tables and the latency buckets cannot
 * disagree. Returns the length written, or -1 if len is too short. */
static int writer_rollup_sql(const struct writer_rollup_table *t, char *sql, size_t len)
{
	char cols[1024], vals[512], sets[2048], col[32], pk[64];
	size_t nc, nv, ns;
	int i, first = 2 + t->keyed + 2 * t->by_model;

	snprintf(pk, sizeof(pk), "%s%s%s", t->unit, t->keyed ? ", key_id" : "",
	         t->by_model ? ", model, provider" : "");
	nc = (size_t)snprintf(cols, sizeof(cols), "%s", pk);
	nv = (size_t)snprintf(vals, sizeof(vals), "?1");
	for (i = 2; i < first; i++)
		nv += (size_t)snprintf(vals + nv, sizeof(vals) - nv, ", ?%d", i);
	ns = 0;
	sets[0] = '\0';
	for (i = 0; i < ROLLUP_SUMS; i++) {
		rollup_column(i, col, sizeof(col));
		nc += (size_t)snprintf(cols + nc, sizeof(cols) - nc, ", %s", col);
		nv += (size_t)snprintf(vals + nv, sizeof(vals) - nv, ", ?%d", first + i);
		ns += (size_t)snprintf(sets + ns, sizeof(sets) - ns, "%s%s = %s + excluded.%s",
		                       i ? ", " : "", col, col, col);
		if (nc >= sizeof(cols) || nv >= sizeof(vals) || ns >= sizeof(sets))
			return -1;
	}
	i = snprintf(sql, len, "INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s",
	             t->table, cols, vals, pk, sets);
	return i < 0 || (size_t)i >= len ? -1 : i;
}

static int writer_group_cmp(const void *pa, const void *pb)
{
	const struct writer_group *a = pa, *b = pb;
	int c;

	if (a->period != b->period)
		return a->period < b->period ? -1 : 1;
	if (a->key_id != b->key_id)
		return a->key_id < b->key_id ? -1 : 1;
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

/* One upsert by w->rollup[t] per (period, key, model, provider) of the n rows in
 * w->groups, key or model and provider left out for a table without them. */
static int writer_rollup(struct writer *w, size_t n, size_t t)
{
	const struct writer_rollup_table *rt = &writer_rollups[t];
	sqlite3_stmt *st = w->rollup[t];
	size_t i = 0, j;
	int rc, k, p;

	for (j = 0; j < n; j++) {
		struct writer_group *g = &w->groups[j];

		g->period = period_start_ms(rt->period, g->row->started_at_ms) / 1000;
		g->key_id = rt->keyed && g->row->key_id > 0 ? g->row->key_id : 0;
		g->by_model = rt->by_model;
	}
	qsort(w->groups, n, sizeof(*w->groups), writer_group_cmp);
	while (i < n) {
		const struct writer_group *g = &w->groups[i];
		int64_t sum[ROLLUP_SUMS] = { 0 };

		for (j = i; j < n && writer_group_cmp(g, &w->groups[j]) == 0; j++)
			writer_sum_add(sum, w->groups[j].row);
		p = 1;
		rc = sqlite3_bind_int64(st, p++, g->period);
		if (rt->keyed)
			rc |= sqlite3_bind_int64(st, p++, g->key_id);
		if (rt->by_model) {
			rc |= sqlite3_bind_text(st, p++, g->row->model, (int)strnlen(g->row->model,
			                        sizeof(g->row->model)), SQLITE_STATIC);
			rc |= sqlite3_bind_text(st, p++, g->row->provider,
			                        (int)strnlen(g->row->provider, sizeof(g->row->provider)),
			                        SQLITE_STATIC);
		}
		for (k = 0; k < ROLLUP_SUMS; k++)
			rc |= sqlite3_bind_int64(st, p + k, sum[k]);
		if (rc != SQLITE_OK)
			return SQLITE_ERROR;
		rc = writer_run(st);
		if (rc != SQLITE_DONE)
			return rc;
		i = j;
	}
	return SQLITE_DONE;
}

/* ---- counters ---- */

static int writer_store_counts(struct writer *w, const struct counters *c)
{
	sqlite3_stmt *st = w->account;
	int rc;

	rc = sqlite3_bind_int64(st, 1, (int64_t)c->received);
	rc |= sqlite3_bind_int64(st, 2, (int64_t)c->written);
	rc |= sqlite3_bind_int64(st, 3, (int64_t)c->dropped);
	rc |= sqlite3_bind_int64(st, 4, (int64_t)c->duplicates);
	rc |= sqlite3_bind_int64(st, 5, (int64_t)c->timed_out);
	rc |= sqlite3_bind_int64(st, 6, (int64_t)c->unpriced);
	rc |= sqlite3_bind_int64(st, 7, db_now());
	rc |= sqlite3_bind_int64(st, 8, (int64_t)c->unauthenticated);
	rc |= sqlite3_bind_int64(st, 9, (int64_t)c->pending_overflow);
	if (rc != SQLITE_OK)
		return SQLITE_ERROR;
	rc = writer_run(st);
	if (rc == SQLITE_DONE && sqlite3_changes(w->db) != 1)
		rc = SQLITE_CORRUPT;   /* the accounting row is missing */
	return rc;
}

/* ---- transactions ---- */

static void writer_apply_cap(struct writer *w)
{
	int64_t want = atomic_load(&w->want_pages);
	char sql[64];

	if (want == w->applied_pages)
		return;
	snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %" PRId64,
	         want > 0 ? want : w->default_pages);
	if (sqlite3_exec(w->db, sql, NULL, NULL, NULL) == SQLITE_OK)
		w->applied_pages = want;
}

/* The schema's CHECK constraints on requests, which the connection skips (see
 * WRITER_CONNECTION_SQL): writer_bind_row binds stream as 0, 1 or NULL, so only the
 * outcome and usage_source names remain to check. A CHECK added to the schema belongs
 * here too. NULL if r passes, else which failed, worded as SQLite would. */
static const char *writer_check(const struct acct_row *r)
{
	if ((unsigned)r->outcome >= ACCT_OUTCOME_COUNT)
		return "CHECK constraint failed: outcome";
	if ((unsigned)r->usage_source >= ACCT_USAGE_SOURCE_COUNT)
		return "CHECK constraint failed: usage_source";
	return NULL;
}

/* Notes the stored response row r's create made. SQLITE_DONE, or the error. */
static int writer_stored(struct writer *w, const struct acct_row *r)
{
	sqlite3_stmt *st = w->insert_stored;
	int rc = BIND_TEXT(st, 1, r, response_id);

	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(st, 2, r->key_id);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(st, 3, r->model_requested,
		                       (int)strnlen(r->model_requested, sizeof(r->model_requested)),
		                       SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = BIND_TEXT(st, 4, r, request_id);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(st, 5, r->started_at_ms / 1000);
	return rc == SQLITE_OK ? writer_run(st) : rc;
}

/* Inserts row i of the batch, recording its effect in d and, if it was inserted, in
 * w->groups[*ngroups]. Returns SQLITE_DONE, or the error that fails the transaction. */
static int writer_insert(struct writer *w, const struct acct_row *r, struct counters *d,
                         size_t *ngroups)
{
	const char *refused = writer_check(r);
	int rc = refused ? SQLITE_CONSTRAINT_CHECK : writer_bind_row(w->insert, r);

	if (rc == SQLITE_OK)
		rc = writer_run(w->insert);
	if (rc == SQLITE_DONE && sqlite3_changes(w->db) == 0) {
		d->duplicates++;
	} else if (rc == SQLITE_DONE) {
		/* The row stands without it: a refused id costs its key that response's
		 * later reads, never the row. */
		if (r->response_id[0] && r->key_id >= 0 && (rc = writer_stored(w, r)) != SQLITE_DONE) {
			if ((rc & 0xff) != SQLITE_CONSTRAINT)
				return rc;
			log_error("writer: stored response of row %.*s refused (%s)", ACCT_ID_MAX,
			          r->request_id, sqlite3_errmsg(w->db));
			rc = SQLITE_DONE;
		}
		w->groups[(*ngroups)++] = (struct writer_group){ 0, 0, 0, r };
		d->written++;
		d->timed_out += r->outcome == ACCT_NO_RECORD;
		d->unpriced += r->unpriced != 0;
	} else if ((rc & 0xff) == SQLITE_CONSTRAINT) {
		const char *msg = refused ? refused : sqlite3_errmsg(w->db);

		/* Only this statement is undone; the transaction goes on. The message quotes
		 * the constraint, which may span lines: its first one says enough. */
		log_error("writer: row %.*s refused (%.*s): counted dropped",
		          ACCT_ID_MAX, r->request_id, (int)strcspn(msg, "\n"), msg);
		stats_add(&stats.errors[STATS_ERR_WRITE_OTHER], 1);
		d->dropped++;
		rc = SQLITE_DONE;
	}
	return rc;
}

/* One attempt at storing rows[0..n) (none: the counters alone) in one transaction.
 * Returns SQLITE_OK, with the counters applied, or the error after a rollback. */
static int writer_attempt(struct writer *w, const struct acct_row *rows, size_t n)
{
	struct counters d = { 0 }, c;
	uint64_t start;
	size_t i, ngroups = 0;
	int rc;

	writer_apply_cap(w);
	start = stats_now_ns();
	rc = writer_run(w->begin);
	if (rc != SQLITE_DONE)
		goto fail;
	for (i = 0; i < n; i++) {
		rc = writer_insert(w, &rows[i], &d, &ngroups);
		if (rc != SQLITE_DONE)
			goto fail;
	}
	for (i = 0; i < WRITER_ROLLUPS; i++) {
		rc = writer_rollup(w, ngroups, i);
		if (rc != SQLITE_DONE)
			goto fail;
	}
	c = counters_now();
	counters_apply(&c, &d);
	rc = writer_store_counts(w, &c);
	if (rc != SQLITE_DONE)
		goto fail;
	rc = writer_run(w->commit);
	if (rc != SQLITE_DONE)
		goto fail;
	counters_settle(&d);
	w->stored = c;
	stats_add(&stats.batches, 1);
	stats_hist_observe(&stats.batch_latency, stats_now_ns() - start);
	return SQLITE_OK;
fail:
	/* An error may have rolled back already (SQLITE_FULL, IOERR): then there is none. */
	if (!sqlite3_get_autocommit(w->db))
		sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
	return rc == SQLITE_OK ? SQLITE_ERROR : rc;
}

static enum stats_error writer_error_kind(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return STATS_ERR_WRITE_BUSY;
	case SQLITE_FULL:
	case SQLITE_IOERR:
		return STATS_ERR_WRITE_FULL;
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
	int backoff = WRITER_BACKOFF_MIN, failures = 0, rc;
	struct counters c;
	int64_t left;

	if (n == 0) {
		c = counters_now();
		if (memcmp(&c, &w->stored, sizeof(c)) == 0)
			return 0;
	}
	while ((rc = writer_attempt(w, w->batch, n)) != SQLITE_OK) {
		stats_add(&stats.errors[writer_error_kind(rc)], 1);
		left = budget_ms - (int64_t)((stats_now_ns() - start) / 1000000u);
		if (failures++ == 0 && left > 0)
			log_warn("writer: storing %zu rows failed (%s), retrying for up to %d ms",
			         n, sqlite3_errstr(rc), budget_ms);
		if (left <= 0) {
			if (n)
				log_error("writer: gave up %zu rows after %d attempts (%s): counted "
				          "dropped", n, failures, sqlite3_errstr(rc));
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

	if (w->pruned_at && now - w->pruned_at < WRITER_PRUNE_S)
		return;
	sqlite3_bind_int64(w->prune, 1, now - OWNER_RETENTION_S);
	sqlite3_bind_int(w->prune, 2, WRITER_PRUNE_ROWS);
	if (writer_run(w->prune) == SQLITE_DONE && sqlite3_changes(w->db) == WRITER_PRUNE_ROWS)
		return;   /* more to go: the next idle tick goes on */
	w->pruned_at = now;
}

/* Stores the batch of n rows, or counts them dropped. Once stopping (closed) and the
 * database has already made the writer give a batch up, one attempt per batch: the
 * stop must end. */
static void writer_batch(struct writer *w, size_t n, int closed)
{
	int committed = writer_commit(w, n, closed && w->gave_up ? 0 : w->retry_ms) == 0;

	w->gave_up = !committed;
	if (!committed) {
		counters_drop(n);
		/* The counters alone may still fit (their row is rewritten in place). */
		writer_commit(w, 0, 0);
	}
	if (w->on_done)
		w->on_done(w->on_done_arg, w->batch, n, committed);
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	size_t n;
	int closed;

	for (;;) {
		/* Read before popping: once closed, an empty pop means nothing is left. */
		closed = queue_closed(w->q);
		n = queue_pop(w->q, w->batch, (size_t)w->batch_max, WRITER_IDLE_MS);
		if (n > 0) {
			writer_batch(w, n, closed);
			/* A partial batch means a light load: let rows gather for a moment rather
			 * than commit a handful at a time (each commit costs a few page writes). */
			if (n < (size_t)w->batch_max && !closed)
				nanosleep(&(struct timespec){ 0, WRITER_LINGER_MS * 1000000L }, NULL);
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
	size_t i;

	sqlite3_finalize(w->begin);
	sqlite3_finalize(w->commit);
	sqlite3_finalize(w->insert);
	sqlite3_finalize(w->insert_stored);
	sqlite3_finalize(w->prune);
	for (i = 0; i < WRITER_ROLLUPS; i++)
		sqlite3_finalize(w->rollup[i]);
	sqlite3_finalize(w->account);
	sqlite3_close(w->db);
	free(w->batch);
	free(w->groups);
	free(w);
}

/* Connection settings and statements. 0, or -1 with a message. */
static int writer_prepare(struct writer *w, char *err, size_t errlen)
{
	const struct {
		sqlite3_stmt **st;
		const char *sql;
	} stmts[] = {
		{ &w->begin, "BEGIN IMMEDIATE" },
		{ &w->commit, "COMMIT" },
		{ &w->insert, writer_insert_sql },
		{ &w->insert_stored, writer_stored_sql },
		{ &w->prune, writer_prune_sql },
		{ &w->account, writer_account_sql },
	};
	char sql[4096];
	sqlite3_stmt *st = NULL;
	size_t i;

	sqlite3_busy_timeout(w->db, WRITER_BUSY_MS);
	if (db_exec(w->db, WRITER_CONNECTION_SQL, err, errlen) < 0)
		return -1;
	if (sqlite3_prepare_v2(w->db, "PRAGMA max_page_count", -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW) {
		snprintf(err, errlen, "%s", sqlite3_errmsg(w->db));
		sqlite3_finalize(st);
		return -1;
	}
	w->default_pages = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	for (i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
		if (sqlite3_prepare_v3(w->db, stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT,
		                       stmts[i].st, NULL) != SQLITE_OK) {
			snprintf(err, errlen, "%s", sqlite3_errmsg(w->db));
			return -1;
		}
	}
	for (i = 0; i < WRITER_ROLLUPS; i++) {
		/* Fixed text: too long for sql is a bug here, not a state of the database. */
		if (writer_rollup_sql(&writer_rollups[i], sql, sizeof(sql)) < 0 ||
		    sqlite3_prepare_v3(w->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &w->rollup[i],
		                       NULL) != SQLITE_OK) {
			snprintf(err, errlen, "%s: %s", writer_rollups[i].table, sqlite3_errmsg(w->db));
			return -1;
		}
	}
	writer_apply_cap(w);
	if (w->applied_pages != atomic_load(&w->want_pages)) {
		snprintf(err, errlen, "cannot set max_page_count: %s", sqlite3_errmsg(w->db));
		return -1;
	}
	return 0;
}

struct writer *writer_start(const struct writer_config *cfg, char *err, size_t errlen)
{
	struct writer *w = NULL;
	char msg[512];

	if (cfg->batch_max < 0 || cfg->batch_max > WRITER_BATCH_MAX || cfg->retry_ms < 0 ||
	    cfg->max_db_pages < 0 || !cfg->queue) {
		snprintf(err, errlen, "writer: invalid configuration");
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		goto oom;
	w->q = cfg->queue;
	w->batch_max = cfg->batch_max ? cfg->batch_max : WRITER_BATCH_DEFAULT;
	w->retry_ms = cfg->retry_ms ? cfg->retry_ms : WRITER_RETRY_DEFAULT;
	w->on_done = cfg->on_done;
	w->on_done_arg = cfg->on_done_arg;
	atomic_init(&w->want_pages, cfg->max_db_pages);
	w->batch = calloc((size_t)w->batch_max, sizeof(*w->batch));
	w->groups = calloc((size_t)w->batch_max, sizeof(*w->groups));
	if (!w->batch || !w->groups)
		goto oom;
	if (db_open(cfg->db_path, DB_READWRITE, &w->db, msg, sizeof(msg)) < 0) {
		snprintf(err, errlen, "writer: %s", msg);
		goto fail;
	}
	if (writer_prepare(w, msg, sizeof(msg)) < 0) {
		snprintf(err, errlen, "writer: database %s: %s", cfg->db_path, msg);
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

int writer_load_counters(sqlite3 *db, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	struct counters c;
	int64_t lost;
	char msg[512];

	if (db_exec(db, "BEGIN IMMEDIATE", msg, sizeof(msg)) < 0)
		goto fail;
	if (sqlite3_prepare_v2(db, "SELECT received, written, dropped, duplicates, timed_out,"
	                           " unpriced, unauthenticated, pending_overflow FROM accounting"
	                           " WHERE id = 1", -1, &st, NULL)
	    != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
		snprintf(msg, sizeof(msg), "cannot read the accounting row: %s", sqlite3_errmsg(db));
		goto fail;
	}
	c = (struct counters){
		.received = (uint64_t)sqlite3_column_int64(st, 0),
		.written = (uint64_t)sqlite3_column_int64(st, 1),
		.dropped = (uint64_t)sqlite3_column_int64(st, 2),
		.duplicates = (uint64_t)sqlite3_column_int64(st, 3),
		.timed_out = (uint64_t)sqlite3_column_int64(st, 4),
		.unpriced = (uint64_t)sqlite3_column_int64(st, 5),
		.unauthenticated = (uint64_t)sqlite3_column_int64(st, 6),
		.pending_overflow = (uint64_t)sqlite3_column_int64(st, 7),
	};
	sqlite3_finalize(st);
	st = NULL;
	lost = counters_recover(&c);
	if (lost != 0 &&
	    db_exec(db, "UPDATE accounting SET received = written + dropped WHERE id = 1",
	            msg, sizeof(msg)) < 0)
		goto fail;
	if (db_exec(db, "COMMIT", msg, sizeof(msg)) < 0)
		goto fail;
	if (lost != 0)
		log_info("accounting: %" PRId64 " transactions were in flight when the agent last "
		         "stopped; the journal accounts for them again", lost);
	counters_set(&c);
	return 0;
fail:
	snprintf(err, errlen, "accounting: %s", msg);
	sqlite3_finalize(st);
	if (!sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	return -1;
}
