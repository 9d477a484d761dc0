/* Unit tests for spoa/writer.c against real stores: SQLite databases in a temporary
 * directory and, when TALLY_TEST_PG_URL names a PostgreSQL database (tests/test_unit.py
 * passes one of its private cluster), that database too, every case on each store
 * (those about SQLite's size cap on SQLite only): rows round-trip with their NULLs,
 * duplicates, exact rollups (team_model_daily's also as migration 019 back-fills
 * it), the node's accounting row, a database full under
 * max_db_pages (retry, give up, recover), a database locked by another connection, a
 * refused row, the drain on stop, writer_load_counters, one writer per node, and on
 * PostgreSQL a lost connection and a node taken over while its writer was away. The test thread plays the intake; the writer runs its
 * own thread. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "acct.h"
#include "counters.h"
#include "db.h"
#include "log.h"
#include "owner.h"
#include "queue.h"
#include "rollup.h"
#include "spill.h"
#include "stats.h"
#include "tmpdir.h"
#include "unit.h"
#include "writer.h"

#define T_HOUR_MS 3600000LL
#define T_BASE_MS 1750000000000LL   /* some time in 2025, in unix ms */

/* The PostgreSQL database of this pass, NULL on the SQLite pass. */
static const char *pg_url;

/* on_done calls, counted by rows and outcome (written on the writer thread). */
static atomic_llong done_committed, done_given_up;

static void on_done(void *arg, const struct acct_row *rows, size_t n, int committed)
{
	(void)arg;
	(void)rows;
	atomic_fetch_add(committed ? &done_committed : &done_given_up, (long long)n);
}

