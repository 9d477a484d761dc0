/* Unit tests for common/db.c and sql/schema.sql: creation, pragmas, constraints, the
 * config_generation triggers, version refusals, the migration runner, and two
 * processes creating one database at once. Single-threaded; forks for the race. */
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "db.h"
#include "tmpdir.h"
#include "unit.h"

static struct db *test_open(const char *name, enum db_mode mode)
{
	char err[512] = "";
	struct db *db = NULL;

	if (db_open(tmpdir_file(name), mode, &db, err, sizeof(err)) < 0)
		fprintf(stderr, "db_open %s: %s\n", name, err);
	return db;
}

static int64_t test_int(struct db *db, const char *sql)
{
	int64_t v = -12345;

	if (db_query_int(db, sql, &v) < 0)
		return -12345;
	return v;
}

static int test_exec(struct db *db, const char *sql)
{
	char err[512];

	return db_exec(db, sql, err, sizeof(err));
}

/* Sets user_version on a tally database (opened before the change is refused). */
static void test_set_version(const char *name, int v)
{
	char sql[64];
	struct db *db = test_open(name, DB_READWRITE);

	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v);
	CHECK(db != NULL);
	if (db)
		CHECK_EQ_INT(test_exec(db, sql), 0);
	db_close(db);
}

static void test_create(void)
{
	struct db *db = test_open("create.db", DB_CREATE);
	struct stat st;

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(db_config_generation(db), 0);
	CHECK_EQ_INT(test_int(db, "PRAGMA foreign_keys"), 1);
	CHECK_EQ_INT(test_int(db, "PRAGMA synchronous"), 1);   /* NORMAL */
	CHECK_EQ_INT(test_int(db, "PRAGMA busy_timeout"), DB_BUSY_TIMEOUT_MS);
	CHECK_EQ_INT(test_int(db, "SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN"
	                          " ('meta', 'providers', 'models', 'keys', 'key_models', 'requests',"
	                          " 'usage_hourly', 'usage_daily', 'model_hourly', 'model_daily',"
	                          " 'key_hourly', 'key_daily', 'total_hourly', 'accounting')"), 14);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN"
	                          " ('requests_started_at', 'requests_key_started_at',"
	                          " 'requests_model_started_at', 'usage_hourly_key_hour',"
	                          " 'usage_daily_key_day')"), 5);
	/* No node has accounted yet: each writer adds its own row. */
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM accounting"), 0);
	CHECK_EQ_INT(db_accounted_at(db), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"), 15);
	db_close(db);
	CHECK_EQ_INT(stat(tmpdir_file("create.db"), &st), 0);

	/* Opening again changes nothing. */
	db = test_open("create.db", DB_CREATE);
	CHECK(db != NULL);
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM meta"), 1);
	db_close(db);
}

