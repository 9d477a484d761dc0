/* bench-writer: the usage writer's throughput in rows/s, against a baseline measured in
 * the same run. The main thread plays the intake: it pushes BENCH_ROWS (default
 * 500000) realistic rows as fast as it can into a queue that holds them all, and the
 * real writer thread stores them in a fresh store; the figure runs from the first push
 * to the commit of the last row (on_done). The baseline inserts the same rows into
 * another fresh store with one prepared single-row INSERT, in transactions of the same
 * size under the same settings (db_open's, then on SQLite the writer's
 * WRITER_CONNECTION_SQL), without rollups, counters or duplicate handling.
 * The store is a fresh WAL database in a temporary directory, or with BENCH_STORE set to
 * a postgresql:// URL that PostgreSQL database, emptied (its public schema dropped and
 * made again) before each run: give it a database of its own (bench-writer.sh starts a
 * private cluster). BENCH_BATCH (default the agent's, WRITER_BATCH_DEFAULT) sets both
 * batch sizes; BENCH_STATEMENT_ROWS the writer's rows per INSERT statement (default its
 * own, WRITER_ROWS_DEFAULT; 1 for one statement per row); BENCH_ROUNDS (default 3)
 * repeats the pair, the best of each counts. BENCH_KEYS (default 100) is how many keys
 * the rows are spread over. BENCH_END_USERS, a list of counts (default "0"), runs the
 * pair once per count U in each round: with U > 0 row i names end user i mod U of its
 * key (a 36-character id), so that end_user_daily gets a row per key and end user, and
 * the figures of each U are printed side by side with end_user_daily's rows and bytes.
 * BENCH_TAGS=T (0 to 8, default 0) gives every row T tags, each of 10 values (tag_daily
 * gets a row per tag, value, key and day; the writer sums each row once per tag).
 * BENCH_BASELINE=0 leaves the baseline out (on PostgreSQL it takes minutes). Each
 * writer run is checked afterwards from the store alone; any mismatch exits 1. Uses
 * about 2 x 1.3 KB x BENCH_ROWS of memory. Single-threaded but for the writer's thread. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acct.h"
#include "counters.h"
#include "db.h"
#include "queue.h"
#include "stats.h"
#include "writer.h"

#define BENCH_END_USERS_MAX 8      /* counts in BENCH_END_USERS */
#define BENCH_START_MS   1750000000000LL
#define BENCH_SPACING_MS 7          /* ~140 requests/s: 500000 rows span about an hour */

struct bench_model {
	const char *name, *requested, *provider;
	int priced;
};

static const struct bench_model bench_models[] = {
	{ "gpt-4o-mini-2024-07-18", "gpt-4o-mini", "openai", 1 },
	{ "gpt-4o-2024-08-06", "gpt-4o", "openai", 1 },
	{ "gpt-4.1-nano-2025-04-14", "gpt-4.1-nano", "openai", 1 },
	{ "o3-mini-2025-01-31", "o3-mini", "openai", 1 },
	{ "claude-3-5-haiku-20241022", "claude-3-5-haiku", "anthropic", 1 },
	{ "claude-sonnet-4-20250514", "claude-sonnet-4", "anthropic", 1 },
	{ "claude-opus-4-20250514", "claude-opus-4", "anthropic", 1 },
	{ "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", "vllm", 1 },
	{ "Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b", "vllm", 0 },
	{ "mistral-small-2503", "mistral-small", "ollama", 1 },
};

#define BENCH_MODELS ((int)(sizeof(bench_models) / sizeof(bench_models[0])))

struct bench_result {
	double rows_per_s;
	double p50_ms, p99_ms, mean_ms;   /* batch commit latency; writer only */
	uint64_t batches;
	/* writer only: end_user_daily's rows and bytes, and the bytes of the index on
	 * requests' end users, after the run (-1: not known) */
	int64_t eu_rows, eu_bytes, eu_index_bytes;
};

static unsigned bench_keys = 100;
static unsigned bench_tags;   /* BENCH_TAGS */

/* Rows committed or given up so far (written on the writer thread), and when the last
 * of the expected ones committed. */