static void reset_counters(void)
{
	int i;

	counters_set(&(struct counters){ 0 });
	atomic_store(&stats.batches, 0);
	for (i = 0; i < STATS_ERR_COUNT; i++)
		atomic_store(&stats.errors[i], 0);
	atomic_store(&done_committed, 0);
	atomic_store(&done_given_up, 0);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Creates the store of a case and returns its name in path: on SQLite the database
 * name in the temporary directory, on PostgreSQL pg_url emptied and created again. */
static void db_create(const char *name, char *path, size_t size)
{
	char err[512];
	struct db *db = NULL;

	snprintf(path, size, "%s", pg_url ? pg_url : tmpdir_file(name));
	if (db_open(path, DB_CREATE, &db, err, sizeof(err)) < 0)
		fprintf(stderr, "%s\n", err);
	if (db && pg_url) {
		if (db_exec(db, "DROP SCHEMA public CASCADE; CREATE SCHEMA public", err,
		            sizeof(err)) < 0)
			fprintf(stderr, "%s\n", err);
		db_close(db);
		db = NULL;
		if (db_open(path, DB_CREATE, &db, err, sizeof(err)) < 0)
			fprintf(stderr, "%s\n", err);
	}
	CHECK(db != NULL);
	db_close(db);
}

static struct db *db_reader(const char *path)
{
	char err[512];
	struct db *db = NULL;

	if (db_open(path, DB_READWRITE, &db, err, sizeof(err)) < 0)
		fprintf(stderr, "%s\n", err);
	return db;
}

static int64_t q_int(struct db *db, const char *sql)
{
	struct db_stmt *st = NULL;
	int64_t v = -12345;

	if (!db)
		return v;
	if (db_prepare(db, sql, &st) < 0)
		fprintf(stderr, "%s: %s\n", sql, db_errmsg(db));
	else if (db_step(st) == DB_ROW)
		v = db_col_int(st, 0);
	else
		fprintf(stderr, "%s: %s\n", sql, db_errmsg(db));
	db_finalize(st);
	return v;
}

/* Text of the first column of sql into buf ("(null)" for NULL). */
static const char *q_text(struct db *db, const char *sql, char *buf, size_t size)
{
	struct db_stmt *st = NULL;

	snprintf(buf, size, "(error)");
	if (db && db_prepare(db, sql, &st) == 0 && db_step(st) == DB_ROW) {
		const char *s = db_col_text(st, 0);

		snprintf(buf, size, "%s", s ? s : "(null)");
	} else if (db) {
		fprintf(stderr, "%s: %s\n", sql, db_errmsg(db));
	}
	db_finalize(st);
	return buf;
}

/* The aggregate joining text with a separator: SQLite's or PostgreSQL's name. */
static const char *agg(void)
{
	return pg_url ? "string_agg" : "group_concat";
}

/* 1 if cond holds, else 0, in SQL both stores sum (PostgreSQL adds no booleans). */
#define B(cond) "CASE WHEN " cond " THEN 1 ELSE 0 END"

static uint64_t rng_state = 88172645463325252ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* A row with every field known. */
static struct acct_row row_full(int64_t n)
{
	struct acct_row r;

	acct_row_init(&r);
	snprintf(r.request_id, sizeof(r.request_id), "req-%08" PRId64, n);
	r.key_id = 3;
	snprintf(r.model, sizeof(r.model), "gpt-4o-2024-08-06");
	snprintf(r.model_requested, sizeof(r.model_requested), "gpt-4o");
	snprintf(r.provider, sizeof(r.provider), "openai");
	snprintf(r.verdict, sizeof(r.verdict), "allow");
	snprintf(r.termination, sizeof(r.termination), "--");
	r.status = 200;
	r.stream = 1;
	r.prompt_tokens = 1000;
	r.completion_tokens = 250;
	r.cached_tokens = 400;
	r.cache_creation_tokens = 30;
	r.reasoning_tokens = 100;
	r.cost_micros = 4321;
	r.outcome = ACCT_COMPLETE;
	r.usage_source = ACCT_USAGE_STREAM;
	r.started_at_ms = T_BASE_MS + n;
	r.duration_ms = 1500;
	r.ttfb_ms = 120;
	r.bytes_in = 2048;
	r.bytes_out = 8192;
	return r;
}

/* A row with everything unknown that may be. */
static struct acct_row row_empty(int64_t n)
{
	struct acct_row r;

	acct_row_init(&r);
	snprintf(r.request_id, sizeof(r.request_id), "none-%08" PRId64, n);
	r.outcome = ACCT_GATEWAY_REJECTED;
	r.usage_source = ACCT_USAGE_NONE;
	r.started_at_ms = T_BASE_MS + n;
	return r;
}

/* A varied row: 4 hours, 4 keys (and none), 4 models (and none), NULLs mixed in. */
static struct acct_row row_random(int64_t n)
{
	static const char *const models[] = { "", "gpt-4o", "claude-sonnet-4", "llama3.1:8b",
	                                      "gpt-4o-mini" };
	struct acct_row r = row_full(n);
	uint64_t x = rng();

	r.key_id = (int64_t)(x % 6) - 1;
	if (r.key_id == 0)
		r.key_id = ACCT_NONE;
	snprintf(r.model, sizeof(r.model), "%s", models[(x >> 8) % 5]);
	r.started_at_ms = T_BASE_MS + (int64_t)((x >> 16) % 4) * T_HOUR_MS + (int64_t)((x >> 20) % 1000);
	r.outcome = (enum acct_outcome)((x >> 32) % ACCT_OUTCOME_COUNT);
	r.prompt_tokens = (x >> 36) % 7 ? (int64_t)((x >> 40) % 5000) : ACCT_NONE;
	r.completion_tokens = (x >> 36) % 5 ? (int64_t)((x >> 44) % 2000) : ACCT_NONE;
	r.cached_tokens = (x >> 48) % 3 ? ACCT_NONE : 17;
	r.cache_creation_tokens = (x >> 50) % 4 ? ACCT_NONE : 5;
	r.reasoning_tokens = (x >> 52) % 2 ? ACCT_NONE : 9;
	/* As acct_price: unpriced only when some usage is known. */
	r.unpriced = (x >> 54) % 5 == 0 && (r.prompt_tokens >= 0 || r.completion_tokens >= 0);
	r.cost_micros = r.unpriced ? ACCT_NONE : (int64_t)((x >> 56) % 100);
	snprintf(r.provider, sizeof(r.provider), "%s", (x >> 60) % 3 ? "openai" : "");
	r.stream = (int)((x >> 4) % 3) - 1 ? (int)((x >> 4) % 3) - 1 : ACCT_NONE;
	/* Up to 111 s, so that every latency bucket, and bounds themselves, are hit. */
	r.duration_ms = (x >> 58) % 3 ? (int64_t)((x >> 24) % 3000) * ((x >> 62) ? 1 : 37)
	                              : ACCT_NONE;
	/* Audio and web search on some, each its own value (every rollup's column apart). */
	r.audio_input_tokens = (x >> 3) % 3 ? ACCT_NONE : (int64_t)((x >> 9) % 500);
	r.audio_output_tokens = (x >> 5) % 4 ? ACCT_NONE : 300 + (int64_t)((x >> 17) % 300);
	r.web_search_calls = (x >> 11) % 5 ? ACCT_NONE : 1 + (int64_t)((x >> 25) % 4);
	/* Some rows charged an estimate, some of those unpriced. */
	if ((x >> 12) % 4 == 0) {
		r.estimated_tokens = (int64_t)((x >> 40) % 4096) + 1;
		r.estimated_cost_micros = (x >> 14) % 3 ? (int64_t)((x >> 44) % 900) : ACCT_NONE;
	}
	/* Two rows in three name one of 7 end users, with and without a key. */
	if ((x >> 6) % 3)
		snprintf(r.end_user, sizeof(r.end_user), "%s-%d", (x >> 7) % 2 ? "u" : "U",
		         (int)((x >> 10) % 7));
	/* Seven rows in eight carry 1 to 3 of six tags, in canonical order. */
	if ((x >> 16) % 8) {
		int m = (int)((x >> 16) % 8);

		snprintf(r.tags, sizeof(r.tags), "%s%s%s%s%s", m & 1 ? ((x >> 19) % 2 ? "a=1" : "a=2") : "",
		         m & 1 && m & 6 ? "," : "", m & 2 ? "b=x" : "", m & 2 && m & 4 ? "," : "",
		         m & 4 ? ((x >> 21) % 3 ? "c=y" : "c=z") : "");
	}
	return r;
}

/* What the intake does: count, push, count the drop. Returns 0 if queued. */
static int intake(struct queue *q, const struct acct_row *r)
{
	counters_receive();
	if (queue_push(q, r) == 0)
		return 0;
	counters_drop(1);
	return -1;
}

static struct writer *start(const char *path, struct queue *q, int batch_max, int retry_ms,
                            int64_t max_pages)
{
	struct writer_config cfg = { .db_path = path, .queue = q, .batch_max = batch_max,
	                             .retry_ms = retry_ms, .max_db_pages = max_pages,
	                             .on_done = on_done };
	char err[512] = "";
	struct writer *w = writer_start(&cfg, err, sizeof(err));

	if (!w)
		fprintf(stderr, "writer_start: %s\n", err);
	CHECK(w != NULL);
	return w;
}

/* The node's accounting row (the writer's default node, the only one) equals the
 * in-memory totals, and balances. */
#define NODE_ROW " FROM accounting WHERE node = '" WRITER_NODE_DEFAULT "'"
static void check_accounting(struct db *db)
{
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM accounting"), 1);
	CHECK_EQ_INT(q_int(db, "SELECT received" NODE_ROW), counters_now().received);
	CHECK_EQ_INT(q_int(db, "SELECT written" NODE_ROW), counters_now().written);
	CHECK_EQ_INT(q_int(db, "SELECT dropped" NODE_ROW), counters_now().dropped);
	CHECK_EQ_INT(q_int(db, "SELECT duplicates" NODE_ROW), counters_now().duplicates);
	CHECK_EQ_INT(q_int(db, "SELECT timed_out" NODE_ROW), counters_now().timed_out);
	CHECK_EQ_INT(q_int(db, "SELECT unpriced" NODE_ROW), counters_now().unpriced);
	CHECK_EQ_INT(q_int(db, "SELECT " B("received = written + dropped") NODE_ROW), 1);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests"), counters_now().written);
}

static void test_roundtrip(void)
{
	struct queue *q = queue_new(16);
	struct acct_row full = row_full(1), empty = row_empty(2);
	char path[512], buf[256], sql[1024];
	struct writer *w;
	struct db *db;

	reset_counters();
	db_create("roundtrip.db", path, sizeof(path));
	w = start(path, q, 0, 0, 0);
	if (!w)
		goto out;
	full.estimated_tokens = 4096;
	full.estimated_cost_micros = 2458;
	CHECK_EQ_INT(intake(q, &full), 0);
	CHECK_EQ_INT(intake(q, &empty), 0);
	writer_stop(w);
	db = db_reader(path);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests"), 2);
	CHECK_EQ_STR(q_text(db, "SELECT estimated_tokens || ',' || estimated_cost_micros"
	                        " FROM requests WHERE request_id = 'req-00000001'", buf, sizeof(buf)),
	             "4096,2458");
	CHECK_EQ_INT(q_int(db, "SELECT " B("estimated_tokens IS NULL") " + "
	                       B("estimated_cost_micros IS NULL")
	                       " FROM requests WHERE request_id = 'none-00000002'"), 2);
	snprintf(sql, sizeof(sql), "SELECT %s(estimated || ',' || estimated_tokens || ','"
	         " || estimated_cost_micros, ';') FROM (SELECT * FROM model_daily ORDER BY model)"
	         " AS t", agg());
	CHECK_EQ_STR(q_text(db, sql, buf, sizeof(buf)), "0,0,0;1,4096,2458");
	CHECK_EQ_STR(q_text(db, "SELECT request_id ||'|'|| key_id ||'|'|| model ||'|'|| model_requested"
	                        " ||'|'|| provider ||'|'|| verdict ||'|'|| status ||'|'|| stream ||'|'||"
	                        " prompt_tokens ||'|'|| completion_tokens ||'|'|| cached_tokens ||'|'||"
	                        " cache_creation_tokens ||'|'|| reasoning_tokens ||'|'|| cost_micros"
	                        " ||'|'|| outcome ||'|'|| usage_source ||'|'|| termination ||'|'||"
	                        " started_at ||'|'|| duration_ms ||'|'|| ttfb_ms ||'|'|| bytes_in"
	                        " ||'|'|| bytes_out FROM requests WHERE request_id = 'req-00000001'",
	                    buf, sizeof(buf)),
	             "req-00000001|3|gpt-4o-2024-08-06|gpt-4o|openai|allow|200|1|1000|250|400|30|100|"
	             "4321|complete|stream|--|1750000000001|1500|120|2048|8192");
	/* Unknown values are NULL, not 0 or ''. */
	CHECK_EQ_INT(q_int(db, "SELECT " B("key_id IS NULL") " + " B("model IS NULL") " + "
	                       B("model_requested IS NULL") " + " B("provider IS NULL") " + "
	                       B("verdict IS NULL") " + " B("status IS NULL") " + "
	                       B("stream IS NULL") " + " B("prompt_tokens IS NULL") " + "
	                       B("completion_tokens IS NULL") " + " B("cached_tokens IS NULL") " + "
	                       B("cache_creation_tokens IS NULL") " + "
	                       B("reasoning_tokens IS NULL") " + " B("cost_micros IS NULL") " + "
	                       B("termination IS NULL") " + " B("duration_ms IS NULL") " + "
	                       B("ttfb_ms IS NULL") " + " B("bytes_in IS NULL") " + "
	                       B("bytes_out IS NULL")
	                       " FROM requests WHERE request_id = 'none-00000002'"), 18);
	CHECK_EQ_STR(q_text(db, "SELECT outcome || ' ' || usage_source || ' ' || started_at"
	                        " FROM requests WHERE request_id = 'none-00000002'", buf, sizeof(buf)),
	             "gateway_rejected none 1750000000002");
	/* Rollups: a keyless, modelless row goes to key 0, model ''. */
	snprintf(sql, sizeof(sql), "SELECT %s(hour || ',' || key_id || ',' || model || ','"
	         " || provider || ',' || requests || ',' || errors || ',' || prompt_tokens || ','"
	         " || cost_micros || ',' || duration_ms_sum, ';')"
	         " FROM (SELECT * FROM usage_hourly ORDER BY key_id) AS t", agg());
	CHECK_EQ_STR(q_text(db, sql, buf, sizeof(buf)),
	             "1749999600,0,,,1,1,0,0,0;1749999600,3,gpt-4o-2024-08-06,openai,1,0,1000,4321,1500");
	CHECK_EQ_INT(counters_now().written, 2);
	CHECK_EQ_INT(atomic_load(&done_committed), 2);
	CHECK(stats_get(&stats.batches) >= 1);
	CHECK(stats_get(&stats.batch_latency.count) >= 1);
	check_accounting(db);
	db_close(db);
out:
	queue_free(q);
}

static void test_duplicates(void)
{
	struct queue *q = queue_new(16);
	struct acct_row a = row_full(1), b = row_full(2), a2 = row_full(1), c = row_full(3);
	uint64_t errors = atomic_load(&stats.errors[STATS_ERR_WRITE_OTHER]);
	char path[512];
	struct writer *w;
	struct db *db;

	reset_counters();
	db_create("dup.db", path, sizeof(path));
	a2.prompt_tokens = 999999;   /* a later record for the same transaction */
	w = start(path, q, 0, 0, 0);
	if (!w)
		goto out;
	/* Within one batch, then in a later one: alone, then in one statement with a new
	 * row (SQLite's counted INSERT falls short and the batch is made again, returned). */
	intake(q, &a);
	intake(q, &b);
	intake(q, &a2);
	sleep_ms(100);
	intake(q, &a2);
	sleep_ms(100);
	intake(q, &c);
	intake(q, &a2);
	writer_stop(w);
	db = db_reader(path);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests"), 3);
	CHECK_EQ_INT(q_int(db, "SELECT prompt_tokens FROM requests WHERE request_id = 'req-00000001'"),
	             1000);
	CHECK_EQ_INT(counters_now().duplicates, 3);
	CHECK_EQ_INT(counters_now().received, 3);
	CHECK_EQ_INT(counters_now().written, 3);
	CHECK_EQ_INT(q_int(db, "SELECT sum(requests) FROM usage_hourly"), 3);
	CHECK_EQ_INT(q_int(db, "SELECT sum(prompt_tokens) FROM usage_hourly"), 3000);
	CHECK_EQ_INT(q_int(db, "SELECT sum(requests) FROM total_hourly"), 3);
	CHECK_EQ_INT(atomic_load(&done_committed), 6);
	/* Falling short is no failure. */
	CHECK_EQ_INT(atomic_load(&stats.errors[STATS_ERR_WRITE_OTHER]), errors);
	check_accounting(db);
	db_close(db);
out:
	queue_free(q);
}

/* A create's stored response is kept with its row; an id kept already keeps its first
 * key; a duplicate row adds nothing. */
static void test_stored_responses(void)
{
	struct queue *q = queue_new(16);
	struct acct_row a = row_full(1), b = row_full(2), c = row_full(3), a2 = row_full(1);
	char path[512];
	struct writer *w;
	struct db *db;

	reset_counters();
	db_create("stored.db", path, sizeof(path));
	snprintf(a.response_id, sizeof(a.response_id), "resp_a");
	a.started_at_ms = b.started_at_ms = c.started_at_ms = (int64_t)time(NULL) * 1000;
	a2 = a;
	snprintf(b.response_id, sizeof(b.response_id), "resp_a");   /* another key's claim */
	b.key_id = a.key_id + 1;
	snprintf(c.response_id, sizeof(c.response_id), "resp_c");
	c.key_id = ACCT_NONE;                                       /* no key: nothing kept */
	w = start(path, q, 0, 0, 0);
	if (!w)
		goto out;
	intake(q, &a);
	intake(q, &b);
	intake(q, &c);
	intake(q, &a2);
	writer_stop(w);
	db = db_reader(path);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests"), 3);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM stored_responses"), 1);
	CHECK_EQ_INT(q_int(db, "SELECT " B("key_id = (SELECT key_id FROM requests WHERE"
	                       " request_id = 'req-00000001')") " FROM stored_responses WHERE"
	                       " response_id = 'resp_a' AND request_id = 'req-00000001'"
	                       " AND model = 'gpt-4o'"), 1);
	check_accounting(db);
	db_close(db);