static void test_modes(void)
{
	char err[512] = "";
	struct db *db;

	db = test_open("create.db", DB_READWRITE);
	CHECK(db != NULL);
	CHECK_EQ_INT(test_int(db, "PRAGMA foreign_keys"), 1);
	db_close(db);

	db = test_open("create.db", DB_READONLY);
	CHECK(db != NULL);
	CHECK_EQ_INT(db_config_generation(db), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO meta VALUES ('x', 1)"), -1);
	db_close(db);

	db = (struct db *)1;
	CHECK_EQ_INT(db_open(tmpdir_file("missing.db"), DB_READWRITE, &db, err, sizeof(err)), -1);
	CHECK(db == NULL);
	CHECK(strstr(err, "missing.db") != NULL);
	CHECK(access(tmpdir_file("missing.db"), F_OK) < 0);
	CHECK_EQ_INT(db_open(tmpdir_file("missing.db"), DB_READONLY, &db, err, sizeof(err)), -1);

	CHECK_EQ_INT(db_open(":memory:", DB_CREATE, &db, err, sizeof(err)), 0);
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	db_close(db);
}

/* DB_PROBE reads without a trace: no -wal or -shm is created beside a closed database
 * (read as immutable, even under a name that a URI would misread), while one an open
 * connection is writing is read with what its -wal holds; nothing is created or
 * migrated. */
static void test_probe(void)
{
	char err[512] = "";
	struct db *db, *writer;

	db = test_open("odd %3f?#name.db", DB_CREATE);
	CHECK(db != NULL);
	db_close(db);
	CHECK(access(tmpdir_file("odd %3f?#name.db-wal"), F_OK) < 0);
	db = test_open("odd %3f?#name.db", DB_PROBE);
	CHECK(db != NULL);
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO meta VALUES ('x', 1)"), -1);
	db_close(db);
	CHECK(access(tmpdir_file("odd %3f?#name.db-wal"), F_OK) < 0);
	CHECK(access(tmpdir_file("odd %3f?#name.db-shm"), F_OK) < 0);
	CHECK(access(tmpdir_file("odd %3f"), F_OK) < 0);

	/* a live writer: its uncheckpointed change is seen */
	writer = test_open("odd %3f?#name.db", DB_READWRITE);
	CHECK(writer != NULL);
	CHECK_EQ_INT(test_exec(writer, "INSERT INTO meta VALUES ('probe', 7)"), 0);
	CHECK(access(tmpdir_file("odd %3f?#name.db-wal"), F_OK) == 0);
	db = test_open("odd %3f?#name.db", DB_PROBE);
	CHECK(db != NULL);
	CHECK_EQ_INT(test_int(db, "SELECT value FROM meta WHERE name = 'probe'"), 7);
	db_close(db);
	db_close(writer);

	db = (struct db *)1;
	CHECK_EQ_INT(db_open(tmpdir_file("missing.db"), DB_PROBE, &db, err, sizeof(err)), -1);
	CHECK(db == NULL);
	CHECK(access(tmpdir_file("missing.db"), F_OK) < 0);
	test_set_version("odd %3f?#name.db", DB_SCHEMA_VERSION - 1);
	CHECK_EQ_INT(db_open(tmpdir_file("odd %3f?#name.db"), DB_PROBE, &db, err, sizeof(err)), -1);
	CHECK(strstr(err, "older than") != NULL);
	CHECK(access(tmpdir_file("odd %3f?#name.db-wal"), F_OK) < 0);
}

/* Runs sql and returns by how much config_generation moved. */
static int64_t test_bump(struct db *db, const char *sql)
{
	int64_t before = db_config_generation(db);

	if (test_exec(db, sql) < 0) {
		fprintf(stderr, "%s: %s\n", sql, db_errmsg(db));
		return -1;
	}
	return db_config_generation(db) - before;
}

static void test_generation_triggers(void)
{
	static const char *const one_each[] = {
		"INSERT INTO providers (name, api, backend, created_at) VALUES ('p', 'openai', 'be', 1)",
		"UPDATE providers SET backend = 'be2' WHERE name = 'p'",
		"INSERT INTO models (name, provider_id, created_at, updated_at) VALUES ('m', 1, 1, 1)",
		"UPDATE models SET updated_at = 5 WHERE name = 'm'",
		"INSERT INTO model_prices (model_id, tier, above_tokens) VALUES (1, 'default', 0)",
		"UPDATE model_prices SET input_micros_per_mtok = 5",
		"DELETE FROM model_prices",
		"INSERT INTO keys (name, prefix, hash, created_at) VALUES ('k', 'tly_x', zeroblob(32), 1)",
		"UPDATE keys SET revoked_at = 2 WHERE name = 'k'",
		"INSERT INTO key_models (key_id, model) VALUES (1, 'm')",
		"UPDATE key_models SET model = 'm2'",
		"DELETE FROM key_models",
		"DELETE FROM keys",
		"DELETE FROM models",
		"DELETE FROM providers",
	};
	struct db *db = test_open("gen.db", DB_CREATE);
	size_t i;

	CHECK(db != NULL);
	if (!db)
		return;
	for (i = 0; i < sizeof(one_each) / sizeof(one_each[0]); i++) {
		int64_t d = test_bump(db, one_each[i]);

		if (d != 1)
			fprintf(stderr, "bump %lld for: %s\n", (long long)d, one_each[i]);
		CHECK_EQ_INT(d, 1);
	}
	CHECK_EQ_INT(db_config_generation(db), 15);
	/* A statement touching no row fires no row trigger. */
	CHECK_EQ_INT(test_bump(db, "UPDATE keys SET revoked_at = 3 WHERE name = 'nobody'"), 0);
	db_close(db);
}

static void test_constraints(void)
{
	struct db *db = test_open("constraints.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, "INSERT INTO providers (name, api, backend, created_at)"
	                           " VALUES ('p', 'openai', 'be', 1)"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO providers (name, api, backend, created_at)"
	                           " VALUES ('q', 'gemini', 'be', 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO providers (name, api, backend, created_at)"
	                           " VALUES ('p', 'openai', 'be', 1)"), -1);
	/* Foreign keys are enforced. */
	CHECK_EQ_INT(test_exec(db, "INSERT INTO models (name, provider_id, created_at, updated_at)"
	                           " VALUES ('m', 99, 1, 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO models (name, provider_id, created_at, updated_at)"
	                           " VALUES ('m', 1, 1, 1)"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_prices (model_id, tier, above_tokens,"
	                           " output_micros_per_mtok) VALUES (1, 'default', 0, -1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_prices (model_id, tier, above_tokens)"
	                           " VALUES (1, '', 0)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_prices (model_id, tier, above_tokens)"
	                           " VALUES (9, 'default', 0)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_prices (model_id, tier, above_tokens)"
	                           " VALUES (1, 'default', 0)"), 0);
	/* A price not given is unknown, never 0. */
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_prices WHERE input_micros_per_mtok"
	                          " IS NULL AND output_micros_per_mtok IS NULL AND"
	                          " cached_micros_per_mtok IS NULL AND web_search_micros_per_call"
	                          " IS NULL"), 1);
	CHECK_EQ_INT(test_exec(db, "UPDATE model_prices SET cache_write_micros_per_mtok = -1"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE keys SET server_tools = 'sometimes'"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at, audio)"
	                           " VALUES ('ka', 'x', zeroblob(32), 1, 'maybe')"), -1);
	/* A model's cards go with it. */
	CHECK_EQ_INT(test_exec(db, "DELETE FROM models WHERE name = 'm'"), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_prices"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO models (name, provider_id, created_at, updated_at)"
	                           " VALUES ('m', 1, 1, 1)"), 0);
	CHECK_EQ_INT(test_exec(db, "DELETE FROM providers"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at)"
	                           " VALUES ('k', 'x', zeroblob(31), 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at)"
	                           " VALUES ('k', 'x', zeroblob(32), 1)"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at)"
	                           " VALUES ('k2', 'x', zeroblob(32), 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO key_models VALUES (1, 'm'), (1, 'n')"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO key_models VALUES (1, 'm')"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO key_models VALUES (7, 'm')"), -1);
	/* Deleting a key takes its allow-list with it. */
	CHECK_EQ_INT(test_exec(db, "DELETE FROM keys"), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM key_models"), 0);
	db_close(db);
}