static atomic_ulong bench_committed, bench_given_up;
static atomic_uint_fast64_t bench_end_ns;
static unsigned long bench_expected;

/* splitmix64's finaliser: a bijection, so distinct inputs give distinct request ids. */
static uint64_t bench_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Row i, the same in every run: ids as tally.cfg's unique-id-format makes them
 * (accept time in ms, pid, request counter, random), each row
 * arriving when its request ended (streams up to 30 s after their accept, others up to
 * 2 s), keys skewed towards low ids, each key mostly on its favourite model, 60%
 * streams, ~10% failures of every kind, one unpriced model. */
/* bench_tags tags t0..tN of values v0..v9, in canonical order. */
static void bench_row_tags(uint64_t h, struct acct_row *r)
{
	size_t len = 0;
	unsigned t;

	for (t = 0; t < bench_tags; t++)
		len += (size_t)snprintf(r->tags + len, sizeof(r->tags) - len, "%st%u=v%u",
		                        t ? "," : "", t, (unsigned)((h >> (4 * t)) % 10));
}

static void bench_row(uint64_t i, struct acct_row *r)
{
	uint64_t h = bench_mix(i), h2 = bench_mix(h), h3 = bench_mix(h2);
	unsigned a = (unsigned)(h2 % bench_keys), b = (unsigned)((h2 >> 8) % bench_keys);
	unsigned key = 1 + (a < b ? a : b);   /* the lower of two draws: skewed */
	const struct bench_model *m = &bench_models[(h3 % 10) < 7 ? key % BENCH_MODELS
	                                                          : (h3 >> 4) % BENCH_MODELS];
	unsigned roll = (unsigned)((h3 >> 16) % 1000);
	int stream = (h3 >> 32) % 10 < 6;
	int64_t accept_ms = BENCH_START_MS + (int64_t)(i * BENCH_SPACING_MS) -
	                    (int64_t)(h % (stream ? 30000 : 2000));

	memset(r, 0, sizeof(*r));
	snprintf(r->request_id, sizeof(r->request_id), "%" PRId64 "-%X-%" PRIX64 "-%016" PRIX64,
	         accept_ms, 4242u, i, h2 & 0x7fffffff);
	r->key_id = key;
	snprintf(r->model, sizeof(r->model), "%s", m->name);
	snprintf(r->model_requested, sizeof(r->model_requested), "%s", m->requested);
	snprintf(r->provider, sizeof(r->provider), "%s", m->provider);
	snprintf(r->verdict, sizeof(r->verdict), "allow");
	snprintf(r->termination, sizeof(r->termination), "--");
	r->status = 200;
	r->stream = stream;
	r->prompt_tokens = 50 + (int64_t)((h3 >> 20) % 8000);
	r->completion_tokens = 1 + (int64_t)((h3 >> 36) % 1500);
	r->cached_tokens = (h3 >> 48) % 3 == 0 ? r->prompt_tokens / 2 : 0;
	r->cache_creation_tokens = strcmp(m->provider, "anthropic") == 0 ? 0 : ACCT_NONE;
	r->reasoning_tokens = strncmp(m->name, "o3", 2) == 0 ? r->completion_tokens / 2 : ACCT_NONE;
	r->cost_micros = m->priced ? r->prompt_tokens / 4 + r->completion_tokens * 2 : ACCT_NONE;
	r->unpriced = !m->priced;
	r->outcome = ACCT_COMPLETE;
	bench_row_tags(h3, r);
	r->usage_source = r->stream ? ACCT_USAGE_STREAM : ACCT_USAGE_RESPONSE;
	r->started_at_ms = accept_ms;
	r->ttfb_ms = 80 + (int64_t)(h % 900);
	r->duration_ms = r->ttfb_ms + (r->stream ? r->completion_tokens * 12 : 40);
	r->bytes_in = 200 + r->prompt_tokens * 4;
	r->bytes_out = 400 + r->completion_tokens * (r->stream ? 40 : 5);
	if (roll < 900)
		return;
	if (roll < 930) {                /* client went away mid-response: partial usage */
		r->outcome = ACCT_CLIENT_ABORT;
		snprintf(r->termination, sizeof(r->termination), "CD");
		r->usage_source = ACCT_USAGE_PARTIAL;
		r->completion_tokens = ACCT_NONE;
		return;
	}
	/* The rest carry no usage. */
	r->prompt_tokens = r->completion_tokens = r->cached_tokens = ACCT_NONE;
	r->cache_creation_tokens = r->reasoning_tokens = r->cost_micros = ACCT_NONE;
	r->unpriced = 0;
	r->usage_source = ACCT_USAGE_NONE;
	if (roll < 960) {
		r->outcome = ACCT_UPSTREAM_ERROR;
		r->status = 502;
		snprintf(r->termination, sizeof(r->termination), "SH");
	} else if (roll < 980) {
		r->outcome = ACCT_UPSTREAM_REJECTED;
		r->status = 429;
	} else if (roll < 990) {
		r->outcome = ACCT_DENIED;
		r->status = 403;
		r->stream = ACCT_NONE;
		snprintf(r->verdict, sizeof(r->verdict), "model_forbidden");
		r->provider[0] = '\0';
		r->ttfb_ms = ACCT_NONE;
	} else if (roll < 995) {
		r->outcome = ACCT_GATEWAY_REJECTED;
		r->status = 503;
		r->key_id = ACCT_NONE;
		r->verdict[0] = r->provider[0] = r->model[0] = '\0';
		r->ttfb_ms = ACCT_NONE;
	} else {
		r->outcome = ACCT_NO_RECORD;
		r->status = 0;
		r->termination[0] = '\0';
		r->duration_ms = r->ttfb_ms = r->bytes_in = r->bytes_out = ACCT_NONE;
	}
}