out:
	queue_free(q);
}

/* Stored responses past the provider's retention go at the writer's first pass; newer
 * ones stay. */
static void test_stored_responses_pruned(void)
{
	struct queue *q = queue_new(16);
	char path[512], sql[256], err[256];
	struct writer *w;
	struct db *db;

	reset_counters();
	db_create("prune.db", path, sizeof(path));
	CHECK_EQ_INT(db_open(path, DB_READWRITE, &db, err, sizeof(err)), 0);
	snprintf(sql, sizeof(sql), "INSERT INTO stored_responses VALUES ('resp_old', 1, 'm', 'r1',"
	         " %lld), ('resp_new', 1, 'm', 'r2', %lld)",
	         (long long)time(NULL) - OWNER_RETENTION_S - 10, (long long)time(NULL) - 60);
	CHECK_EQ_INT(db_exec(db, sql, err, sizeof(err)), 0);
	db_close(db);
	w = start(path, q, 0, 0, 0);
	if (!w)
		goto out;
	sleep_ms(400);                       /* an idle tick (250 ms) at least */
	writer_stop(w);
	db = db_reader(path);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM stored_responses WHERE response_id = 'resp_old'"), 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM stored_responses WHERE response_id = 'resp_new'"), 1);
	db_close(db);
out:
	queue_free(q);
}

/* Rollups agree with the rows, group by group, whatever the batching. */

/* Prints up to 20 rows of sql, every column (a failed comparison's rows). */
static void print_rows(struct db *db, const char *label, const char *sql)
{
	struct db_stmt *st = NULL;
	int i, n = 0;

	if (db_prepare(db, sql, &st) < 0) {
		fprintf(stderr, "%s: %s\n", sql, db_errmsg(db));
		return;
	}
	while (n++ < 20 && db_step(st) == DB_ROW) {
		fprintf(stderr, "%s:", label);
		for (i = 0; i < db_col_count(st); i++) {
			const char *v = db_col_text(st, i);

			fprintf(stderr, " %s=%s", db_col_name(st, i), v ? v : "NULL");
		}
		fprintf(stderr, "\n");
	}
	db_finalize(st);
}

/* The statement of migration version (sql/migrations/NNN.sql, or
 * sql/pg/migrations/NNN.sql on PostgreSQL, read from the repository the test runs in)
 * that back-fills table: from "INSERT INTO table" to its ';'. Returns it (free it), or
 * NULL with a message. */
static char *migration_backfill(int version, const char *table)
{
	char path[64], start[96];
	char *text = NULL, *sql = NULL, *from, *end;
	FILE *f;
	long size;

	snprintf(path, sizeof(path), "sql/%smigrations/%03d.sql", pg_url ? "pg/" : "", version);
	snprintf(start, sizeof(start), "INSERT INTO %s ", table);
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "%s: cannot open it (run the test from the repository's root)\n",
		        path);
		return NULL;
	}
	if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (text = calloc(1, (size_t)size + 1)) != NULL &&
	    fread(text, 1, (size_t)size, f) == (size_t)size) {
		from = strstr(text, start);
		end = from ? strchr(from, ';') : NULL;
		/* one such statement, the file's only back-fill of the table */
		if (end && !strstr(end, start))
			sql = strndup(from, (size_t)(end - from));
	}
	if (!sql)
		fprintf(stderr, "%s: no one statement starting \"%s\" and ending ';'\n", path, start);
	free(text);
	fclose(f);
	return sql;
}

/* The rollups' summed columns into cols (", requests, errors, ...") and their sums into
 * sums (", sum(requests), ..."), for statements comparing rollups column by column. */
static void rollup_lists(char *cols, size_t ncols, char *sums, size_t nsums)
{
	char col[32];
	size_t nc = 0, ns = 0;
	int c;

	for (c = 0; c < ROLLUP_SUMS; c++) {
		rollup_column(c, col, sizeof(col));
		nc += (size_t)snprintf(cols + nc, ncols - nc, ", %s", col);
		ns += (size_t)snprintf(sums + ns, nsums - ns, ", sum(%s)", col);
	}
}

/* tag_total_daily: the writer's rows (per tag and day) are tag_daily's summed over
 * keys, every column, both ways, and migration 020's back-fill from that tag_daily makes
 * exactly the same table, row for row. */
static void check_tag_totals(struct db *db)
{
	char sql[4400], cols[1600], sums[2400], col[32], err[512];
	char *backfill = migration_backfill(20, "tag_total_daily");
	int64_t rows;
	int c, failed = unit_failed_checks;

	rollup_lists(cols, sizeof(cols), sums, sizeof(sums));
	rows = q_int(db, "SELECT count(*) FROM tag_total_daily");
	CHECK(rows > 0);
	/* every column has something to tell it from the others */
	for (c = 0; c < ROLLUP_SUMS; c++) {
		rollup_column(c, col, sizeof(col));
		if (strncmp(col, "lat_", 4) == 0 || strcmp(col, "duration_ms_sum") == 0)
			continue;
		snprintf(sql, sizeof(sql), "SELECT count(DISTINCT %s) FROM tag_total_daily", col);
		if (q_int(db, sql) < 2)
			fprintf(stderr, "tag_total_daily.%s: one value in every row\n", col);
		CHECK(q_int(db, sql) >= 2);
	}
	CHECK_EQ_INT(rows, q_int(db, "SELECT count(*) FROM (SELECT DISTINCT day, tag FROM"
	                             " tag_daily) AS d"));
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT day, tag%s FROM tag_daily GROUP"
	         " BY 1, 2 EXCEPT SELECT day, tag%s FROM tag_total_daily) AS d", sums, cols);
	CHECK_EQ_INT(q_int(db, sql), 0);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT day, tag%s FROM tag_total_daily"
	         " EXCEPT SELECT day, tag%s FROM tag_daily GROUP BY 1, 2) AS d", cols, sums);
	CHECK_EQ_INT(q_int(db, sql), 0);
	CHECK(backfill != NULL);
	if (!backfill)
		return;
	CHECK_EQ_INT(db_exec(db, "CREATE TABLE ttd_writer AS SELECT * FROM tag_total_daily;"
	                         " DELETE FROM tag_total_daily", err, sizeof(err)), 0);
	if (db_exec(db, backfill, err, sizeof(err)) < 0)
		fprintf(stderr, "migration 020's back-fill: %s\n", err);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM tag_total_daily"), rows);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM (SELECT * FROM ttd_writer EXCEPT"
	                       " SELECT * FROM tag_total_daily) AS d"), 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM (SELECT * FROM tag_total_daily EXCEPT"
	                       " SELECT * FROM ttd_writer) AS d"), 0);
	if (unit_failed_checks != failed)
		print_rows(db, "writer", "SELECT * FROM ttd_writer EXCEPT SELECT * FROM tag_total_daily");
	CHECK_EQ_INT(db_exec(db, "DROP TABLE ttd_writer", err, sizeof(err)), 0);
	free(backfill);
}