/* Inserts a request row given (request_id, outcome, usage_source, started_at, stream). */
static int test_request(struct db *db, const char *values)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "INSERT INTO requests (request_id, outcome, usage_source,"
	         " started_at, stream) VALUES %s", values);
	return test_exec(db, sql);
}

static void test_usage_constraints(void)
{
	struct db *db = test_open("usage.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_request(db, "('a', 'complete', 'response', 1, 1)"), 0);
	CHECK_EQ_INT(test_request(db, "('b', 'no_record', 'none', 1, NULL)"), 0);
	CHECK_EQ_INT(test_request(db, "('a', 'complete', 'response', 1, 0)"), -1);    /* unique */
	CHECK_EQ_INT(test_request(db, "('c', 'finished', 'response', 1, 0)"), -1);
	CHECK_EQ_INT(test_request(db, "('c', 'complete', 'guess', 1, 0)"), -1);
	CHECK_EQ_INT(test_request(db, "('c', 'complete', 'response', 1, 2)"), -1);
	CHECK_EQ_INT(test_request(db, "('c', 'complete', 'response', NULL, 0)"), -1);
	CHECK_EQ_INT(test_request(db, "(NULL, 'complete', 'response', 1, 0)"), -1);
	/* One row per (period, key, model, provider); every sum is NOT NULL. */
	CHECK_EQ_INT(test_exec(db, "INSERT INTO usage_hourly (hour, key_id, model, provider,"
	                           " requests, errors, streams, prompt_tokens, completion_tokens,"
	                           " cached_tokens, cache_creation_tokens, reasoning_tokens,"
	                           " cost_micros, unpriced, duration_ms_sum, lat_le_25, lat_le_50,"
	                           " lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,"
	                           " lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000,"
	                           " lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000)"
	                           " SELECT 0, 0, '', '', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,"
	                           " 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO usage_daily SELECT * FROM usage_hourly"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO usage_hourly SELECT * FROM usage_daily"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO usage_daily SELECT * FROM usage_hourly"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE usage_daily SET lat_gt_60000 = NULL"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO accounting (node, received, written, dropped,"
	                           " duplicates, timed_out, unpriced, updated_at)"
	                           " VALUES ('', 0, 0, 0, 0, 0, 0, 0)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO accounting (node, received, written, dropped,"
	                           " duplicates, timed_out, unpriced, updated_at)"
	                           " VALUES ('a', 0, 0, 0, 0, 0, 0, 5)"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO accounting (node, received, written, dropped,"
	                           " duplicates, timed_out, unpriced, updated_at)"
	                           " VALUES ('a', 0, 0, 0, 0, 0, 0, 6)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO accounting (node, received, written, dropped,"
	                           " duplicates, timed_out, unpriced, updated_at)"
	                           " VALUES ('b', 0, 0, 0, 0, 0, 0, 7)"), 0);
	CHECK_EQ_INT(db_accounted_at(db), 7);
	/* Usage tables are not configuration: the agent need not reload for them. */
	CHECK_EQ_INT(db_config_generation(db), 0);
	db_close(db);
}

static void test_newer_refused(void)
{
	char err[512] = "";
	struct db *db = test_open("newer.db", DB_CREATE);
	enum db_mode modes[] = { DB_CREATE, DB_READWRITE, DB_READONLY };
	size_t i;

	db_close(db);
	test_set_version("newer.db", DB_SCHEMA_VERSION + 1);
	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		db = NULL;
		CHECK_EQ_INT(db_open(tmpdir_file("newer.db"), modes[i], &db, err, sizeof(err)), -1);
		CHECK(db == NULL);
		CHECK(strstr(err, "newer than this binary") != NULL);
	}
}

static void test_uninitialised_refused(void)
{
	char err[512] = "";
	struct db *db = NULL;
	FILE *f;

	/* An empty file: only DB_CREATE may initialise it. */
	f = fopen(tmpdir_file("empty.db"), "w");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	CHECK_EQ_INT(db_open(tmpdir_file("empty.db"), DB_READWRITE, &db, err, sizeof(err)), -1);
	CHECK(strstr(err, "no tally schema") != NULL);

	/* Somebody else's database (tables, no version) is never taken over. */
	db = test_open("foreign.db", DB_CREATE);
	CHECK(db != NULL);
	if (db)
		CHECK_EQ_INT(test_exec(db, "PRAGMA user_version = 0; CREATE TABLE theirs (x)"), 0);
	db_close(db);
	CHECK_EQ_INT(db_open(tmpdir_file("foreign.db"), DB_CREATE, &db, err, sizeof(err)), -1);
	CHECK(strstr(err, "not a tally database") != NULL);
}

/* Test migrations after the built-in ones: list[i] upgrades version i + 1. Entries
 * below DB_SCHEMA_VERSION never run on a database created at that version. */
#define TEST_MIGRATIONS_MAX 12

static int test_migrations(const char *const *extra, int nextra, const char **list)
{
	int i, n = DB_SCHEMA_VERSION - 1;

	for (i = 0; i < n; i++)
		list[i] = "SELECT nosuch()";
	for (i = 0; i < nextra && n < TEST_MIGRATIONS_MAX; i++)
		list[n++] = extra[i];
	return n;
}

static void test_migrate(void)
{
	static const char *const extra[] = {
		"CREATE TABLE m2 (x INTEGER)",
		"",
		"ALTER TABLE m2 ADD COLUMN y TEXT; INSERT INTO m2 VALUES (1, 'a')",
	};
	const char *list[TEST_MIGRATIONS_MAX];
	int n = test_migrations(extra, 3, list);
	char err[512] = "";
	struct db *db = test_open("migrate.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_migrate(db, list, n, err, sizeof(err)), 0);
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION + 3);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM m2 WHERE y = 'a'"), 1);
	/* Already there: nothing runs again. */
	CHECK_EQ_INT(db_migrate(db, list, n, err, sizeof(err)), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM m2"), 1);
	/* A binary that knows fewer migrations refuses the newer database. */
	CHECK_EQ_INT(db_migrate(db, list, n - 1, err, sizeof(err)), -1);
	CHECK(strstr(err, "newer") != NULL);
	CHECK(!db_in_transaction(db));
	db_close(db);
}

static void test_migrate_atomic(void)
{
	static const char *const extra[] = {
		"CREATE TABLE ok2 (x)",
		"CREATE TABLE half (x); INSERT INTO nosuch VALUES (1)",
	};
	const char *list[TEST_MIGRATIONS_MAX];
	int n = test_migrations(extra, 2, list);
	char err[512] = "", want[64];
	struct db *db = test_open("atomic.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_migrate(db, list, n, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "from version %d to %d", DB_SCHEMA_VERSION + 1,
	         DB_SCHEMA_VERSION + 2);
	CHECK(strstr(err, want) != NULL);
	CHECK(strstr(err, "nosuch") != NULL);
	/* The first step committed; the failed one left nothing behind. */
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION + 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'ok2'"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'half'"), 0);
	CHECK(!db_in_transaction(db));
	db_close(db);
}