/* Row i of rows[0..n) names end user i mod u of its key (none when u is 0, or the row has
 * no key): ids as random as UUIDs, and as long. Returns how many name one. */
static int64_t bench_end_users(struct acct_row *rows, size_t n, long u)
{
	int64_t named = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t h = bench_mix(0x5eed0000u ^ (u ? i % (uint64_t)u : 0)), h2 = bench_mix(h);

		rows[i].end_user[0] = '\0';
		if (!u || rows[i].key_id <= 0)
			continue;
		snprintf(rows[i].end_user, sizeof(rows[i].end_user),
		         "%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64,
		         h >> 32, (h >> 16) & 0xffff, h & 0xffff, h2 >> 48, h2 & (uint64_t)0xffffffffffff);
		named++;
	}
	return named;
}

static double bench_now_s(void)
{
	return (double)stats_now_ns() / 1e9;
}

/* Removes a SQLite database and its WAL files; a PostgreSQL store is left as it is
 * (bench_db_create empties it). */
static void bench_db_remove(const char *path)
{
	static const char *const suffixes[] = { "", "-wal", "-shm" };
	char file[512];
	size_t i;

	if (!*path || db_is_postgres(path))
		return;
	for (i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		snprintf(file, sizeof(file), "%s%s", path, suffixes[i]);
		unlink(file);
	}
}

/* Makes store an empty database at DB_SCHEMA_VERSION, as the agent's start-up creates
 * it: a SQLite file is removed first, a PostgreSQL database loses its public schema
 * (the tables, the rows and the trigger function of an earlier run). 0 or -1. */
static int bench_db_create(const char *store)
{
	char err[512];
	struct db *db = NULL;
	int rc = -1;

	bench_db_remove(store);
	if (db_open(store, DB_CREATE, &db, err, sizeof(err)) < 0)
		goto out;
	if (db_kind(db) == DB_POSTGRES) {
		if (db_exec(db, "DROP SCHEMA public CASCADE; CREATE SCHEMA public", err,
		            sizeof(err)) < 0)
			goto out;
		db_close(db);
		db = NULL;
		if (db_open(store, DB_CREATE, &db, err, sizeof(err)) < 0)
			goto out;
	}
	rc = 0;
out:
	if (rc < 0)
		fprintf(stderr, "bench-writer: %s\n", err);
	db_close(db);
	return rc;
}

/* ---- the writer ---- */