/* Drops the rollup columns of schema version 7 from prefix table. */
static int test_drop_classes(struct db *db, const char *prefix, const char *table)
{
	char sql[512], err[256];

	snprintf(sql, sizeof(sql), "ALTER TABLE %s%s DROP COLUMN audio_input_tokens;"
	         " ALTER TABLE %s%s DROP COLUMN audio_output_tokens;"
	         " ALTER TABLE %s%s DROP COLUMN web_search_calls", prefix, table, prefix, table,
	         prefix, table);
	return db_exec(db, sql, err, sizeof(err));
}
static void test_rollups(void)
{
	enum { N = 6000 };
	struct queue *q = queue_new(N);
	int64_t prompt = 0, cost = 0, unpriced = 0, errors = 0, no_record = 0;
	char path[512], err[512];
	struct writer *w;
	struct db *db;
	int i;

	reset_counters();
	db_create("rollup.db", path, sizeof(path));
	w = start(path, q, 97, 0, 0);
	if (!w)
		goto out;
	for (i = 0; i < N; i++) {
		struct acct_row r = row_random(i);

		prompt += r.prompt_tokens > 0 ? r.prompt_tokens : 0;
		cost += r.cost_micros > 0 ? r.cost_micros : 0;
		unpriced += r.unpriced;
		errors += r.outcome != ACCT_COMPLETE;
		no_record += r.outcome == ACCT_NO_RECORD;
		CHECK_EQ_INT(intake(q, &r), 0);
		if (i % 1000 == 0)
			sleep_ms(5);
	}
	writer_stop(w);
	db = db_reader(path);
	CHECK_EQ_INT(q_int(db, "SELECT sum(requests) FROM usage_hourly"), N);
	CHECK_EQ_INT(q_int(db, "SELECT sum(prompt_tokens) FROM usage_hourly"), prompt);
	CHECK_EQ_INT(q_int(db, "SELECT sum(cost_micros) FROM usage_hourly"), cost);
	CHECK_EQ_INT(q_int(db, "SELECT sum(unpriced) FROM usage_hourly"), unpriced);
	CHECK_EQ_INT(q_int(db, "SELECT sum(errors) FROM usage_hourly"), errors);
	/* 4 hours x 5 keys (none, 1-4) x 5 models x 2 providers, every group hit. */
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM usage_hourly"), 4 * 5 * 5 * 2);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM usage_hourly WHERE hour % 3600 <> 0"), 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM usage_daily WHERE day % 86400 <> 0"), 0);
	CHECK_EQ_INT(q_int(db, "SELECT sum(requests) FROM usage_daily"), N);
	CHECK_EQ_INT(q_int(db, "SELECT sum(lat_gt_60000) FROM usage_daily"),
	             q_int(db, "SELECT count(*) FROM requests WHERE duration_ms > 60000"));
	CHECK(q_int(db, "SELECT sum(lat_gt_60000) FROM usage_daily") > 0);
	/* Group by group, every rollup: what the writer kept equals what the migration to
	 * schema 4 rebuilds from the raw rows, and its estimates (schema 5) what a GROUP BY of
	 * the raw rows sums. */
	static const struct { const char *table, *unit, *period, *key, *cols; } rollups[] = {
		{ "usage_hourly", "hour", "started_at / 3600000 * 3600", "coalesce(key_id, 0), ",
		  "key_id, " },
		{ "usage_daily", "day", "started_at / 86400000 * 86400", "coalesce(key_id, 0), ",
		  "key_id, " },
		{ "model_hourly", "hour", "started_at / 3600000 * 3600", "", "" },
		{ "model_daily", "day", "started_at / 86400000 * 86400", "", "" },
	};
	/* The rollups without the model: each sum the raw rows' and that of the rollup with
	 * the model (source) migration 8 makes it from. */
	static const struct { const char *table, *unit, *period, *source, *key; } coarse[] = {
		{ "key_hourly", "hour", "started_at / 3600000 * 3600", "usage_hourly", "key_id" },
		{ "key_daily", "day", "started_at / 86400000 * 86400", "usage_daily", "key_id" },
		{ "total_hourly", "hour", "started_at / 3600000 * 3600", "model_hourly", "0" },
	};
	static const char *const rolled[] = { "usage_hourly", "usage_daily", "model_hourly",
	                                      "model_daily", "key_hourly", "key_daily",
	                                      "total_hourly" };
	char cols[1600], sums[2400], check[4400];
	char sql[2048];
	size_t t;

	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM model_daily"), 5 * 2);
	CHECK_EQ_INT(q_int(db, "SELECT sum(requests) FROM model_hourly"), N);
	CHECK(q_int(db, "SELECT sum(estimated) FROM model_daily") > 0);
	for (t = 0; t < 4; t++) {
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT %s, %s coalesce(model, ''),"
		         " coalesce(provider, ''), count(estimated_tokens), coalesce(sum(estimated_tokens),"
		         " 0), coalesce(sum(estimated_cost_micros), 0) FROM requests"
		         " GROUP BY 1, 2, 3%s EXCEPT SELECT * FROM (SELECT %s, %smodel, provider,"
		         " estimated, estimated_tokens, estimated_cost_micros FROM %s) AS r) AS d",
		         rollups[t].period, rollups[t].key, rollups[t].key[0] ? ", 4" : "",
		         rollups[t].unit, rollups[t].cols, rollups[t].table);
		CHECK_EQ_INT(q_int(db, sql), 0);
	}
	/* 4 hours and 1 day x 5 keys (none, 1-4); 4 hours. */
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM key_hourly"), 4 * 5);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM key_daily"), 5);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM total_hourly"), 4);
	rollup_lists(cols, sizeof(cols), sums, sizeof(sums));
	for (t = 0; t < sizeof(coarse) / sizeof(coarse[0]); t++) {
		/* total_hourly's "key" is the constant 0 on both sides */
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT %s, coalesce(%s, 0),"
		         " count(*), sum(" B("outcome <> 'complete'") "), sum(" B("stream = 1") "),"
		         " coalesce(sum(" B("prompt_tokens > 0") " * prompt_tokens), 0),"
		         " coalesce(sum(" B("cost_micros > 0") " * cost_micros), 0),"
		         " coalesce(sum(" B("duration_ms > 0") " * duration_ms), 0),"
		         " sum(" B("duration_ms > 60000") "),"
		         " count(estimated_tokens), coalesce(sum(estimated_cost_micros), 0)"
		         " FROM requests GROUP BY 1, 2 EXCEPT SELECT %s, %s, requests, errors,"
		         " streams, prompt_tokens, cost_micros, duration_ms_sum, lat_gt_60000,"
		         " estimated, estimated_cost_micros FROM %s) AS d", coarse[t].period,
		         coarse[t].key, coarse[t].unit, coarse[t].key, coarse[t].table);
		CHECK_EQ_INT(q_int(db, sql), 0);
		snprintf(sql, sizeof(sql), "SELECT sum(unpriced) FROM %s", coarse[t].table);
		CHECK_EQ_INT(q_int(db, sql), unpriced);
		snprintf(check, sizeof(check), "SELECT count(*) FROM (SELECT %s, %s%s FROM %s"
		         " GROUP BY 1, 2 EXCEPT SELECT %s, %s%s FROM %s) AS d", coarse[t].unit,
		         coarse[t].key, sums, coarse[t].source, coarse[t].unit, coarse[t].key, cols,
		         coarse[t].table);
		CHECK_EQ_INT(q_int(db, check), 0);
		snprintf(check, sizeof(check), "SELECT count(*) FROM (SELECT %s, %s%s FROM %s"
		         " EXCEPT SELECT %s, %s%s FROM %s GROUP BY 1, 2) AS d", coarse[t].unit,
		         coarse[t].key, cols, coarse[t].table, coarse[t].unit, coarse[t].key, sums,
		         coarse[t].source);
		CHECK_EQ_INT(q_int(db, check), 0);
	}
	/* Per key and end user by day: the rows with both, group by group, both ways. */
	static const char eu_raw[] = "SELECT started_at / 86400000 * 86400, key_id, end_user,"
	                             " count(*), coalesce(sum(" B("cost_micros > 0") " * cost_micros), 0),"
	                             " coalesce(sum(" B("prompt_tokens > 0") " * prompt_tokens), 0)"
	                             " FROM requests WHERE key_id IS NOT NULL AND end_user IS NOT NULL"
	                             " GROUP BY 1, 2, 3";
	static const char eu_kept[] = "SELECT day, key_id, end_user, requests, cost_micros,"
	                              " prompt_tokens FROM end_user_daily";
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM (%s EXCEPT %s) AS d", eu_raw, eu_kept);
	CHECK_EQ_INT(q_int(db, sql), 0);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM (%s EXCEPT %s) AS d", eu_kept, eu_raw);
	CHECK_EQ_INT(q_int(db, sql), 0);
	/* 1 day x 4 keys x 14 end users. */
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM end_user_daily"), 4 * 14);
	CHECK(q_int(db, "SELECT count(*) FROM requests WHERE key_id IS NULL AND end_user IS NOT NULL") > 0);
	/* Per tag and key by day: a row once per tag it carries, tag by tag, both ways. */
	{
		static const char *const tags[] = { "a=1", "a=2", "b=x", "c=y", "c=z" };
		int64_t groups = 0;

		for (t = 0; t < sizeof(tags) / sizeof(tags[0]); t++) {
			char raw[1024], kept[512];

			snprintf(raw, sizeof(raw), "SELECT started_at / 86400000 * 86400, key_id, count(*),"
			         " coalesce(sum(" B("cost_micros > 0") " * cost_micros), 0),"
			         " coalesce(sum(" B("prompt_tokens > 0") " * prompt_tokens), 0)"
			         " FROM requests WHERE key_id IS NOT NULL"
			         " AND ',' || tags || ',' LIKE '%%,%s,%%' GROUP BY 1, 2", tags[t]);
			snprintf(kept, sizeof(kept), "SELECT day, key_id, requests, cost_micros,"
			         " prompt_tokens FROM tag_daily WHERE tag = '%s'", tags[t]);
			snprintf(sql, sizeof(sql), "SELECT count(*) FROM (%s EXCEPT %s) AS d", raw, kept);
			CHECK_EQ_INT(q_int(db, sql), 0);
			snprintf(sql, sizeof(sql), "SELECT count(*) FROM (%s EXCEPT %s) AS d", kept, raw);
			CHECK_EQ_INT(q_int(db, sql), 0);
			snprintf(sql, sizeof(sql), "SELECT count(*) FROM tag_daily WHERE tag = '%s'", tags[t]);
			groups += q_int(db, sql);
		}
		/* 1 day x 4 keys x 5 tags, and nothing else. */
		CHECK_EQ_INT(groups, 4 * 5);
		CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM tag_daily"), 4 * 5);
		check_tag_totals(db);
	}
	CHECK_EQ_INT(counters_now().timed_out, no_record);
	CHECK_EQ_INT(counters_now().unpriced, unpriced);
	CHECK(stats_get(&stats.batches) >= N / 97);
	check_accounting(db);
	/* SQLite: back to schema 3 and up again (PostgreSQL's migrations start at 9). */
	if (!pg_url) {
		for (t = 0; t < sizeof(rolled) / sizeof(rolled[0]); t++) {
			snprintf(sql, sizeof(sql), "CREATE TABLE kept_%s AS SELECT * FROM %s", rolled[t],
			         rolled[t]);
			CHECK_EQ_INT(db_exec(db, sql, err, sizeof(err)), 0);
			snprintf(sql, sizeof(sql), "ALTER TABLE kept_%s DROP COLUMN estimated;"
			         " ALTER TABLE kept_%s DROP COLUMN estimated_tokens;"
			         " ALTER TABLE kept_%s DROP COLUMN estimated_cost_micros", rolled[t], rolled[t],
			         rolled[t]);
			CHECK_EQ_INT(db_exec(db, sql, err, sizeof(err)), 0);
			CHECK_EQ_INT(test_drop_classes(db, "kept_", rolled[t]), 0);
			CHECK_EQ_INT(test_drop_classes(db, "", rolled[t]), 0);
		}
		/* And back before version 7: prices in models, no classes. */
		CHECK_EQ_INT(db_exec(db, "DROP TABLE model_prices;"
		                         "ALTER TABLE models ADD COLUMN input_micros_per_mtok INTEGER;"
		                         "ALTER TABLE models ADD COLUMN output_micros_per_mtok INTEGER;"
		                         "ALTER TABLE models ADD COLUMN cached_micros_per_mtok INTEGER;"
		                         "ALTER TABLE models ADD COLUMN cache_write_micros_per_mtok INTEGER;"
		                         "ALTER TABLE keys DROP COLUMN service_tiers;"
		                         "ALTER TABLE keys DROP COLUMN server_tools;"
		                         "ALTER TABLE keys DROP COLUMN audio;"
		                         "ALTER TABLE keys DROP COLUMN cache_writes;"
		                         "DROP TRIGGER requests_tags_insert;"
		                         " DROP TRIGGER requests_tags_delete; DROP TABLE request_tags;"
		                         "ALTER TABLE keys DROP COLUMN budget_tz;"
		                         "ALTER TABLE teams DROP COLUMN budget_tz;"
		                         "DROP TABLE tag_total_daily;"
		                         "DROP TABLE team_model_daily; DROP TABLE model_budgets;"
		                         "DROP TABLE end_user_limits;"
		                         "DROP TABLE tag_daily; DROP TABLE tag_budgets;"
		                         " ALTER TABLE requests DROP COLUMN tags; ALTER TABLE keys DROP COLUMN tags;"
		                         " ALTER TABLE teams DROP COLUMN tags;"
		                         "DROP INDEX requests_end_user_started_at; ALTER TABLE requests DROP COLUMN end_user;"
		                         " ALTER TABLE keys DROP COLUMN end_users; DROP TABLE end_user_daily;"
		                         "DROP INDEX requests_team_started_at;"
		                         "ALTER TABLE requests DROP COLUMN team_id;"
		                         "ALTER TABLE keys DROP COLUMN team_id;"
		                         "DROP TABLE team_models; DROP TABLE teams;"
		                         "DROP TABLE team_hourly; DROP TABLE team_daily;"
		                         "ALTER TABLE requests DROP COLUMN cache_creation_1h_tokens;"
		                         "ALTER TABLE requests DROP COLUMN audio_input_tokens;"
		                         "ALTER TABLE requests DROP COLUMN audio_output_tokens;"
		                         "ALTER TABLE requests DROP COLUMN accepted_prediction_tokens;"
		                         "ALTER TABLE requests DROP COLUMN rejected_prediction_tokens;"
		                         "ALTER TABLE requests DROP COLUMN web_search_calls;"
		                         "ALTER TABLE requests DROP COLUMN service_tier;",
		                     err, sizeof(err)), 0);
		CHECK_EQ_INT(db_exec(db, "DROP TABLE stored_responses; DROP TABLE usage_daily; DROP TABLE model_hourly;"
		                         "DROP TABLE model_daily;"
		                         "DROP TABLE key_hourly; DROP TABLE key_daily; DROP TABLE total_hourly;"
		                         "DROP INDEX requests_model_started_at;"
		                         "ALTER TABLE requests DROP COLUMN estimated_tokens;"
		                         "ALTER TABLE requests DROP COLUMN estimated_cost_micros;"
		                         "ALTER TABLE requests DROP COLUMN model_reported;"
		                         "ALTER TABLE requests DROP COLUMN priced_fallback;"
		                         "ALTER TABLE models DROP COLUMN max_output;"
		                         "CREATE TABLE accounting_v3 (id INTEGER PRIMARY KEY CHECK"
		                         " (id = 1), received INTEGER NOT NULL, written INTEGER NOT NULL,"
		                         " dropped INTEGER NOT NULL, duplicates INTEGER NOT NULL,"
		                         " timed_out INTEGER NOT NULL, unpriced INTEGER NOT NULL,"
		                         " updated_at INTEGER NOT NULL);"
		                         "INSERT INTO accounting_v3 SELECT 1, received, written, dropped,"
		                         " duplicates, timed_out, unpriced, updated_at FROM accounting"
		                         " WHERE node = 'local';"
		                         "DROP TABLE accounting;"
		                         "ALTER TABLE accounting_v3 RENAME TO accounting;"
		                         "PRAGMA user_version = 3;",
		                     err, sizeof(err)), 0);
		db_close(db);
		db = NULL;
		CHECK_EQ_INT(db_open(path, DB_CREATE, &db, err, sizeof(err)), 0);
		/* Migration 8 rebuilds the rollups without the model from those with it: the same
		 * rows the writer kept. */
		/* Indexes of 14 hold columns dropped below. */
		CHECK_EQ_INT(db_exec(db, "DROP INDEX key_hourly_key_hour;"
		                         " DROP INDEX IF EXISTS team_hourly_team_hour", err, sizeof(err)), 0);
		for (t = 0; t < sizeof(rolled) / sizeof(rolled[0]); t++) {
			const char *rt = rolled[t];

			/* Migrations 5 and 7 added the estimates and the classes back at 0: compared
			 * without them. */
			snprintf(sql, sizeof(sql), "ALTER TABLE %s DROP COLUMN estimated;"
			         " ALTER TABLE %s DROP COLUMN estimated_tokens;"
			         " ALTER TABLE %s DROP COLUMN estimated_cost_micros", rt, rt, rt);
			CHECK_EQ_INT(db_exec(db, sql, err, sizeof(err)), 0);
			CHECK_EQ_INT(test_drop_classes(db, "", rt), 0);
			snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT * FROM kept_%s EXCEPT"
			         " SELECT * FROM %s)", rt, rt);
			CHECK_EQ_INT(q_int(db, sql), 0);
			snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT * FROM %s EXCEPT"
			         " SELECT * FROM kept_%s)", rt, rt);
			CHECK_EQ_INT(q_int(db, sql), 0);
			snprintf(sql, sizeof(sql), "SELECT count(*) = (SELECT count(*) FROM kept_%s) FROM %s",
			         rt, rt);
			CHECK_EQ_INT(q_int(db, sql), 1);
		}
		/* Migration 9 keeps the counters as node 'local'. */
		check_accounting(db);
	}
	db_close(db);