/* Migration 009: schema 8's one accounting row becomes node 'local', counts kept. */
static void test_migrate_accounting(void)
{
	struct db *db = test_open("acct.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, "DROP TABLE accounting;"
	                           " CREATE TABLE accounting (id INTEGER PRIMARY KEY CHECK (id = 1),"
	                           " received INTEGER NOT NULL, written INTEGER NOT NULL,"
	                           " dropped INTEGER NOT NULL, duplicates INTEGER NOT NULL,"
	                           " timed_out INTEGER NOT NULL, unpriced INTEGER NOT NULL,"
	                           " updated_at INTEGER NOT NULL,"
	                           " unauthenticated INTEGER NOT NULL DEFAULT 0,"
	                           " pending_overflow INTEGER NOT NULL DEFAULT 0);"
	                           " INSERT INTO accounting VALUES (1, 10, 7, 3, 2, 1, 4, 99, 5, 6);"
	                           " PRAGMA user_version = 8"), 0);
	db_close(db);
	db = test_open("acct.db", DB_CREATE);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM accounting"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT received * 1000000000 + written * 100000000"
	                          " + dropped * 10000000 + duplicates * 1000000 + timed_out * 100000"
	                          " + unpriced * 10000 + unauthenticated * 1000"
	                          " + pending_overflow * 100 FROM accounting WHERE node = 'local'"),
	             10000000000 + 700000000 + 30000000 + 2000000 + 100000 + 40000 + 5000 + 600);
	CHECK_EQ_INT(db_accounted_at(db), 99);
	db_close(db);
}