static void bench_on_done(void *arg, const struct acct_row *rows, size_t n, int committed)
{
	(void)arg;
	(void)rows;
	if (!committed) {
		atomic_fetch_add(&bench_given_up, n);
		return;
	}
	if (atomic_fetch_add(&bench_committed, n) + n == bench_expected)
		atomic_store(&bench_end_ns, stats_now_ns());
}

/* Upper bound in ms of the bucket holding quantile q of the observations in h minus
 * those in before. */
static double bench_quantile_ms(const struct stats_hist *h, const uint64_t *before,
                                uint64_t count, double q)
{
	static const uint64_t bounds[STATS_HIST_NBOUNDS] = STATS_HIST_BOUNDS;
	uint64_t rank = (uint64_t)(q * (double)count + 0.999999), seen = 0;
	int i;

	for (i = 0; i < STATS_HIST_NBOUNDS; i++) {
		seen += atomic_load(&h->buckets[i]) - before[i];
		if (seen >= rank)
			return (double)bounds[i] / 1e6;
	}
	return -1;   /* beyond the last bound */
}

/* The checks anyone can run on the database afterwards, of n rows of which named name an
 * end user. 0, or -1 with the reasons. */
static int bench_verify(const char *path, int64_t n, int64_t named)
{
	static const struct {
		const char *what, *sql;
		int all;   /* expected: 1 all n rows, 0 none, 2 the rows naming an end user */
	} checks[] = {
		{ "rows in requests", "SELECT count(*) FROM requests", 1 },
		{ "accounting.received", "SELECT sum(received) FROM accounting", 1 },
		{ "accounting.written", "SELECT sum(written) FROM accounting", 1 },
		{ "accounting.dropped", "SELECT sum(dropped) FROM accounting", 0 },
		{ "requests in usage_hourly", "SELECT sum(requests) FROM usage_hourly", 1 },
		{ "rows with an end user", "SELECT count(end_user) FROM requests", 2 },
		{ "requests in end_user_daily",
		  "SELECT coalesce(sum(requests), 0) FROM end_user_daily", 2 },
	};
	int64_t tagged = -1, in_tags = -1;
	char err[512];
	struct db *db;
	int64_t v, want;
	size_t i;
	int rc = 0;

	if (db_open(path, DB_READONLY, &db, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench-writer: %s\n", err);
		return -1;
	}
	for (i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
		want = checks[i].all == 2 ? named : checks[i].all ? n : 0;
		if (db_query_int(db, checks[i].sql, &v) < 0)
			v = -1;   /* no count here is negative */
		if (v != want) {
			fprintf(stderr, "bench-writer: %s: %" PRId64 ", expected %" PRId64 "\n",
			        checks[i].what, v, want);
			rc = -1;
		}
	}
	/* Each row with a key counts once per tag in tag_daily and in tag_total_daily (rows
	 * without a key carry no tags the gateway could have read). */
	if (db_query_int(db, "SELECT count(*) FROM requests WHERE key_id IS NOT NULL AND"
	                     " tags IS NOT NULL", &tagged) < 0)
		rc = -1;
	for (i = 0; i < 2 && rc == 0; i++) {
		const char *table = i ? "tag_total_daily" : "tag_daily";
		char sql[96];

		snprintf(sql, sizeof(sql), "SELECT coalesce(sum(requests), 0) FROM %s", table);
		if (db_query_int(db, sql, &in_tags) < 0 || in_tags != tagged * (int64_t)bench_tags ||
		    (bench_tags && tagged < n * 9 / 10)) {
			fprintf(stderr, "bench-writer: requests in %s: %" PRId64 ", expected %" PRId64
			        " x %u\n", table, in_tags, tagged, bench_tags);
			rc = -1;
		}
	}
	db_close(db);
	return rc;
}

/* end_user_daily's rows and bytes (its primary key's included) and those of the index on
 * requests' end users, into res; -1 for a figure the store cannot give (SQLite without
 * its dbstat table). */
static void bench_sizes(const char *path, struct bench_result *res)
{
	static const char *const sqlite_sql[] = {
		"SELECT sum(pgsize) FROM dbstat WHERE name = 'end_user_daily'",
		"SELECT sum(pgsize) FROM dbstat WHERE name = 'requests_end_user_started_at'",
	};
	static const char *const pg_sql[] = {
		"SELECT pg_total_relation_size('end_user_daily')",
		"SELECT pg_relation_size('requests_end_user_started_at')",
	};
	char err[512];
	struct db *db;

	res->eu_rows = res->eu_bytes = res->eu_index_bytes = -1;
	if (db_open(path, DB_READONLY, &db, err, sizeof(err)) < 0)
		return;
	const char *const *sql = db_kind(db) == DB_POSTGRES ? pg_sql : sqlite_sql;
	if (db_query_int(db, "SELECT count(*) FROM end_user_daily", &res->eu_rows) < 0 ||
	    db_query_int(db, sql[0], &res->eu_bytes) < 0 ||
	    db_query_int(db, sql[1], &res->eu_index_bytes) < 0)
		res->eu_bytes = res->eu_index_bytes = -1;
	db_close(db);
}

/* Stores rows[0..n) (named of them naming an end user) through a queue and the writer
 * into a new database at path. */
static int bench_writer(const char *path, const struct acct_row *rows, size_t n,
                        int64_t named, int batch, int per_statement, struct bench_result *res)
{
	struct writer_config cfg = { .db_path = path, .batch_max = batch,
	                             .rows_per_statement = per_statement,
	                             .on_done = bench_on_done };
	struct stats_hist *h = &stats.batch_latency;
	uint64_t before[STATS_HIST_NBOUNDS + 1], batches, count, sum, t0;
	struct writer *w = NULL;
	struct queue *q = NULL;
	char err[512];
	struct db *db = NULL;
	size_t i, refused = 0;
	int rc = -1;

	if (bench_db_create(path) < 0)
		return -1;
	/* Zero the process's totals from the fresh database, as the agent's start-up does. */
	if (db_open(path, DB_READWRITE, &db, err, sizeof(err)) < 0 ||
	    writer_load_counters(db, NULL, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench-writer: %s\n", err);
		goto out;
	}
	db_close(db);
	db = NULL;
	q = queue_new(n);
	cfg.queue = q;
	if (!q || !(w = writer_start(&cfg, err, sizeof(err)))) {
		fprintf(stderr, "bench-writer: %s\n", q ? err : "out of memory");
		goto out;
	}
	for (i = 0; i <= STATS_HIST_NBOUNDS; i++)
		before[i] = atomic_load(&h->buckets[i]);
	count = atomic_load(&h->count);
	sum = atomic_load(&h->sum_ns);
	batches = stats_get(&stats.batches);
	atomic_store(&bench_committed, 0);
	atomic_store(&bench_given_up, 0);
	bench_expected = n;

	t0 = stats_now_ns();
	for (i = 0; i < n; i++) {
		counters_receive();
		if (queue_push(q, &rows[i]) < 0) {
			counters_drop(1);
			refused++;
		}
	}
	while (atomic_load(&bench_committed) + atomic_load(&bench_given_up) < n - refused)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	if (atomic_load(&bench_given_up) == 0)
		res->rows_per_s = (double)n * 1e9 / (double)(atomic_load(&bench_end_ns) - t0);

	count = atomic_load(&h->count) - count;
	res->batches = stats_get(&stats.batches) - batches;
	res->mean_ms = count ? (double)(atomic_load(&h->sum_ns) - sum) / (double)count / 1e6 : 0;
	res->p50_ms = bench_quantile_ms(h, before, count, 0.50);
	res->p99_ms = bench_quantile_ms(h, before, count, 0.99);
	writer_stop(w);
	w = NULL;
	rc = bench_verify(path, (int64_t)n, named);
	bench_sizes(path, res);
out:
	writer_stop(w);
	queue_free(q);
	db_close(db);
	return rc;
}

/* ---- the baseline ---- */

/* Binds r as the writer does: empty text and negative numbers as NULL. */
static int bench_bind(struct db_stmt *st, const struct acct_row *r)
{
	const char *texts[] = { r->request_id, r->model, r->model_requested, r->provider,
	                        r->verdict, acct_outcome_name(r->outcome),
	                        acct_usage_source_name(r->usage_source), r->termination,
	                        r->end_user };
	const int text_cols[] = { 1, 3, 4, 5, 6, 15, 16, 17, 23 };
	const int64_t ints[] = { r->key_id, r->status > 0 ? r->status : -1, r->stream,
	                         r->prompt_tokens, r->completion_tokens, r->cached_tokens,
	                         r->cache_creation_tokens, r->reasoning_tokens, r->cost_micros,
	                         r->started_at_ms, r->duration_ms, r->ttfb_ms, r->bytes_in,
	                         r->bytes_out };
	const int int_cols[] = { 2, 7, 8, 9, 10, 11, 12, 13, 14, 18, 19, 20, 21, 22 };
	size_t i;
	int rc = 0;

	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		rc |= texts[i][0] ? db_bind_text(st, text_cols[i], texts[i], strlen(texts[i]))
		                  : db_bind_null(st, text_cols[i]);
	for (i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		rc |= ints[i] >= 0 ? db_bind_int(st, int_cols[i], ints[i])
		                   : db_bind_null(st, int_cols[i]);
	return rc;
}

/* Inserts rows[0..n) into a new database at path, batch rows per transaction. */
static int bench_baseline(const char *path, const struct acct_row *rows, size_t n, int batch,
                          struct bench_result *res)
{
	static const char insert_sql[] =
		"INSERT INTO requests (request_id, key_id, model, model_requested, provider,"
		" verdict, status, stream, prompt_tokens, completion_tokens, cached_tokens,"
		" cache_creation_tokens, reasoning_tokens, cost_micros, outcome, usage_source,"
		" termination, started_at, duration_ms, ttfb_ms, bytes_in, bytes_out, end_user)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,"
		" ?17, ?18, ?19, ?20, ?21, ?22, ?23)";
	char err[512] = "";
	struct db_stmt *st = NULL;
	struct db *db = NULL;
	int64_t stored = -1;
	uint64_t t0;
	size_t i;
	int rc = -1;

	if (bench_db_create(path) < 0)
		return -1;
	if (db_open(path, DB_READWRITE, &db, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench-writer: baseline: %s\n", err);
		return -1;
	}
	/* The writer's page cache and checkpoint settings are SQLite's; PostgreSQL runs
	 * with the server's. */
	if ((db_kind(db) == DB_SQLITE &&
	     db_exec(db, WRITER_CONNECTION_SQL, err, sizeof(err)) < 0) ||
	    db_prepare(db, insert_sql, &st) < 0)
		goto out;
	t0 = stats_now_ns();
	for (i = 0; i < n; i++) {
		if (i % (size_t)batch == 0 && db_begin(db) != DB_OK)
			goto out;
		if (bench_bind(st, &rows[i]) != 0 || db_step(st) != DB_DONE)
			goto out;
		db_reset(st);
		if ((i + 1 == n || (i + 1) % (size_t)batch == 0) && db_commit(db) != DB_OK)
			goto out;
	}
	res->rows_per_s = (double)n * 1e9 / (double)(stats_now_ns() - t0);
	if (db_query_int(db, "SELECT count(*) FROM requests", &stored) == 0 && stored == (int64_t)n)
		rc = 0;
	else
		snprintf(err, sizeof(err), "stored %" PRId64 " rows of %zu", stored, n);
out:
	if (rc < 0)
		fprintf(stderr, "bench-writer: baseline: %s\n", *err ? err : db_errmsg(db));
	db_finalize(st);
	db_rollback(db);
	db_close(db);
	return rc;
}

/* ---- main ---- */

static long bench_env(const char *name, long def)
{
	const char *v = getenv(name);

	return v && *v ? atol(v) : def;
}

/* "SQLite 3.x" or "PostgreSQL 15.x" into out, from a store just created. 0 or -1. */
static int bench_store_name(const char *store, char *out, size_t len)
{
	struct db_stmt *st = NULL;
	struct db *db = NULL;
	char err[512];
	int rc = -1;

	if (bench_db_create(store) < 0)
		return -1;
	if (db_open(store, DB_READONLY, &db, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench-writer: %s\n", err);
		return -1;
	}
	if (db_prepare(db, db_kind(db) == DB_SQLITE ? "SELECT 'SQLite ' || sqlite_version()"
	               : "SELECT 'PostgreSQL ' || current_setting('server_version')", &st) == 0 &&
	    db_step(st) == DB_ROW && db_col_text(st, 0)) {
		snprintf(out, len, "%s", db_col_text(st, 0));
		rc = 0;
	} else {
		fprintf(stderr, "bench-writer: %s\n", db_errmsg(db));
	}
	db_finalize(st);
	db_close(db);
	return rc;
}

/* BENCH_END_USERS, counts separated by spaces or commas, into u[0..*nu) ("0" when unset).
 * 0, or -1 when it is not such a list of at most BENCH_END_USERS_MAX. */
static int bench_end_user_counts(long *u, int *nu)
{
	const char *v = getenv("BENCH_END_USERS");
	char *end;

	*nu = 0;
	if (!v || !*v)
		v = "0";
	for (;;) {
		v += strspn(v, " ,");
		if (!*v)
			return *nu ? 0 : -1;
		if (*nu == BENCH_END_USERS_MAX || *v < '0' || *v > '9')
			return -1;
		u[*nu] = strtol(v, &end, 10);
		if (u[*nu] < 0 || u[*nu] > 1000000000 || (*end && !strchr(" ,", *end)))
			return -1;
		(*nu)++;
		v = end;
	}
}

int main(void)
{
	long n = bench_env("BENCH_ROWS", 500000), rounds = bench_env("BENCH_ROUNDS", 3);
	long batch = bench_env("BENCH_BATCH", WRITER_BATCH_DEFAULT);
	long per_statement = bench_env("BENCH_STATEMENT_ROWS", WRITER_ROWS_DEFAULT);
	long keys = bench_env("BENCH_KEYS", 100), baseline = bench_env("BENCH_BASELINE", 1);
	long tags = bench_env("BENCH_TAGS", 0);
	long u[BENCH_END_USERS_MAX];
	struct bench_result best_w[BENCH_END_USERS_MAX] = { 0 }, best_b[BENCH_END_USERS_MAX] = { 0 };
	char dir[] = "/tmp/tally-bench-writer-XXXXXX", wpath[512] = "", bpath[512] = "",
	     name[128], label[64] = "";
	const char *store = getenv("BENCH_STORE");
	struct acct_row *rows = NULL;
	int64_t named = 0;
	double t;
	long i, r;
	int nu = 0, e, rc = 1;

	if (n <= 0 || rounds <= 0 || batch <= 0 || batch > WRITER_BATCH_MAX ||
	    per_statement <= 0 || per_statement > WRITER_ROWS_MAX ||
	    (per_statement & (per_statement - 1)) || keys <= 0 || keys > 1000000 ||
	    tags < 0 || tags > TAGS_MAX ||
	    bench_end_user_counts(u, &nu) < 0 || !mkdtemp(dir)) {
		fprintf(stderr, "bench-writer: BENCH_ROWS, BENCH_ROUNDS > 0, BENCH_BATCH in 1..%d,"
		        " BENCH_STATEMENT_ROWS a power of two up to %d, BENCH_KEYS in 1..1000000,"
		        " BENCH_TAGS in 0..%d, BENCH_END_USERS up to %d counts; or no temporary"
		        " directory\n",
		        WRITER_BATCH_MAX, WRITER_ROWS_MAX, TAGS_MAX, BENCH_END_USERS_MAX);
		return 1;
	}
	bench_keys = (unsigned)keys;
	bench_tags = (unsigned)tags;
	/* One PostgreSQL database serves both, emptied before each run. */
	if (store && *store && !db_is_postgres(store)) {
		fprintf(stderr, "bench-writer: BENCH_STORE must be a postgresql:// URL\n");
		goto out;
	}
	if (store && *store) {
		snprintf(wpath, sizeof(wpath), "%s", store);
		snprintf(bpath, sizeof(bpath), "%s", store);
	} else {
		snprintf(wpath, sizeof(wpath), "%s/writer.db", dir);
		snprintf(bpath, sizeof(bpath), "%s/baseline.db", dir);
	}
	if (bench_store_name(wpath, name, sizeof(name)) < 0)
		goto out;
	rows = malloc((size_t)n * sizeof(*rows));
	if (!rows) {
		fprintf(stderr, "bench-writer: out of memory\n");
		goto out;
	}
	t = bench_now_s();
	for (i = 0; i < n; i++)
		bench_row((uint64_t)i, &rows[i]);
	printf("%ld rows (%.1f s to generate), batch %ld, %ld rows per INSERT, %ld keys, %ld tags"
	       " a row, %s, %s\n", n, bench_now_s() - t, batch, per_statement, keys, tags, name,
	       db_is_postgres(wpath) ? "BENCH_STORE" : dir);
	for (r = 0; r < rounds; r++) {
		for (e = 0; e < nu; e++) {
			struct bench_result w = { 0 }, b = { 0 };

			named = bench_end_users(rows, (size_t)n, u[e]);
			if (nu > 1 || u[0])
				snprintf(label, sizeof(label), ", end users %ld", u[e]);
			if (bench_writer(wpath, rows, (size_t)n, named, (int)batch, (int)per_statement,
			                 &w) < 0)
				goto out;
			bench_db_remove(wpath);
			if (baseline && bench_baseline(bpath, rows, (size_t)n, (int)batch, &b) < 0)
				goto out;
			bench_db_remove(bpath);
			printf("round %ld%s: writer %8.0f rows/s (%" PRIu64 " batches, commit p50 <= %.1f"
			       " ms, p99 <= %.1f ms, mean %.2f ms)", r + 1, label, w.rows_per_s,
			       w.batches, w.p50_ms, w.p99_ms, w.mean_ms);
			if (baseline)
				printf("  baseline %8.0f rows/s  ratio %.2f", b.rows_per_s,
				       w.rows_per_s / b.rows_per_s);
			printf("\n");
			fflush(stdout);
			if (w.rows_per_s > best_w[e].rows_per_s)
				best_w[e] = w;
			if (b.rows_per_s > best_b[e].rows_per_s)
				best_b[e] = b;
		}
	}
	printf("writer:   %8.0f rows/s (best of %ld; batch commit p50 <= %.1f ms, p99 <= %.1f ms)\n",
	       best_w[0].rows_per_s, rounds, best_w[0].p50_ms, best_w[0].p99_ms);
	if (baseline) {
		printf("baseline: %8.0f rows/s (best of %ld; single-row INSERT into requests)\n",
		       best_b[0].rows_per_s, rounds);
		printf("ratio writer/baseline: %.2f; writer / target (200000 rows/s): %.2fx\n",
		       best_w[0].rows_per_s / best_b[0].rows_per_s, best_w[0].rows_per_s / 200000.0);
	}
	for (e = 0; (nu > 1 || u[0]) && e < nu; e++) {
		printf("end users %ld: writer %8.0f rows/s (best of %ld), %.2fx of end users %ld;",
		       u[e], best_w[e].rows_per_s, rounds,
		       best_w[e].rows_per_s / best_w[0].rows_per_s, u[0]);
		if (baseline)
			printf(" baseline %8.0f rows/s;", best_b[e].rows_per_s);
		printf(" end_user_daily %" PRId64 " rows, %" PRId64 " bytes; index on requests' end"
		       " users %" PRId64 " bytes\n", best_w[e].eu_rows, best_w[e].eu_bytes,
		       best_w[e].eu_index_bytes);
	}
	printf("verified: requests = accounting.written = accounting.received = sum(usage_hourly"
	       ".requests) = %ld, accounting.dropped = 0, rows with an end user ="
	       " sum(end_user_daily.requests), rows with a key and tags x tags a row ="
	       " sum(tag_daily.requests) = sum(tag_total_daily.requests)\n", n);
	rc = 0;
out:
	free(rows);
	bench_db_remove(wpath);
	bench_db_remove(bpath);
	rmdir(dir);
	return rc;
}