out:
	queue_free(q);
}

/* A row of row_random's variety, over two days, under its key's team (keys 1 and 2 in
 * team 1, key 3 in team 2, key 4 in none; half the keyless rows in team 3), at one of
 * three providers (or none), streamed or not (or unknown), with the usage classes known
 * or not. */
static struct acct_row row_team(int64_t n)
{
	static const char *const providers[] = { "", "openai", "azure" };
	struct acct_row r = row_random(n);
	uint64_t x = rng();

	r.started_at_ms += (int64_t)(x % 2) * 24 * T_HOUR_MS;
	r.team_id = r.key_id == 1 || r.key_id == 2 ? 1 : r.key_id == 3 ? 2
	          : r.key_id < 0 && (x >> 1) % 2 ? 3 : ACCT_NONE;
	snprintf(r.provider, sizeof(r.provider), "%s", providers[(x >> 2) % 3]);
	r.stream = (int)((x >> 12) % 3) - 1;   /* unknown, 0 or 1 */
	/* As acct_price: no usage, no cost (nor unpriced). */
	if (r.prompt_tokens < 0 && r.completion_tokens < 0)
		r.cost_micros = ACCT_NONE;
	r.audio_input_tokens = (x >> 4) % 3 ? ACCT_NONE : (int64_t)((x >> 8) % 500);
	r.audio_output_tokens = (x >> 6) % 4 ? ACCT_NONE : (int64_t)((x >> 16) % 300);
	r.web_search_calls = (x >> 10) % 5 ? ACCT_NONE : (int64_t)((x >> 24) % 4);
	return r;
}

/* team_model_daily: the writer's rows (per day, team, model and provider, rows without
 * a team in none) add up to team_daily's, and migration 019's back-fill, run over the
 * same requests, makes exactly the same table, row for row: rows of teams and none,
 * with and without a key, several models and providers (and none), tokens and cost
 * NULL or known, unpriced and estimated rows, every latency bucket, its bounds and
 * none, streams, every outcome, two days and their boundary, a duplicate, batches
 * adding to groups that earlier ones made. */