static void test_generation_error(void)
{
	char err[512] = "";
	struct db *db = NULL;

	CHECK_EQ_INT(db_open(":memory:", DB_CREATE, &db, err, sizeof(err)), 0);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, "DROP TABLE meta; PRAGMA user_version = 0"), 0);
	CHECK_EQ_INT(db_config_generation(db), -1);
	CHECK_EQ_INT(db_schema_version(db), 0);
	db_close(db);
}

/* Two processes open the same new database with DB_CREATE at the same moment. */
static void test_create_race(void)
{
	int round;

	for (round = 0; round < 10; round++) {
		char name[32], c;
		int start[2], i, status;
		pid_t pid[2];
		struct db *db;

		snprintf(name, sizeof(name), "race%d.db", round);
		if (pipe(start) < 0) {
			CHECK(!"pipe");
			return;
		}
		for (i = 0; i < 2; i++) {
			pid[i] = fork();
			if (pid[i] == 0) {
				close(start[1]);
				db = read(start[0], &c, 1) == 0 ? test_open(name, DB_CREATE) : NULL;
				status = db && db_schema_version(db) == DB_SCHEMA_VERSION;
				db_close(db);
				_exit(status ? 0 : 1);
			}
		}
		close(start[0]);
		close(start[1]);
		for (i = 0; i < 2; i++) {
			CHECK(waitpid(pid[i], &status, 0) == pid[i]);
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		}
		db = test_open(name, DB_READWRITE);
		CHECK(db != NULL);
		CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM meta"), 1);
		CHECK_EQ_INT(db_config_generation(db), 0);
		db_close(db);
	}
}

static void test_now(void)
{
	int64_t now = db_now();

	CHECK(now > 1700000000);
	CHECK(db_now() - now <= 1);
}

int main(void)
{
	if (tmpdir_make("db") < 0)
		return 1;
	RUN(test_create);
	RUN(test_modes);
	RUN(test_probe);
	RUN(test_generation_triggers);
	RUN(test_constraints);
	RUN(test_usage_constraints);
	RUN(test_newer_refused);
	RUN(test_uninitialised_refused);
	RUN(test_migrate);
	RUN(test_migrate_atomic);
	RUN(test_migrate_accounting);
	RUN(test_generation_error);
	RUN(test_create_race);
	RUN(test_now);
	tmpdir_remove();
	return UNIT_DONE();
}