static void test_team_model_daily(void)
{
	enum { N = 3000, BATCH = 61 };
	static const int64_t durations[] = { ACCT_NONE, 0, 25, 26, 50, 51, 100, 101, 60000,
	                                     60001, 111000 };
	struct queue *q = queue_new(N + 64);
	char path[512], err[512], sql[4400], cols[1600], sums[2400];
	const int64_t midnight = T_BASE_MS / 86400000 * 86400000 + 86400000;
	struct acct_row r;
	struct writer *w;
	struct db *db = NULL;
	char *backfill = NULL;
	size_t i;
	int64_t teamed = 0, rows;
	int failed;

	reset_counters();
	db_create("teammodel.db", path, sizeof(path));
	w = start(path, q, BATCH, 0, 0);
	if (!w)
		goto out;
	for (i = 0; i < N; i++) {
		r = row_team((int64_t)i);
		teamed += r.team_id > 0;
		CHECK_EQ_INT(intake(q, &r), 0);
		if (i % 500 == 0)
			sleep_ms(5);
	}
	/* The edges, in team 2 at model gpt-4o: each latency bound and either side of it,
	 * no duration; either side of midnight; zero usage, cost and estimate; usage with
	 * no price (prompt or completion alone). */
	for (i = 0; i < sizeof(durations) / sizeof(durations[0]); i++) {
		r = row_full(100000 + (int64_t)i);
		r.team_id = 2;
		snprintf(r.model, sizeof(r.model), "gpt-4o");
		r.duration_ms = durations[i];
		r.started_at_ms = midnight - 1 + (int64_t)(i % 2);
		r.stream = (int)(i % 3) - 1;
		r.outcome = (enum acct_outcome)(i % ACCT_OUTCOME_COUNT);
		if (i % 3 == 0) {
			r.prompt_tokens = r.completion_tokens = r.cost_micros = 0;
			r.estimated_tokens = r.estimated_cost_micros = 0;
		} else if (i % 3 == 1) {
			r.completion_tokens = i % 2 ? ACCT_NONE : 7;
			r.prompt_tokens = i % 2 ? 11 : ACCT_NONE;
			r.cost_micros = ACCT_NONE;
			r.unpriced = 1;
		}
		teamed++;
		CHECK_EQ_INT(intake(q, &r), 0);
	}
	/* A second record of a stored row, elsewhere: stored and summed once. */
	r = row_full(100000);
	r.team_id = 1;
	CHECK_EQ_INT(intake(q, &r), 0);
	writer_stop(w);
	db = db_reader(path);
	CHECK_EQ_INT(counters_now().duplicates, 1);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests WHERE team_id IS NOT NULL"), teamed);
	CHECK_EQ_INT(q_int(db, "SELECT sum(requests) FROM team_model_daily"), teamed);
	/* The variety the rows were meant to have reached the table. */
	CHECK_EQ_INT(q_int(db, "SELECT count(DISTINCT day) FROM team_model_daily"), 2);
	CHECK_EQ_INT(q_int(db, "SELECT count(DISTINCT team_id) FROM team_model_daily"), 3);
	CHECK_EQ_INT(q_int(db, "SELECT count(DISTINCT model) FROM team_model_daily"), 5);
	CHECK_EQ_INT(q_int(db, "SELECT count(DISTINCT provider) FROM team_model_daily"), 3);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM team_model_daily WHERE day % 86400 <> 0"), 0);
	CHECK(q_int(db, "SELECT count(*) FROM team_model_daily WHERE model = '' AND provider = ''") > 0);
	CHECK(q_int(db, "SELECT sum(unpriced) FROM team_model_daily") > 0);
	CHECK(q_int(db, "SELECT sum(estimated) FROM team_model_daily") > 0);
	CHECK(q_int(db, "SELECT sum(errors) FROM team_model_daily") > 0);
	CHECK(q_int(db, "SELECT sum(streams) FROM team_model_daily") > 0);
	CHECK(q_int(db, "SELECT sum(lat_le_25) FROM team_model_daily") > 0);
	CHECK(q_int(db, "SELECT sum(lat_gt_60000) FROM team_model_daily") > 0);
	CHECK(q_int(db, "SELECT sum(web_search_calls) FROM team_model_daily") > 0);
	CHECK(q_int(db, "SELECT sum(audio_output_tokens) FROM team_model_daily") > 0);
	CHECK(q_int(db, "SELECT sum(requests) - sum(lat_le_25) - sum(lat_le_50) - sum(lat_le_100)"
	                " - sum(lat_le_200) - sum(lat_le_350) - sum(lat_le_500) - sum(lat_le_750)"
	                " - sum(lat_le_1000) - sum(lat_le_1500) - sum(lat_le_2500) - sum(lat_le_4000)"
	                " - sum(lat_le_6000) - sum(lat_le_10000) - sum(lat_le_20000)"
	                " - sum(lat_le_60000) - sum(lat_gt_60000) FROM team_model_daily") > 0);
	/* Summed over models and providers, the writer's team_daily, both ways. */
	rollup_lists(cols, sizeof(cols), sums, sizeof(sums));
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT day, team_id%s FROM"
	         " team_model_daily GROUP BY 1, 2 EXCEPT SELECT day, team_id%s FROM team_daily)"
	         " AS d", sums, cols);
	CHECK_EQ_INT(q_int(db, sql), 0);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT day, team_id%s FROM team_daily"
	         " EXCEPT SELECT day, team_id%s FROM team_model_daily GROUP BY 1, 2) AS d", cols,
	         sums);
	CHECK_EQ_INT(q_int(db, sql), 0);
	/* Migration 019's back-fill of the same requests: the writer's table, row for row. */
	backfill = migration_backfill(19, "team_model_daily");
	CHECK(backfill != NULL);
	if (!backfill)
		goto out;
	/* 2 days x 3 teams x 5 models x 3 providers, every group hit */
	rows = q_int(db, "SELECT count(*) FROM team_model_daily");
	CHECK_EQ_INT(rows, 2 * 3 * 5 * 3);
	failed = unit_failed_checks;
	CHECK_EQ_INT(db_exec(db, "CREATE TABLE tmd_writer AS SELECT * FROM team_model_daily;"
	                         " DELETE FROM team_model_daily", err, sizeof(err)), 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM team_model_daily"), 0);
	if (db_exec(db, backfill, err, sizeof(err)) < 0)
		fprintf(stderr, "migration 019's back-fill: %s\n", err);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM team_model_daily"), rows);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM (SELECT * FROM tmd_writer EXCEPT"
	                       " SELECT * FROM team_model_daily) AS d"), 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM (SELECT * FROM team_model_daily EXCEPT"
	                       " SELECT * FROM tmd_writer) AS d"), 0);
	if (unit_failed_checks != failed) {
		print_rows(db, "writer", "SELECT * FROM tmd_writer EXCEPT SELECT * FROM team_model_daily");
		print_rows(db, "migration", "SELECT * FROM team_model_daily EXCEPT SELECT * FROM tmd_writer");
	}
	check_accounting(db);
out:
	free(backfill);
	db_close(db);
	queue_free(q);
}

/* Polls cond every 10 ms for up to ms milliseconds; check cond afterwards. */
#define WAIT_FOR(cond, ms) \
	for (int waited_ = 0; !(cond) && waited_ < (ms); waited_ += 10) \
		sleep_ms(10)

/* A size cap fills the database: the writer retries, gives up after retry_ms, counts
 * the rows dropped, and stores everything once the cap is raised. */
static void test_full(void)
{
	enum { CAP = 512, N1 = 3000, N2 = 500 };
	struct queue *q = queue_new(CAP);
	int64_t pages, pushed = 0, written;
	char path[512];
	struct writer *w;
	struct db *db;
	int i;

	if (pg_url)
		goto out;   /* max_db_pages is SQLite's */
	reset_counters();
	db_create("full.db", path, sizeof(path));
	db = db_reader(path);
	pages = q_int(db, "PRAGMA page_count");
	w = start(path, q, 256, 300, pages + 4);
	if (!w)
		goto out;
	for (i = 0; i < N1; i++) {
		struct acct_row r = row_random(i);

		pushed++;
		intake(q, &r);
		if (i % 200 == 0)
			sleep_ms(20);
	}
	WAIT_FOR(atomic_load(&done_given_up) > 0, 5000);
	CHECK(atomic_load(&done_given_up) > 0);
	CHECK(stats_get(&stats.errors[STATS_ERR_WRITE_FULL]) > 0);
	CHECK(counters_now().dropped > 0);
	/* The database stayed within its cap and consistent. */
	CHECK(q_int(db, "PRAGMA page_count") <= pages + 4);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests"),
	             q_int(db, "SELECT sum(requests) FROM usage_hourly"));

	writer_set_max_db_pages(w, 0);
	WAIT_FOR(queue_depth(q) == 0, 5000);
	CHECK_EQ_INT(queue_depth(q), 0);
	written = (int64_t)counters_now().written;
	for (i = 0; i < N2; i++) {
		struct acct_row r = row_random(N1 + i);

		pushed++;
		CHECK_EQ_INT(intake(q, &r), 0);
		if (i % 100 == 0)
			sleep_ms(20);
	}
	WAIT_FOR((int64_t)counters_now().written >= written + N2, 5000);
	CHECK((int64_t)counters_now().written >= written + N2);
	writer_stop(w);
	CHECK_EQ_INT(counters_now().received, pushed);
	CHECK_EQ_INT(counters_now().written + counters_now().dropped, pushed);
	CHECK(atomic_load(&done_given_up) <= (long long)counters_now().dropped);
	CHECK_EQ_INT(atomic_load(&done_committed), counters_now().written);
	check_accounting(db);
	CHECK(q_int(db, "PRAGMA page_count") > pages + 4);
	db_close(db);
out:
	queue_free(q);
}

/* With a spill, a full database costs no row: the batches the writer gives up and the
 * rows the full queue refuses wait on disk, and once the cap is raised everything is
 * written, each row once, oldest first; a stop while the database is still full leaves
 * the spilled rows neither written nor dropped (the journal keeps them). */
static void test_full_spilled(void)
{
	enum { CAP = 64, N1 = 3000 };
	struct queue *q = NULL;
	struct writer_config cfg = { .batch_max = 256, .retry_ms = 300, .on_done = on_done };
	char path[512], err[256] = "";
	struct spill *sp = spill_open(tmpdir_path, 64 << 20, err, sizeof(err));
	struct writer *w = NULL;
	struct db *db = NULL;
	int64_t pages;
	int i, round;

	CHECK(sp != NULL);
	if (pg_url || !sp)
		goto out;   /* max_db_pages is SQLite's */
	cfg.spill = sp;
	for (round = 0; round < 2; round++) {
		reset_counters();
		queue_free(q);   /* closed by the last writer_stop */
		cfg.queue = q = queue_new(CAP);
		db_create(round ? "spilled2.db" : "spilled.db", path, sizeof(path));
		db = db_reader(path);
		pages = q_int(db, "PRAGMA page_count");
		cfg.db_path = path;
		cfg.max_db_pages = pages + 4;
		if (!(w = writer_start(&cfg, err, sizeof(err)))) {
			fprintf(stderr, "writer_start: %s\n", err);
			CHECK(0);
			goto out;
		}
		for (i = 0; i < N1; i++) {
			struct acct_row r = row_random(i);

			counters_receive();
			if (queue_push(q, &r) < 0)
				CHECK_EQ_INT(spill_push(sp, &r), 0);
			if (i % 200 == 0)
				sleep_ms(20);
		}
		WAIT_FOR(spill_rows(sp) > CAP && stats_get(&stats.errors[STATS_ERR_WRITE_FULL]) > 0,
		         5000);
		CHECK(spill_rows(sp) > CAP);
		CHECK(stats_get(&stats.errors[STATS_ERR_WRITE_FULL]) > 0);
		CHECK_EQ_INT(counters_now().dropped, 0);
		CHECK_EQ_INT(atomic_load(&done_given_up), 0);
		CHECK(atomic_load(&stats.spill_head_ms) > 0);
		if (round == 1) {
			/* Stopped with the database still full: nothing dropped, nothing lost
			 * from the spill's count. */
			writer_stop(w);
			w = NULL;
			CHECK_EQ_INT(counters_now().dropped, 0);
			CHECK_EQ_INT(counters_now().written + spill_rows(sp), N1);
			break;
		}
		writer_set_max_db_pages(w, 0);
		WAIT_FOR(counters_now().written == N1, 10000);
		CHECK_EQ_INT(spill_rows(sp), 0);
		CHECK_EQ_INT(atomic_load(&stats.spilled_rows), 0);
		writer_stop(w);
		w = NULL;
		CHECK_EQ_INT(counters_now().received, N1);
		CHECK_EQ_INT(counters_now().written, N1);
		CHECK_EQ_INT(counters_now().dropped, 0);
		CHECK_EQ_INT(atomic_load(&done_committed), N1);
		CHECK_EQ_INT(q_int(db, "SELECT count(DISTINCT request_id) FROM requests"), N1);
		check_accounting(db);
		db_close(db);
		db = NULL;
	}
out:
	writer_stop(w);
	db_close(db);
	spill_close(sp);
	queue_free(q);
}

/* Another connection holds the write lock for a while: the writer waits it out and
 * stores everything; nothing is dropped. */
/* Another connection holds the write lock (SQLite) or a lock on requests (PostgreSQL)
 * for a while: the writer waits it out and stores everything; nothing is dropped. */
static void test_locked(void)
{
	struct queue *q = queue_new(1024);
	char path[512], err[256];
	struct writer *w;
	struct db *db, *locker;
	int i;

	reset_counters();
	db_create("locked.db", path, sizeof(path));
	db = db_reader(path);
	locker = db_reader(path);
	w = start(path, q, 0, 5000, 0);
	if (!w || !locker)
		goto out;
	CHECK_EQ_INT(db_begin(locker), DB_OK);
	if (pg_url)
		CHECK_EQ_INT(db_exec(locker, "LOCK TABLE requests IN EXCLUSIVE MODE", err,
		                     sizeof(err)), 0);
	for (i = 0; i < 500; i++) {
		struct acct_row r = row_random(i);

		CHECK_EQ_INT(intake(q, &r), 0);
	}
	WAIT_FOR(stats_get(&stats.errors[STATS_ERR_WRITE_BUSY]) >= 2, 3000);
	CHECK(stats_get(&stats.errors[STATS_ERR_WRITE_BUSY]) >= 2);
	CHECK_EQ_INT(counters_now().written, 0);
	CHECK_EQ_INT(db_commit(locker), DB_OK);
	writer_stop(w);
	CHECK_EQ_INT(counters_now().written, 500);
	CHECK_EQ_INT(counters_now().dropped, 0);
	CHECK_EQ_INT(atomic_load(&done_given_up), 0);
	check_accounting(db);
out:
	db_close(locker);
	db_close(db);
	queue_free(q);
}

/* A store migrated under a running writer to a schema newer than its own (another
 * node's agent or tallyctl of a newer release) gets nothing from it: each batch fails
 * and is retried, nothing is written; once the store is this writer's schema again,
 * every row is stored, none dropped. On PostgreSQL a migration under way (its lock
 * held, the new version not yet committed) holds batches off until it ends, so none
 * commits beside it unseen by its back-fills. */
static void test_newer_schema(void)
{
	struct queue *q = queue_new(1024);
	char path[512], err[256], bump[128], back[128];
	struct writer *w;
	struct db *db, *admin;
	int i;

	reset_counters();
	db_create("newer.db", path, sizeof(path));
	db = db_reader(path);
	admin = db_reader(path);
	w = start(path, q, 0, 5000, 0);
	if (!w || !admin)
		goto out;
	snprintf(bump, sizeof(bump), pg_url ? "UPDATE meta SET value = %d WHERE name ="
	         " 'schema_version'" : "PRAGMA user_version = %d", DB_SCHEMA_VERSION + 1);
	snprintf(back, sizeof(back), pg_url ? "UPDATE meta SET value = %d WHERE name ="
	         " 'schema_version'" : "PRAGMA user_version = %d", DB_SCHEMA_VERSION);
	if (pg_url) {
		CHECK_EQ_INT(db_begin(admin), DB_OK);
		CHECK_EQ_INT(db_exec(admin, "SELECT pg_advisory_xact_lock(499850701945)", err,
		                     sizeof(err)), 0);
	}
	CHECK_EQ_INT(db_exec(admin, bump, err, sizeof(err)), 0);
	for (i = 0; i < 300; i++) {
		struct acct_row r = row_random(i);

		CHECK_EQ_INT(intake(q, &r), 0);
	}
	if (pg_url) {
		sleep_ms(300);
		CHECK_EQ_INT(counters_now().written, 0);
		CHECK_EQ_INT(db_commit(admin), DB_OK);
	}
	WAIT_FOR(stats_get(&stats.errors[STATS_ERR_WRITE_OTHER]) >= 2, 3000);
	CHECK(stats_get(&stats.errors[STATS_ERR_WRITE_OTHER]) >= 2);
	CHECK_EQ_INT(counters_now().written, 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests"), 0);
	CHECK_EQ_INT(db_exec(admin, back, err, sizeof(err)), 0);
	writer_stop(w);
	CHECK_EQ_INT(counters_now().written, 300);
	CHECK_EQ_INT(counters_now().dropped, 0);
	CHECK_EQ_INT(atomic_load(&done_given_up), 0);
	check_accounting(db);
out:
	db_close(admin);
	db_close(db);
	queue_free(q);
}

/* A row the schema refuses (an outcome or usage source out of range, no id) is dropped
 * alone. Text that is not UTF-8 is no reason: PostgreSQL stores it with U+FFFD in place
 * of the stray bytes (db.h), SQLite as it is. */
static void test_refused_row(void)
{
	struct queue *q = queue_new(16);
	struct acct_row good = row_full(1), bad = row_full(2), good2 = row_full(3);
	struct acct_row bad2 = row_full(4), bad3 = row_full(5);
	char path[512];
	struct writer *w;
	struct db *db;

	reset_counters();
	db_create("refused.db", path, sizeof(path));
	bad.outcome = (enum acct_outcome)77;
	bad2.usage_source = (enum acct_usage_source)9;
	bad3.request_id[0] = '\0';
	snprintf(good2.model, sizeof(good2.model), "m\xff\xc3(\xe2\x82\xac\xed\xa0\x80");
	w = start(path, q, 0, 0, 0);
	if (!w)
		goto out;
	intake(q, &good);
	intake(q, &bad);
	intake(q, &good2);
	intake(q, &bad2);
	intake(q, &bad3);
	writer_stop(w);
	db = db_reader(path);
	CHECK_EQ_INT(counters_now().written, 2);
	CHECK_EQ_INT(counters_now().dropped, 3);
	CHECK_EQ_INT(stats_get(&stats.errors[STATS_ERR_WRITE_OTHER]), 3);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests WHERE request_id IN"
	                       " ('req-00000002', 'req-00000004')"), 0);
	CHECK_EQ_INT(q_int(db, "SELECT sum(requests) FROM usage_hourly"), 2);
	/* \xff and \xc3 alone are no UTF-8, nor is a surrogate; the euro sign is. */
	CHECK_EQ_INT(q_int(db, pg_url ? "SELECT count(*) FROM requests WHERE model LIKE"
	                                " 'm\xef\xbf\xbd%(\xe2\x82\xac\xef\xbf\xbd%'"
	                              : "SELECT count(*) FROM requests WHERE model ="
	                                " CAST(x'6dffc328e282aceda080' AS TEXT)"), 1);
	check_accounting(db);
	db_close(db);
out:
	queue_free(q);
}

/* A row the store refuses though the writer's checks pass it (here a rule added for
 * the test: a trigger on SQLite, a CHECK on PostgreSQL) fails its multi-row statement;
 * the batch is tried again a row at a time and that row alone is dropped. The same for
 * a batch of one statement per row. */
static void test_store_refuses(void)
{
	static const int per_statement[] = { 0, 1 };
	struct queue *q = NULL;
	char path[512], err[256];
	struct writer *w;
	struct db *db;
	size_t k;
	int i;

	for (k = 0; k < sizeof(per_statement) / sizeof(per_statement[0]); k++) {
		struct writer_config cfg = { .batch_max = 512, .rows_per_statement = per_statement[k],
		                             .on_done = on_done };

		reset_counters();
		db_create(k ? "store-refuses-1.db" : "store-refuses-64.db", path, sizeof(path));
		db = db_reader(path);
		CHECK_EQ_INT(db_exec(db, pg_url ? "ALTER TABLE requests ADD CONSTRAINT t_refuse"
		                                  " CHECK (request_id <> 'req-00000077')"
		                                : "CREATE TRIGGER t_refuse BEFORE INSERT ON requests"
		                                  " WHEN NEW.request_id = 'req-00000077'"
		                                  " BEGIN SELECT RAISE(ABORT, 'refused'); END",
		                     err, sizeof(err)), 0);
		q = queue_new(1024);
		cfg.db_path = path;
		cfg.queue = q;
		w = writer_start(&cfg, err, sizeof(err));
		CHECK(w != NULL);
		if (!w) {
			fprintf(stderr, "writer_start: %s\n", err);
			db_close(db);
			break;
		}
		for (i = 0; i < 300; i++) {
			struct acct_row r = row_random(i);

			CHECK_EQ_INT(intake(q, &r), 0);
		}
		writer_stop(w);
		CHECK_EQ_INT(counters_now().written, 299);
		CHECK_EQ_INT(counters_now().dropped, 1);
		CHECK_EQ_INT(atomic_load(&done_given_up), 0);
		CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests WHERE request_id ="
		                       " 'req-00000077'"), 0);
		CHECK_EQ_INT(q_int(db, "SELECT sum(requests) FROM usage_daily"), 299);
		check_accounting(db);
		db_close(db);
		queue_free(q);
		q = NULL;
	}
	queue_free(q);
}

/* writer_stop stores everything queued, and drops counted while idle reach the
 * database. */
static void test_drain_on_stop(void)
{
	enum { N = 20000 };
	struct queue *q = queue_new(N);
	struct acct_row r;
	char path[512];
	struct writer *w;
	struct db *db;
	int i;

	reset_counters();
	db_create("drain.db", path, sizeof(path));
	w = start(path, q, 0, 0, 0);
	if (!w)
		goto out;
	for (i = 0; i < N; i++) {
		r = row_random(i);
		CHECK_EQ_INT(intake(q, &r), 0);
	}
	writer_stop(w);
	db = db_reader(path);
	CHECK_EQ_INT(counters_now().written, N);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests"), N);
	CHECK_EQ_INT(queue_depth(q), 0);
	/* The intake refuses rows once the writer stopped; they are dropped, and the
	 * database learns it from the next writer, even if that writer writes nothing. */
	CHECK_EQ_INT(intake(q, &r), -1);
	queue_free(q);
	q = queue_new(4);
	w = start(path, q, 0, 0, 0);
	if (!w)
		goto out;
	WAIT_FOR(q_int(db, "SELECT dropped" NODE_ROW) == 1, 3000);
	CHECK_EQ_INT(q_int(db, "SELECT dropped" NODE_ROW), 1);
	writer_stop(w);
	check_accounting(db);
	db_close(db);
out:
	queue_free(q);
}

static void test_load_counters(void)
{
	char path[512], err[256] = "";
	struct db *db;

	reset_counters();
	db_create("load.db", path, sizeof(path));
	db = db_reader(path);
	/* A new node starts at zero, its row created. */
	counters_set(&(struct counters){ .written = 99 });
	CHECK_EQ_INT(writer_load_counters(db, "n1", err, sizeof(err)), 0);
	CHECK_EQ_INT(counters_now().written, 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM accounting WHERE node = 'n1'"
	                       " AND received + written + dropped + duplicates = 0"), 1);
	/* A previous run received 10 but resolved only 7 + 1 before it died. */
	CHECK_EQ_INT(db_exec(db, "UPDATE accounting SET received = 10, written = 7, dropped = 1,"
	                         " duplicates = 4, timed_out = 2, unpriced = 3 WHERE node = 'n1';"
	                         " INSERT INTO accounting VALUES ('n2', 50, 50, 0, 0, 0, 0, 0, 0, 0)",
	                     err, sizeof(err)), 0);
	counters_set(&(struct counters){ .written = 99 });
	CHECK_EQ_INT(writer_load_counters(db, "n1", err, sizeof(err)), 0);
	CHECK_EQ_INT(counters_now().received, 8);
	CHECK_EQ_INT(counters_now().written, 7);
	CHECK_EQ_INT(counters_now().dropped, 1);
	CHECK_EQ_INT(counters_now().duplicates, 4);
	CHECK_EQ_INT(counters_now().timed_out, 2);
	CHECK_EQ_INT(counters_now().unpriced, 3);
	CHECK_EQ_INT(q_int(db, "SELECT received FROM accounting WHERE node = 'n1'"), 8);
	/* Another node's row is its own. */
	CHECK_EQ_INT(q_int(db, "SELECT received FROM accounting WHERE node = 'n2'"), 50);
	CHECK(!db_in_transaction(db));
	/* The default node. */
	CHECK_EQ_INT(writer_load_counters(db, NULL, err, sizeof(err)), 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*)" NODE_ROW), 1);
	CHECK(!db_in_transaction(db));
	db_close(db);
}

/* One writer per node: on PostgreSQL a second writer, or writer_load_counters, for a
 * node whose writer runs is refused; another node is not. On SQLite two writers of one
 * node in one file are not told apart (one agent per file). */
static void test_nodes(void)
{
	struct queue *q1 = queue_new(16), *q2 = queue_new(16), *q3 = queue_new(16);
	struct writer_config cfg = { .node = "edge-1" };
	struct writer *w1 = NULL, *w2 = NULL, *w3 = NULL;
	char path[512], err[512] = "";
	struct db *db;

	reset_counters();
	db_create("nodes.db", path, sizeof(path));
	db = db_reader(path);
	cfg.db_path = path;
	cfg.queue = q1;
	w1 = writer_start(&cfg, err, sizeof(err));
	CHECK(w1 != NULL);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM accounting WHERE node = 'edge-1'"), 1);
	cfg.queue = q2;
	w2 = writer_start(&cfg, err, sizeof(err));
	if (pg_url) {
		CHECK(w2 == NULL);
		CHECK(strstr(err, "edge-1") != NULL && strstr(err, "another agent") != NULL);
		CHECK_EQ_INT(writer_load_counters(db, "edge-1", err, sizeof(err)), -1);
		CHECK(strstr(err, "another agent") != NULL);
		CHECK(!db_in_transaction(db));
	}
	cfg.node = "edge-2";
	cfg.queue = q3;
	w3 = writer_start(&cfg, err, sizeof(err));
	CHECK(w3 != NULL);
	CHECK_EQ_INT(writer_load_counters(db, "edge-3", err, sizeof(err)), 0);
	writer_stop(w1);
	writer_stop(w2);
	writer_stop(w3);
	/* Stopped, the node is free again. */
	CHECK_EQ_INT(writer_load_counters(db, "edge-1", err, sizeof(err)), 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM accounting"), 3);
	db_close(db);
	queue_free(q1);
	queue_free(q2);
	queue_free(q3);
}

/* PostgreSQL: the writer's connection is cut (the server ends its backend): the writer
 * reconnects (the next statement fails as lost, or db.c finds the connection closed
 * first), takes its node's lock again and stores everything. */
static void test_reconnect(void)
{
	struct queue *q = queue_new(1024);
	char path[512];
	struct writer *w = NULL;
	struct db *db = NULL;
	int i;

	if (!pg_url)
		goto out;
	reset_counters();
	db_create("reconnect.db", path, sizeof(path));
	db = db_reader(path);
	w = start(path, q, 0, 5000, 0);
	if (!w)
		goto out;
	for (i = 0; i < 100; i++) {
		struct acct_row r = row_random(i);

		CHECK_EQ_INT(intake(q, &r), 0);
	}
	WAIT_FOR(counters_now().written == 100, 3000);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
	                       " AND classid = 1952541817 AND granted"), 1);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM"
	                       " pg_locks WHERE locktype = 'advisory' AND classid = 1952541817)"
	                       " AS t"), 1);
	sleep_ms(100);
	for (i = 100; i < 300; i++) {
		struct acct_row r = row_random(i);

		CHECK_EQ_INT(intake(q, &r), 0);
	}
	WAIT_FOR(counters_now().written == 300, 5000);
	CHECK_EQ_INT(counters_now().written, 300);
	/* Held again, by the new session. */
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
	                       " AND classid = 1952541817 AND granted"), 1);
	writer_stop(w);
	w = NULL;
	CHECK_EQ_INT(counters_now().dropped, 0);
	check_accounting(db);
out:
	writer_stop(w);
	db_close(db);
	queue_free(q);
}

/* PostgreSQL: the writer's session ends and, before its next batch, another writer
 * takes the node: the first one's batches fail (the node's lock is held elsewhere) and
 * are given up after retry_ms, never written under the other writer's counters. */
static void test_takeover(void)
{
	struct queue *q1 = queue_new(64), *q2 = queue_new(64);
	struct writer_config cfg = { .node = "edge", .retry_ms = 300, .on_done = on_done };
	struct writer *w1 = NULL, *w2 = NULL;
	char path[512], err[512] = "";
	struct db *db = NULL;
	struct acct_row r;

	if (!pg_url)
		goto out;
	reset_counters();
	db_create("takeover.db", path, sizeof(path));
	db = db_reader(path);
	cfg.db_path = path;
	cfg.queue = q1;
	w1 = writer_start(&cfg, err, sizeof(err));
	CHECK(w1 != NULL);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM"
	                       " pg_locks WHERE locktype = 'advisory' AND classid = 1952541817)"
	                       " AS t"), 1);
	WAIT_FOR(q_int(db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
	                   " AND classid = 1952541817") == 0, 2000);
	cfg.queue = q2;
	w2 = writer_start(&cfg, err, sizeof(err));
	if (!w2)
		fprintf(stderr, "writer_start: %s\n", err);
	CHECK(w2 != NULL);
	r = row_full(1);
	CHECK_EQ_INT(intake(q1, &r), 0);
	WAIT_FOR(atomic_load(&done_given_up) == 1, 3000);
	CHECK_EQ_INT(atomic_load(&done_given_up), 1);
	CHECK(stats_get(&stats.errors[STATS_ERR_WRITE_BUSY]) >= 1);
	r = row_full(2);
	CHECK_EQ_INT(intake(q2, &r), 0);
	WAIT_FOR(atomic_load(&done_committed) == 1, 3000);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests WHERE request_id = 'req-00000001'"), 0);
	CHECK_EQ_INT(q_int(db, "SELECT count(*) FROM requests WHERE request_id = 'req-00000002'"), 1);
out:
	writer_stop(w1);
	writer_stop(w2);
	db_close(db);
	queue_free(q1);
	queue_free(q2);
}

static void test_bad_config(void)
{
	struct queue *q = queue_new(4);
	struct writer_config cfg = { .db_path = tmpdir_file("nosuch.db"), .queue = q };
	char err[512] = "";

	CHECK(writer_start(&cfg, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "nosuch.db") != NULL);
	cfg.batch_max = WRITER_BATCH_MAX + 1;
	CHECK(writer_start(&cfg, err, sizeof(err)) == NULL);
	cfg.batch_max = 0;
	cfg.rows_per_statement = 3;   /* not a power of two */
	CHECK(writer_start(&cfg, err, sizeof(err)) == NULL);
	queue_free(q);
}

static void run_cases(void)
{
	RUN(test_roundtrip);
	RUN(test_duplicates);
	RUN(test_stored_responses);
	RUN(test_stored_responses_pruned);
	RUN(test_rollups);
	RUN(test_team_model_daily);
	RUN(test_full);
	RUN(test_full_spilled);
	RUN(test_newer_schema);
	RUN(test_locked);
	RUN(test_refused_row);
	RUN(test_store_refuses);
	RUN(test_drain_on_stop);
	RUN(test_load_counters);
	RUN(test_nodes);
	RUN(test_reconnect);
	RUN(test_takeover);
}

int main(void)
{
	const char *url = getenv("TALLY_TEST_PG_URL");

	if (tmpdir_make("writer") < 0)
		return 1;
	log_set_level(LOG_ERROR);
	run_cases();
	RUN(test_bad_config);
	if (url && *url) {
		pg_url = url;
		fprintf(stderr, "writer: the cases again on PostgreSQL\n");
		run_cases();
	}
	tmpdir_remove();
	return UNIT_DONE();
}
