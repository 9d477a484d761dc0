/* Unit tests for common/db.c, sql/schema.sql and sql/pg/schema.sql: creation,
 * pragmas, constraints, the config_generation triggers, version refusals, the
 * migration runner, two processes creating one database at once, and the statement
 * API (parameters, round trips, long results streamed or held whole, statuses,
 * transactions). Every store test
 * runs on SQLite and, when TALLY_TEST_PG_URL names an empty PostgreSQL database
 * (tests/test_unit.py sets it), on PostgreSQL too, each "database" there a schema of
 * its own. "test_db outage URL" is the half of tests/test_unit.py's outage test that
 * talks to a server the test stops and starts. Single-threaded; forks for the race. */
#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "db.h"
#include "tmpdir.h"
#include "unit.h"

static enum db_kind test_kind = DB_SQLITE;
static const char *test_pg_url;   /* the database for every PostgreSQL test */
static struct db *test_admin;     /* a connection to it, making schemas */

/* The store called name in the current kind: a file in the temporary directory, or
 * the PostgreSQL database with search_path set to a schema named after name (made if
 * missing). The result lives until the next call. */
static const char *test_store(const char *name)
{
	static char url[1024];
	char schema[64], sql[128], err[512];
	size_t i, n = 2;

	if (test_kind == DB_SQLITE)
		return tmpdir_file(name);
	memcpy(schema, "s_", 2);
	for (i = 0; name[i] && n < sizeof(schema) - 1; i++)
		schema[n++] = isalnum((unsigned char)name[i]) ? (char)tolower((unsigned char)name[i]) : '_';
	schema[n] = '\0';
	snprintf(sql, sizeof(sql), "CREATE SCHEMA IF NOT EXISTS %s", schema);
	if (db_exec(test_admin, sql, err, sizeof(err)) < 0)
		fprintf(stderr, "%s: %s\n", sql, err);
	snprintf(url, sizeof(url), "%s%coptions=-c%%20search_path%%3D%s", test_pg_url,
	         strchr(test_pg_url, '?') ? '&' : '?', schema);
	return url;
}

static struct db *test_open(const char *name, enum db_mode mode)
{
	char err[512] = "";
	struct db *db = NULL;

	if (db_open(test_store(name), mode, &db, err, sizeof(err)) < 0)
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

/* Runs sql; on PostgreSQL SQLite's zeroblob(N) is written as PostgreSQL's, and the
 * drop of schema 22's triggers as the drop of their functions (the triggers go with
 * them: PostgreSQL names a trigger with its table, and keeps a function without it). */
static int test_exec(struct db *db, const char *sql)
{
	static const char lite_drop[] = "DROP TRIGGER requests_tags_insert;"
	                                " DROP TRIGGER requests_tags_delete;";
	static const char pg_drop[] = "DROP FUNCTION tally_request_tags_insert() CASCADE;"
	                              " DROP FUNCTION tally_request_tags_delete() CASCADE;";
	char err[512], pg[2048];
	const char *z;
	size_t o = 0;

	if (db_kind(db) == DB_POSTGRES) {
		for (;;) {
			const char *d = strstr(sql, lite_drop);

			z = strstr(sql, "zeroblob(");
			if (!z && !d)
				break;
			if (d && (!z || d < z))
				z = d;
			/* the longer replacement must fit, or the rest goes as it is */
			if (o + (size_t)(z - sql) + sizeof(pg_drop) >= sizeof(pg))
				break;
			memcpy(pg + o, sql, (size_t)(z - sql));
			o += (size_t)(z - sql);
			if (z == d) {
				o += (size_t)sprintf(pg + o, "%s", pg_drop);
				sql = z + strlen(lite_drop);
			} else {
				o += (size_t)sprintf(pg + o, "decode(repeat('00', %d), 'hex')", atoi(z + 9));
				sql = strchr(z, ')') + 1;
			}
		}
		snprintf(pg + o, sizeof(pg) - o, "%s", sql);
		sql = pg;
	}
	return db_exec(db, sql, err, sizeof(err));
}

/* 1 if the table called name exists in db. */
static int test_has_table(struct db *db, const char *name)
{
	char sql[256];

	if (db_kind(db) == DB_POSTGRES)
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM pg_tables WHERE schemaname ="
		         " current_schema() AND tablename = '%s'", name);
	else
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM sqlite_master WHERE name = '%s'",
		         name);
	return test_int(db, sql) == 1;
}

/* Sets the schema version of a tally database (opened before the change is refused). */
static void test_set_version(const char *name, int v)
{
	char sql[96];
	struct db *db = test_open(name, DB_READWRITE);

	if (test_kind == DB_POSTGRES)
		snprintf(sql, sizeof(sql), "UPDATE meta SET value = %d WHERE name = 'schema_version'", v);
	else
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
	CHECK_EQ_INT(db_kind(db), test_kind);
	/* No node has accounted yet: each writer adds its own row. */
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM accounting"), 0);
	CHECK_EQ_INT(db_accounted_at(db), 0);
	if (test_kind == DB_POSTGRES) {
		CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM pg_tables WHERE schemaname ="
		                          " current_schema()"), 30);
		CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM pg_indexes WHERE schemaname ="
		                          " current_schema() AND indexname IN"
		                          " ('requests_started_at', 'requests_key_started_at',"
		                          " 'requests_model_started_at', 'usage_hourly_key_hour',"
		                          " 'usage_daily_key_day')"), 5);
		CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM information_schema.columns WHERE"
		                          " table_schema = current_schema() AND data_type = 'integer'"), 0);
		CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON"
		                          " c.oid = t.tgrelid JOIN pg_namespace n ON n.oid ="
		                          " c.relnamespace WHERE n.nspname = current_schema()"
		                          " AND NOT t.tgisinternal"), 12);
		CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM meta"), 2);
		db_close(db);
		db = test_open("create.db", DB_CREATE);
		CHECK(db != NULL);
		CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
		CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM meta"), 2);
		db_close(db);
		return;
	}
	CHECK_EQ_INT(test_int(db, "PRAGMA foreign_keys"), 1);
	CHECK_EQ_INT(test_int(db, "PRAGMA synchronous"), 1);   /* NORMAL */
	CHECK_EQ_INT(test_int(db, "PRAGMA busy_timeout"), DB_BUSY_TIMEOUT_MS);
	CHECK_EQ_INT(test_int(db, "SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN"
	                          " ('meta', 'providers', 'models', 'keys', 'key_models', 'requests', 'tag_budgets',"
	                          " 'usage_hourly', 'usage_daily', 'model_hourly', 'model_daily',"
	                          " 'key_hourly', 'key_daily', 'total_hourly', 'accounting', 'teams',"
	                          " 'team_models', 'team_hourly', 'team_daily', 'tag_daily', 'end_user_limits',"
	                          " 'model_budgets', 'team_model_daily', 'request_tags')"), 24);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN"
	                          " ('requests_started_at', 'requests_key_started_at',"
	                          " 'requests_model_started_at', 'usage_hourly_key_hour',"
	                          " 'usage_daily_key_day')"), 5);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"), 32);
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
		"INSERT INTO teams (name, created_at) VALUES ('t', 1)",
		"UPDATE teams SET members_see_usage = 1 WHERE name = 't'",
		("INSERT INTO end_user_limits (team_id, end_user, created_at, rpm)"
		 " SELECT id, '', 1, 5 FROM teams"),
		"UPDATE end_user_limits SET rpm = 6",
		"DELETE FROM end_user_limits",
		("INSERT INTO model_budgets (team_id, model, created_at, budget_micros)"
		 " SELECT id, 'm', 1, 5 FROM teams"),
		("INSERT INTO model_budgets (key_id, model, created_at, budget_micros)"
		 " SELECT id, 'm', 1, 5 FROM keys"),
		"UPDATE model_budgets SET budget_micros = 6 WHERE key_id IS NOT NULL",
		"DELETE FROM model_budgets WHERE team_id IS NOT NULL",
		"DELETE FROM model_budgets",
		"DELETE FROM teams",
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

		/* PostgreSQL's statement triggers also fire for a cascade that deletes no row
		 * (keys' and teams' to their allow-lists, end users' limits and budgets per
		 * model): one more for each */
		int cascaded = test_kind == DB_POSTGRES && d >= 2 && d <= 4 &&
		               strncmp(one_each[i], "DELETE", 6) == 0;

		if (d != 1 && !cascaded)
			fprintf(stderr, "bump %lld for: %s\n", (long long)d, one_each[i]);
		CHECK(d == 1 || cascaded);
	}
	if (test_kind == DB_SQLITE)
		CHECK_EQ_INT(db_config_generation(db), 26);
	/* A statement touching no row fires no row trigger on SQLite; PostgreSQL's run per
	 * statement (sql/pg/schema.sql says why that does no harm). */
	CHECK_EQ_INT(test_bump(db, "UPDATE keys SET revoked_at = 3 WHERE name = 'nobody'"),
	             test_kind == DB_POSTGRES);
	db_close(db);
}

/* Rows by name: a failed insert uses up a PostgreSQL identity value. */
#define TEST_PROVIDER "(SELECT id FROM providers WHERE name = 'p')"
#define TEST_MODEL "(SELECT id FROM models WHERE name = 'm')"
#define TEST_KEY "(SELECT id FROM keys WHERE name = 'k')"

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
	                           " VALUES ('m', " TEST_PROVIDER ", 1, 1)"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_prices (model_id, tier, above_tokens,"
	                           " output_micros_per_mtok) VALUES (" TEST_MODEL ", 'default', 0, -1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_prices (model_id, tier, above_tokens)"
	                           " VALUES (" TEST_MODEL ", '', 0)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_prices (model_id, tier, above_tokens)"
	                           " VALUES (99, 'default', 0)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_prices (model_id, tier, above_tokens)"
	                           " VALUES (" TEST_MODEL ", 'default', 0)"), 0);
	/* A price not given is unknown, never 0. */
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_prices WHERE input_micros_per_mtok"
	                          " IS NULL AND output_micros_per_mtok IS NULL AND"
	                          " cached_micros_per_mtok IS NULL AND web_search_micros_per_call"
	                          " IS NULL"), 1);
	CHECK_EQ_INT(test_exec(db, "UPDATE model_prices SET cache_write_micros_per_mtok = -1"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE keys SET server_tools = 'sometimes'"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at, audio)"
	                           " VALUES ('ka', 'x', zeroblob(32), 1, 'maybe')"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at, cache_writes)"
	                           " VALUES ('kc', 'x', zeroblob(32), 1, 'maybe')"), -1);
	/* A model's cards go with it. */
	CHECK_EQ_INT(test_exec(db, "DELETE FROM models WHERE name = 'm'"), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_prices"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO models (name, provider_id, created_at, updated_at)"
	                           " VALUES ('m', " TEST_PROVIDER ", 1, 1)"), 0);
	CHECK_EQ_INT(test_exec(db, "DELETE FROM providers"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at)"
	                           " VALUES ('k', 'x', zeroblob(31), 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at)"
	                           " VALUES ('k', 'x', zeroblob(32), 1)"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at)"
	                           " VALUES ('k2', 'x', zeroblob(32), 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO key_models VALUES (" TEST_KEY ", 'm'),"
	                           " (" TEST_KEY ", 'n')"), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO key_models VALUES (" TEST_KEY ", 'm')"), -1);
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
		CHECK_EQ_INT(db_open(test_store("newer.db"), modes[i], &db, err, sizeof(err)), -1);
		CHECK(db == NULL);
		CHECK(strstr(err, "newer than this binary") != NULL);
	}
}

static void test_uninitialised_refused(void)
{
	char err[512] = "";
	struct db *db = NULL;
	FILE *f;

	/* An empty file (schema): only DB_CREATE may initialise it. */
	if (test_kind == DB_SQLITE) {
		f = fopen(tmpdir_file("empty.db"), "w");
		CHECK(f != NULL);
		if (f)
			fclose(f);
	}
	CHECK_EQ_INT(db_open(test_store("empty.db"), DB_READWRITE, &db, err, sizeof(err)), -1);
	CHECK(strstr(err, "no tally schema") != NULL);

	/* Somebody else's database (tables, no version) is never taken over. */
	if (test_kind == DB_POSTGRES) {
		test_store("foreign.db");
		CHECK_EQ_INT(test_exec(test_admin, "CREATE TABLE s_foreign_db.theirs (x INTEGER)"), 0);
	} else {
		db = test_open("foreign.db", DB_CREATE);
		CHECK(db != NULL);
		if (db)
			CHECK_EQ_INT(test_exec(db, "PRAGMA user_version = 0; CREATE TABLE theirs (x)"), 0);
		db_close(db);
	}
	CHECK_EQ_INT(db_open(test_store("foreign.db"), DB_CREATE, &db, err, sizeof(err)), -1);
	CHECK(strstr(err, "not a tally database") != NULL);
}

/* Test migrations after the built-in ones: list[i] upgrades version i + 1. Entries
 * below DB_SCHEMA_VERSION never run on a database created at that version. Room for
 * the three extra ones test_migrate adds, whatever the version. */
#define TEST_MIGRATIONS_MAX (DB_SCHEMA_VERSION + 2)

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
		"CREATE TABLE ok2 (x INTEGER)",
		"CREATE TABLE half (x INTEGER); INSERT INTO nosuch VALUES (1)",
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
	CHECK(test_has_table(db, "ok2"));
	CHECK(!test_has_table(db, "half"));
	CHECK(!db_in_transaction(db));
	db_close(db);
}

/* Schema 22's parts, dropped to make a database of before it (test_exec writes the drop of
 * the triggers as PostgreSQL's). */
#define TEST_UNDO_22 "DROP TRIGGER requests_tags_insert;"                             \
                     " DROP TRIGGER requests_tags_delete; DROP TABLE request_tags;"

/* Schema 21's parts, likewise (and every later one). */
#define TEST_UNDO_21 TEST_UNDO_22 " ALTER TABLE keys DROP COLUMN budget_tz;"         \
                     " ALTER TABLE teams DROP COLUMN budget_tz;"

/* Schema 20's part, likewise (and every later one). */
#define TEST_UNDO_20 TEST_UNDO_21 " DROP TABLE tag_total_daily;"

/* Schema 19's parts, likewise (their triggers go with them; and every later one). */
#define TEST_UNDO_19 TEST_UNDO_20 " DROP TABLE team_model_daily; DROP TABLE model_budgets;"

/* Schema 18's part, likewise (and every later one). */
#define TEST_UNDO_18 TEST_UNDO_19 " DROP TABLE end_user_limits;"

/* Schema 16's parts, likewise (and every later one). */
#define TEST_UNDO_16 TEST_UNDO_18 " DROP TABLE tag_daily; DROP TABLE tag_budgets;"                   \
                     " ALTER TABLE requests DROP COLUMN tags;"                        \
                     " ALTER TABLE keys DROP COLUMN tags; ALTER TABLE teams DROP COLUMN tags;"

/* Schema 15's parts, likewise. */
#define TEST_UNDO_15 TEST_UNDO_16 " DROP INDEX requests_end_user_started_at;"          \
                     " ALTER TABLE requests DROP COLUMN end_user;"                    \
                     " ALTER TABLE keys DROP COLUMN end_users; DROP TABLE end_user_daily;"

/* Migration 014 on either store: a team of schema 13 lets its keys see its figures only
 * once told (members_see_usage 0); the flag takes 0 or 1 alone, and turning it moves
 * config_generation. */
static void test_migrate_team_visibility(void)
{
	struct db *db = test_open("teamvis.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, "INSERT INTO teams (name, created_at) VALUES ('a', 1)"), 0);
	CHECK_EQ_INT(test_int(db, "SELECT members_see_usage FROM teams"), 0);
	CHECK_EQ_INT(test_exec(db, TEST_UNDO_15 " ALTER TABLE teams DROP COLUMN members_see_usage;"
	                           " DROP INDEX key_hourly_key_hour; DROP INDEX team_hourly_team_hour"), 0);
	db_close(db);
	test_set_version("teamvis.db", 13);
	db = test_open("teamvis.db", DB_CREATE);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM teams WHERE name = 'a'"
	                          " AND members_see_usage = 0"), 1);
	CHECK_EQ_INT(test_exec(db, "UPDATE teams SET members_see_usage = 2"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE teams SET members_see_usage = NULL"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO teams (name, created_at, members_see_usage)"
	                           " VALUES ('b', 1, -1)"), -1);
	CHECK_EQ_INT(test_bump(db, "UPDATE teams SET members_see_usage = 1"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT members_see_usage FROM teams WHERE name = 'a'"), 1);
	db_close(db);
}

/* Migration 015: a key of schema 14 lets its requests name end users or not
 * (end_users 'optional'), the policy takes its three values alone, and rows keep the end
 * user they named. */
static void test_migrate_end_users(void)
{
	struct db *db = test_open("endusers.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, TEST_UNDO_15), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at)"
	                           " VALUES ('k', 'tk-', zeroblob(32), 1)"), 0);
	db_close(db);
	test_set_version("endusers.db", 14);
	db = test_open("endusers.db", DB_CREATE);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM keys WHERE end_users = 'optional'"), 1);
	CHECK_EQ_INT(test_exec(db, "UPDATE keys SET end_users = 'sometimes'"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE keys SET end_users = NULL"), -1);
	CHECK_EQ_INT(test_bump(db, "UPDATE keys SET end_users = 'required'"), 1);
	CHECK_EQ_INT(test_bump(db, "UPDATE keys SET end_users = 'forbidden'"), 1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO requests (request_id, outcome, usage_source,"
	                           " started_at, end_user) VALUES ('r', 'complete', 'none', 1,"
	                           " 'user-1')"), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM requests WHERE end_user = 'user-1'"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM end_user_daily"), 0);
	db_close(db);
}

/* Migration 016: keys and teams of schema 15 fix no tags, rows keep the tags they
 * carried, and a tag's budget is positive, of a known period, one per tag, and moves
 * config_generation. */
static void test_migrate_tags(void)
{
	struct db *db = test_open("tags.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, TEST_UNDO_16), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO keys (name, prefix, hash, created_at)"
	                           " VALUES ('k', 'tk-', zeroblob(32), 1);"
	                           " INSERT INTO teams (name, created_at) VALUES ('t', 1)"), 0);
	db_close(db);
	test_set_version("tags.db", 15);
	db = test_open("tags.db", DB_CREATE);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM keys WHERE tags IS NULL"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM teams WHERE tags IS NULL"), 1);
	CHECK_EQ_INT(test_bump(db, "UPDATE keys SET tags = 'env=prod'"), 1);
	CHECK_EQ_INT(test_bump(db, "UPDATE teams SET tags = 'project=atlas'"), 1);
	CHECK_EQ_INT(test_bump(db, "INSERT INTO tag_budgets (tag, created_at, budget_micros)"
	                           " VALUES ('project=atlas', 1, 500000000)"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM tag_budgets WHERE budget_period = 'month'"), 1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO tag_budgets (tag, created_at, budget_micros)"
	                           " VALUES ('project=atlas', 1, 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO tag_budgets (tag, created_at, budget_micros)"
	                           " VALUES ('env=dev', 1, 0)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO tag_budgets (tag, created_at, budget_micros,"
	                           " budget_period) VALUES ('env=dev', 1, 1, 'year')"), -1);
	CHECK_EQ_INT(test_bump(db, "DELETE FROM tag_budgets"), 1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO requests (request_id, outcome, usage_source,"
	                           " started_at, tags) VALUES ('r', 'complete', 'none', 1,"
	                           " 'env=prod,project=atlas')"), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM requests WHERE tags IS NOT NULL"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM tag_daily"), 0);
	db_close(db);
}

/* Schema 17's part, undone to make a database of before it (and 18's): the budget
 * periods' CHECK without 'week', rewritten as migration 017 rewrites it on SQLite. */
static int test_undo_17(struct db *db)
{
	static const char *const tables[] = { "keys", "teams", "tag_budgets" };
	char sql[512];
	size_t i;

	if (test_exec(db, TEST_UNDO_18) < 0)
		return -1;
	if (db_kind(db) == DB_SQLITE)
		return test_exec(db, "PRAGMA writable_schema = ON;"
		                     " UPDATE sqlite_schema SET sql = replace(sql, '''week'', ', '')"
		                     " WHERE type = 'table' AND name IN ('keys', 'teams', 'tag_budgets');"
		                     " PRAGMA writable_schema = RESET;"
		                     " CREATE TABLE undo_17 (x INTEGER); DROP TABLE undo_17");
	for (i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		snprintf(sql, sizeof(sql), "ALTER TABLE %s DROP CONSTRAINT %s_budget_period_check,"
		         " ADD CONSTRAINT %s_budget_period_check"
		         " CHECK (budget_period IN ('day', 'month', 'total'))",
		         tables[i], tables[i], tables[i]);
		if (test_exec(db, sql) < 0)
			return -1;
	}
	return 0;
}

/* Migration 017: keys, teams and tag budgets of schema 16 may take weekly budgets; no
 * row changes (the keys' allow-lists, which cascade from keys, included), nothing
 * else is admitted, and a change to a period still moves config_generation. */
static void test_migrate_weeks(void)
{
	static const char *const weekly[] = {
		"UPDATE keys SET budget_period = 'week', budget_micros = 5",
		"UPDATE teams SET budget_period = 'week', budget_micros = 5",
		("INSERT INTO tag_budgets (tag, created_at, budget_micros, budget_period)"
		 " VALUES ('env=prod', 1, 5, 'week')"),
	};
	struct db *db = test_open("weeks.db", DB_CREATE);
	size_t i;

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_undo_17(db), 0);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO teams (name, created_at, budget_micros,"
	                           " budget_period) VALUES ('t', 1, 7, 'day');"
	                           " INSERT INTO keys (name, prefix, hash, created_at, team_id)"
	                           " VALUES ('k', 'tk-', zeroblob(32), 1, 1);"
	                           " INSERT INTO key_models (key_id, model) VALUES (1, 'm')"), 0);
	CHECK_EQ_INT(test_exec(db, weekly[0]), -1);    /* schema 16 refuses it */
	db_close(db);
	test_set_version("weeks.db", 16);
	db = test_open("weeks.db", DB_CREATE);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM key_models"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM teams WHERE budget_period = 'day'"
	                          " AND budget_micros = 7"), 1);
	for (i = 0; i < sizeof(weekly) / sizeof(weekly[0]); i++)
		CHECK_EQ_INT(test_bump(db, weekly[i]), 1);
	CHECK_EQ_INT(test_exec(db, "UPDATE keys SET budget_period = 'year'"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE teams SET budget_period = 'Week'"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE tag_budgets SET budget_period = 'weekly'"), -1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM key_models"), 1);
	db_close(db);
}

/* Migration 018: a key or a team (never both, never neither) holds end users' limits,
 * one row per end user ('' for the default), positive or none, of a known period;
 * a row goes with its key or team, and every change moves config_generation. */
static void test_migrate_end_user_limits(void)
{
	struct db *db = test_open("eulimits.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, TEST_UNDO_18
	                           " INSERT INTO teams (name, created_at) VALUES ('t', 1);"
	                           " INSERT INTO keys (name, prefix, hash, created_at, team_id)"
	                           " VALUES ('k', 'tk-', zeroblob(32), 1, 1)"), 0);
	db_close(db);
	test_set_version("eulimits.db", 17);
	db = test_open("eulimits.db", DB_CREATE);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_bump(db, "INSERT INTO end_user_limits (key_id, end_user, created_at, rpm)"
	                           " VALUES (1, '', 1, 5)"), 1);
	CHECK_EQ_INT(test_bump(db, "INSERT INTO end_user_limits (team_id, end_user, created_at,"
	                           " budget_micros, budget_period) VALUES (1, 'alice', 1, 9, 'week')"), 1);
	CHECK_EQ_INT(test_bump(db, "INSERT INTO end_user_limits (key_id, end_user, created_at)"
	                           " VALUES (1, 'bob', 1)"), 1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO end_user_limits (key_id, end_user, created_at)"
	                           " VALUES (1, '', 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO end_user_limits (end_user, created_at)"
	                           " VALUES ('x', 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO end_user_limits (key_id, team_id, end_user,"
	                           " created_at) VALUES (1, 1, 'x', 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO end_user_limits (key_id, end_user, created_at, tpm)"
	                           " VALUES (1, 'x', 1, 0)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO end_user_limits (key_id, end_user, created_at,"
	                           " budget_period) VALUES (1, 'x', 1, 'year')"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO end_user_limits (key_id, end_user, created_at)"
	                           " VALUES (1, printf('%.257c', 'u'), 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO end_user_limits (key_id, end_user, created_at)"
	                           " VALUES (2, 'x', 1)"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE keys SET team_id = NULL; DELETE FROM teams"), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM end_user_limits"), 2);
	db_close(db);
}

/* Migration 019: the rows a database of schema 18 made under a team are summed into
 * team_model_daily by day, team, model and provider (rows without a team in none, a
 * NULL model or provider as ''); a key or a team (never both, never neither) holds
 * budgets per model, one per model each, positive, of a known period ('month' unless
 * told), which go with their key or team, and every change moves config_generation. */
static void test_migrate_model_budgets(void)
{
	/* (request_id, outcome, usage_source, started_at, stream, team_id, model, provider,
	 * prompt_tokens, completion_tokens, cost_micros, duration_ms, estimated_tokens,
	 * estimated_cost_micros, web_search_calls); day 1 is 86400 s, day 2 172800 s. */
	static const char rows[] =
		"INSERT INTO requests (request_id, outcome, usage_source, started_at, stream,"
		" team_id, model, provider, prompt_tokens, completion_tokens, cost_micros,"
		" duration_ms, estimated_tokens, estimated_cost_micros, web_search_calls) VALUES"
		" ('a', 'complete', 'response', 86400000, 1, 1, 'm', 'p', 100, 10, 7, 25, NULL, NULL, 2),"
		" ('b', 'upstream_error', 'none', 86400999, 0, 1, 'm', 'p', NULL, NULL, NULL, 26,"
		"  300, 4, NULL),"
		" ('c', 'complete', 'response', 172799999, NULL, 1, 'm', 'p', 5, NULL, NULL, NULL,"
		"  NULL, NULL, NULL),"
		" ('d', 'complete', 'response', 172800000, 1, 1, 'm', 'p', 1, 1, 0, 60001, 0, 0, 0),"
		" ('e', 'client_abort', 'none', 90000000, NULL, 1, NULL, NULL, NULL, NULL, NULL, 0,"
		"  NULL, NULL, NULL),"
		" ('f', 'complete', 'response', 90000000, 0, 2, 'm', 'q', 3, 4, 9, 1000, NULL, NULL,"
		"  NULL),"
		" ('g', 'complete', 'response', 90000000, 1, NULL, 'm', 'p', 50, 50, 50, 10, NULL,"
		"  NULL, NULL)";
	struct db *db = test_open("modelbudgets.db", DB_CREATE);
	int64_t generation = -1;

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, TEST_UNDO_19
	                           " INSERT INTO teams (name, created_at) VALUES ('t', 1);"
	                           " INSERT INTO teams (name, created_at) VALUES ('u', 1);"
	                           " INSERT INTO keys (name, prefix, hash, created_at, team_id)"
	                           " VALUES ('k', 'tk-', zeroblob(32), 1, 1)"), 0);
	/* another hash: keys' are unique */
	CHECK_EQ_INT(test_exec(db, test_kind == DB_POSTGRES
	                           ? "INSERT INTO keys (name, prefix, hash, created_at)"
	                             " VALUES ('k2', 'tk2-', decode(repeat('01', 32), 'hex'), 1)"
	                           : "INSERT INTO keys (name, prefix, hash, created_at)"
	                             " VALUES ('k2', 'tk2-', CAST(printf('%.32c', 'x') AS BLOB), 1)"), 0);
	CHECK_EQ_INT(test_exec(db, rows), 0);
	generation = db_config_generation(db);
	db_close(db);
	test_set_version("modelbudgets.db", 18);
	db = test_open("modelbudgets.db", DB_CREATE);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	/* Team 1: model m at p on day 1 (a, b, c) and day 2 (d); no model on day 1 (e); team
	 * 2: m at q on day 1 (f); g has no team. */
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM team_model_daily"), 4);
	CHECK_EQ_INT(test_int(db, "SELECT sum(requests) FROM team_model_daily"), 6);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM team_model_daily WHERE day = 86400"
	                          " AND team_id = 1 AND model = 'm' AND provider = 'p'"
	                          " AND requests = 3 AND errors = 1 AND streams = 1"
	                          " AND prompt_tokens = 105 AND completion_tokens = 10"
	                          " AND cost_micros = 7 AND unpriced = 1 AND duration_ms_sum = 51"
	                          " AND lat_le_25 = 1 AND lat_le_50 = 1 AND lat_gt_60000 = 0"
	                          " AND estimated = 1 AND estimated_tokens = 300"
	                          " AND estimated_cost_micros = 4 AND web_search_calls = 2"
	                          " AND cached_tokens = 0 AND audio_input_tokens = 0"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM team_model_daily WHERE day = 172800"
	                          " AND team_id = 1 AND model = 'm' AND provider = 'p'"
	                          " AND requests = 1 AND errors = 0 AND streams = 1"
	                          " AND cost_micros = 0 AND unpriced = 0 AND lat_gt_60000 = 1"
	                          " AND lat_le_60000 = 0 AND duration_ms_sum = 60001"
	                          " AND estimated = 1 AND estimated_tokens = 0"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM team_model_daily WHERE day = 86400"
	                          " AND team_id = 1 AND model = '' AND provider = ''"
	                          " AND requests = 1 AND errors = 1 AND streams = 0"
	                          " AND unpriced = 0 AND lat_le_25 = 1 AND duration_ms_sum = 0"
	                          " AND estimated = 0"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM team_model_daily WHERE day = 86400"
	                          " AND team_id = 2 AND model = 'm' AND provider = 'q'"
	                          " AND requests = 1 AND prompt_tokens = 3 AND cost_micros = 9"
	                          " AND lat_le_1000 = 1 AND lat_le_750 = 0"), 1);
	/* Nothing else moved: the rollups of before are the writer's alone. */
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM team_daily"), 0);
	CHECK_EQ_INT(db_config_generation(db), generation);

	/* Budgets per model. */
	CHECK_EQ_INT(test_bump(db, "INSERT INTO model_budgets (key_id, model, created_at,"
	                           " budget_micros) VALUES (1, 'm', 1, 5)"), 1);
	CHECK_EQ_INT(test_bump(db, "INSERT INTO model_budgets (team_id, model, created_at,"
	                           " budget_micros, budget_period) VALUES (1, 'm', 1, 9, 'week')"), 1);
	CHECK_EQ_INT(test_bump(db, "INSERT INTO model_budgets (key_id, model, created_at,"
	                           " budget_micros, budget_period) VALUES (2, 'm', 1, 3, 'total')"), 1);
	CHECK_EQ_INT(test_bump(db, "INSERT INTO model_budgets (team_id, model, created_at,"
	                           " budget_micros, budget_period) VALUES (2, 'n', 1, 4, 'day')"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_budgets WHERE key_id = 1"
	                          " AND budget_period = 'month'"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_budgets WHERE id <= 0"), 0);
	/* One per key and model, one per team and model. */
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (key_id, model, created_at,"
	                           " budget_micros) VALUES (1, 'm', 1, 6)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (team_id, model, created_at,"
	                           " budget_micros) VALUES (1, 'm', 1, 6)"), -1);
	/* A key or a team, never both, never neither. */
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (key_id, team_id, model,"
	                           " created_at, budget_micros) VALUES (1, 1, 'x', 1, 5)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (model, created_at, budget_micros)"
	                           " VALUES ('x', 1, 5)"), -1);
	/* A model, a positive budget, a known period, an existing key or team. */
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (key_id, model, created_at,"
	                           " budget_micros) VALUES (1, '', 1, 5)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (key_id, model, created_at,"
	                           " budget_micros) VALUES (1, NULL, 1, 5)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (key_id, model, created_at,"
	                           " budget_micros) VALUES (1, 'x', 1, 0)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (key_id, model, created_at,"
	                           " budget_micros) VALUES (1, 'x', 1, NULL)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (key_id, model, created_at,"
	                           " budget_micros, budget_period) VALUES (1, 'x', 1, 5, 'year')"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (key_id, model, created_at,"
	                           " budget_micros) VALUES (99, 'x', 1, 5)"), -1);
	CHECK_EQ_INT(test_exec(db, "INSERT INTO model_budgets (team_id, model, created_at,"
	                           " budget_micros) VALUES (99, 'x', 1, 5)"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE model_budgets SET team_id = 1 WHERE key_id = 1"), -1);
	CHECK_EQ_INT(test_exec(db, "UPDATE model_budgets SET budget_micros = -1"), -1);
	CHECK_EQ_INT(test_bump(db, "UPDATE model_budgets SET budget_micros = 7 WHERE key_id = 1"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_budgets"), 4);
	/* A budget goes with its key or its team. */
	CHECK(test_bump(db, "DELETE FROM keys WHERE name = 'k2'") >= 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_budgets WHERE key_id = 2"), 0);
	CHECK(test_bump(db, "UPDATE keys SET team_id = NULL; DELETE FROM teams WHERE name = 'u'") >= 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_budgets WHERE team_id = 2"), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM model_budgets"), 2);
	CHECK_EQ_INT(test_bump(db, "DELETE FROM model_budgets WHERE team_id = 1"), 1);
	/* The rollup stays: a team's rows outlive it. */
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM team_model_daily WHERE team_id = 2"), 1);
	db_close(db);
}

/* Migration 020: a database of schema 19's tag_daily is summed over keys into
 * tag_total_daily, a row per tag and day, every column (a tag on two keys and two days,
 * another on one); nothing else moves. */
static void test_migrate_tag_totals(void)
{
	/* (day, tag, key_id, the sums in the table's order to lat_gt_60000, then web search
	 * calls and audio input and output; estimated and the rest 0) */
	static const char rows[] =
		"INSERT INTO tag_daily (day, tag, key_id, requests, errors, streams, prompt_tokens,"
		" completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,"
		" cost_micros, unpriced, duration_ms_sum, lat_le_25, lat_le_50, lat_le_100,"
		" lat_le_200, lat_le_350, lat_le_500, lat_le_750, lat_le_1000, lat_le_1500,"
		" lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000,"
		" lat_gt_60000, web_search_calls, audio_input_tokens, audio_output_tokens) VALUES"
		" (86400, 'env=prod', 1, 3, 1, 1, 30, 3, 0, 0, 0, 700, 1, 90, 2, 1, 0, 0, 0, 0, 0, 0,"
		"  0, 0, 0, 0, 0, 0, 0, 0, 4, 6, 9),"
		" (86400, 'env=prod', 2, 2, 0, 2, 20, 2, 5, 0, 0, 11, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0,"
		"  0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0),"
		" (172800, 'env=prod', 1, 1, 0, 0, 1, 1, 0, 0, 0, 5, 0, 10, 1, 0, 0, 0, 0, 0, 0, 0,"
		"  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),"
		" (86400, 'team=a', 2, 4, 0, 0, 8, 8, 0, 0, 0, 40, 0, 4, 4, 0, 0, 0, 0, 0, 0, 0,"
		"  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)";
	struct db *db = test_open("tagtotals.db", DB_CREATE);

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, TEST_UNDO_20), 0);
	CHECK_EQ_INT(test_exec(db, rows), 0);
	db_close(db);
	test_set_version("tagtotals.db", 19);
	db = test_open("tagtotals.db", DB_CREATE);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM tag_total_daily"), 3);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM tag_total_daily WHERE day = 86400"
	                          " AND tag = 'env=prod' AND requests = 5 AND errors = 1"
	                          " AND streams = 3 AND prompt_tokens = 50 AND completion_tokens = 5"
	                          " AND cached_tokens = 5 AND cost_micros = 711 AND unpriced = 1"
	                          " AND duration_ms_sum = 150 AND lat_le_25 = 2 AND lat_le_50 = 1"
	                          " AND lat_gt_60000 = 2 AND web_search_calls = 4"
	                          " AND audio_input_tokens = 7 AND audio_output_tokens = 9"
	                          " AND estimated = 0"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM tag_total_daily WHERE day = 172800"
	                          " AND tag = 'env=prod' AND requests = 1 AND cost_micros = 5"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM tag_total_daily WHERE day = 86400"
	                          " AND tag = 'team=a' AND requests = 4 AND cost_micros = 40"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM tag_daily"), 4);
	/* One row per tag and day. */
	CHECK_EQ_INT(test_exec(db, "INSERT INTO tag_total_daily SELECT * FROM tag_total_daily"
	                           " WHERE tag = 'team=a'"), -1);
	db_close(db);
}

/* Migration 022 on either store: request_tags gets a row per tag of each tagged row of
 * schema 21 (and none of an untagged one), then the triggers keep it: a row stored, a
 * duplicate record refused, a row deleted. */
static void test_migrate_request_tags(void)
{
	static const char cols[] = "INSERT INTO requests (request_id, outcome, usage_source,"
	                           " started_at, tags) VALUES ";
	struct db *db = test_open("reqtags.db", DB_CREATE);
	char sql[512];

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, TEST_UNDO_22), 0);
	snprintf(sql, sizeof(sql), "%s ('a', 'complete', 'none', 5, 'env=prod,x=a/b:c@d+e'),"
	         " ('b', 'complete', 'none', 6, NULL), ('c', 'complete', 'none', 5, 'env=prod')",
	         cols);
	CHECK_EQ_INT(test_exec(db, sql), 0);
	db_close(db);
	test_set_version("reqtags.db", 21);
	db = test_open("reqtags.db", DB_CREATE);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_schema_version(db), DB_SCHEMA_VERSION);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM request_tags"), 3);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM request_tags g JOIN requests r ON"
	                          " r.id = g.id AND r.started_at = g.started_at WHERE"
	                          " (g.tag = 'env=prod' AND r.request_id IN ('a', 'c')) OR"
	                          " (g.tag = 'x=a/b:c@d+e' AND r.request_id = 'a')"), 3);
	snprintf(sql, sizeof(sql), "%s ('d', 'complete', 'none', 9, 'env=dev,team=a')"
	         " ON CONFLICT (request_id) DO NOTHING", cols);
	CHECK_EQ_INT(test_exec(db, sql), 0);
	snprintf(sql, sizeof(sql), "%s ('a', 'complete', 'none', 9, 'env=dev')"
	         " ON CONFLICT (request_id) DO NOTHING", cols);
	CHECK_EQ_INT(test_exec(db, sql), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM request_tags"), 5);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM request_tags g JOIN requests r ON"
	                          " r.id = g.id WHERE r.request_id = 'd' AND g.started_at = 9"
	                          " AND g.tag IN ('env=dev', 'team=a')"), 2);
	/* no text the agent never writes fails the row: a tag twice, a quote */
	snprintf(sql, sizeof(sql), "%s ('e', 'complete', 'none', 9, 'q=\"x,q=\"x')", cols);
	CHECK_EQ_INT(test_exec(db, sql), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM request_tags WHERE tag = 'q=\"x'"), 1);
	/* a NUL byte after a comma (PostgreSQL's text holds none): instr() sees past it,
	 * substr() does not; the split still ends */
	if (db_kind(db) == DB_SQLITE) {
		snprintf(sql, sizeof(sql), "%s ('f', 'complete', 'none', 9,"
		         " CAST(X'612C620063' AS TEXT))", cols);
		CHECK_EQ_INT(test_exec(db, sql), 0);
		CHECK_EQ_INT(test_exec(db, "DELETE FROM requests WHERE request_id = 'f'"), 0);
	}
	CHECK_EQ_INT(test_exec(db, "DELETE FROM requests WHERE request_id IN ('a', 'b', 'e')"), 0);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM request_tags"), 3);
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM request_tags WHERE tag = 'x=a/b:c@d+e'"), 0);
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
	                           " ALTER TABLE requests DROP COLUMN model_reported;"
	                           " ALTER TABLE requests DROP COLUMN priced_fallback;"
	                           " ALTER TABLE models DROP COLUMN max_output;"
	                           " ALTER TABLE keys DROP COLUMN cache_writes;"
	                           " DROP INDEX requests_team_started_at;"
	                           " " TEST_UNDO_15
	                           " DROP INDEX key_hourly_key_hour;"
	                           " ALTER TABLE requests DROP COLUMN team_id;"
	                           " ALTER TABLE keys DROP COLUMN team_id;"
	                           " DROP TABLE team_models; DROP TABLE teams;"
	                           " DROP TABLE team_hourly; DROP TABLE team_daily;"
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
		char name[32], store[1024], err[512], c;
		int start[2], i, status;
		pid_t pid[2];
		struct db *db;

		/* named here: a child must not use the parent's connection (test_admin) */
		snprintf(name, sizeof(name), "race%d.db", round);
		snprintf(store, sizeof(store), "%s", test_store(name));
		if (pipe(start) < 0) {
			CHECK(!"pipe");
			return;
		}
		for (i = 0; i < 2; i++) {
			pid[i] = fork();
			if (pid[i] == 0) {
				close(start[1]);
				db = NULL;
				if (read(start[0], &c, 1) == 0 &&
				    db_open(store, DB_CREATE, &db, err, sizeof(err)) < 0)
					fprintf(stderr, "race: %s\n", err);
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
		/* PostgreSQL keeps the schema version in meta too */
		CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM meta"), test_kind == DB_POSTGRES ? 2 : 1);
		CHECK_EQ_INT(db_config_generation(db), 0);
		db_close(db);
	}
}

/* ---- the statement API, on either store ---- */

/* The first row's column 0 of sql run with one text parameter, as text ("" if none). */
static const char *test_text1(struct db *db, const char *sql, const char *arg)
{
	static char out[256];
	struct db_stmt *st = NULL;

	out[0] = '\0';
	if (db_prepare(db, sql, &st) < 0) {
		fprintf(stderr, "prepare %s: %s\n", sql, db_errmsg(db));
		return out;
	}
	if (arg)
		CHECK_EQ_INT(db_bind_text(st, 1, arg, strlen(arg)), 0);
	if (db_step(st) == DB_ROW && db_col_text(st, 0))
		snprintf(out, sizeof(out), "%s", db_col_text(st, 0));
	db_finalize(st);
	return out;
}

/* SQLite's parameters in the forms tally writes, numbered as SQLite numbers them;
 * quotes and comments keep what looks like one. */
static void test_params(void)
{
	struct db *db = test_open("params.db", DB_CREATE);
	struct db_stmt *st = NULL;

	CHECK(db != NULL);
	if (!db)
		return;
	/* ?N, bare ? after it, :name numbered by first appearance and reused */
	CHECK_EQ_INT(db_prepare(db, "SELECT ?2 || ?1 || ? || :a || :b || :a", &st), 0);
	if (st) {
		CHECK_EQ_INT(db_param_count(st), 5);
		CHECK_EQ_INT(db_param_index(st, ":a"), 4);
		CHECK_EQ_INT(db_param_index(st, ":b"), 5);
		CHECK_EQ_INT(db_param_index(st, ":c"), 0);
		CHECK_EQ_INT(db_bind_text(st, 1, "1xx", 1), 0);   /* not NUL-terminated there */
		CHECK_EQ_INT(db_bind_text(st, 2, "2", 1), 0);
		CHECK_EQ_INT(db_bind_text(st, 3, "3", 1), 0);
		CHECK_EQ_INT(db_bind_text(st, 4, "a", 1), 0);
		CHECK_EQ_INT(db_bind_text(st, 5, "b", 1), 0);
		CHECK_EQ_INT(db_bind_text(st, 6, "x", 1), -1);
		CHECK_EQ_INT(db_bind_int(st, 0, 1), -1);
		CHECK_EQ_INT(db_step(st), DB_ROW);
		CHECK_EQ_STR(db_col_text(st, 0), "213aba");
		CHECK_EQ_INT(db_step(st), DB_DONE);
		/* bindings stay over a reset */
		db_reset(st);
		CHECK_EQ_INT(db_step(st), DB_ROW);
		CHECK_EQ_STR(db_col_text(st, 0), "213aba");
		db_finalize(st);
	}
	/* quoted text, identifiers and comments are not parameters */
	CHECK_EQ_STR(test_text1(db, "SELECT '?:x''?' || ? -- ? :y\n", "p"), "?:x'?p");
	CHECK_EQ_STR(test_text1(db, "SELECT /* ? :z */ ? AS \"a?:b\"", "q"), "q");
	CHECK_EQ_INT(db_prepare(db, "SELECT '?', \"name\" FROM (SELECT 1 AS \"name\") t"
	                            " WHERE ? = 1", &st), 0);
	if (st) {
		CHECK_EQ_INT(db_param_count(st), 1);
		CHECK_EQ_STR(db_col_name(st, 1), "name");
		db_finalize(st);
	}
	/* an integer parameter is 64-bit even where PostgreSQL would guess 32 */
	CHECK_EQ_INT(db_prepare(db, "SELECT ? * 1000", &st), 0);
	if (st) {
		CHECK_EQ_INT(db_bind_int(st, 1, 1700000000123LL), 0);
		CHECK_EQ_INT(db_step(st), DB_ROW);
		CHECK_EQ_INT(db_col_int(st, 0), 1700000000123000LL);
		db_finalize(st);
	}
	if (test_kind == DB_POSTGRES) {
		/* PostgreSQL's own quoting: casts, E'' escapes, nested comments, $$ */
		CHECK_EQ_STR(test_text1(db, "SELECT ?::text || '1'::text", "c"), "c1");
		CHECK_EQ_STR(test_text1(db, "SELECT E'\\'?' || ?", "e"), "'?e");
		CHECK_EQ_STR(test_text1(db, "SELECT /* a /* ? */ ? */ ?", "n"), "n");
		CHECK_EQ_STR(test_text1(db, "SELECT $$?:a$$ || $t$'?$t$ || ?", "d"), "?:a'?d");
		CHECK_EQ_STR(test_text1(db, "SELECT CAST(:v AS TEXT)", "v"), "v");
	}
	CHECK_EQ_INT(db_prepare(db, "SELECT nosuch FROM nowhere", &st), -1);
	CHECK(st == NULL);
	CHECK(strstr(db_errmsg(db), "nowhere") != NULL);
	db_close(db);
}

/* NULL, integers, text and blobs go in and come back as they were. */
static void test_roundtrip(void)
{
	static const unsigned char blob[] = { 0, 1, 0xff, 0, '\\', 'x', 0 };
	static const int64_t ints[] = { 0, 1, -1, INT64_MAX, INT64_MIN, 1700000000123LL };
	struct db *db = test_open("round.db", DB_CREATE);
	struct db_stmt *ins = NULL, *sel = NULL;
	size_t i;

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(test_exec(db, test_kind == DB_POSTGRES
	                           ? "CREATE TABLE rt (k BIGINT PRIMARY KEY, i BIGINT, t TEXT, b BYTEA)"
	                           : "CREATE TABLE rt (k INTEGER PRIMARY KEY, i INTEGER, t TEXT, b BLOB)"),
	             0);
	CHECK_EQ_INT(db_prepare(db, "INSERT INTO rt (k, i, t, b) VALUES (?1, ?2, ?3, ?4)", &ins), 0);
	CHECK_EQ_INT(db_prepare(db, "SELECT i, t, b FROM rt WHERE k = ?", &sel), 0);
	if (!ins || !sel)
		goto out;
	CHECK_EQ_INT(db_col_count(sel), 3);
	CHECK_EQ_STR(db_col_name(sel, 2), "b");
	for (i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		db_reset(ins);
		CHECK_EQ_INT(db_bind_int(ins, 1, (int64_t)i), 0);
		CHECK_EQ_INT(db_bind_int(ins, 2, ints[i]), 0);
		CHECK_EQ_INT(db_bind_text(ins, 3, "hello world", i), 0);
		CHECK_EQ_INT(db_bind_blob(ins, 4, blob, i), 0);
		CHECK_EQ_INT(db_step(ins), DB_DONE);
		CHECK_EQ_INT(db_changes(ins), 1);
	}
	db_reset(ins);
	db_clear_bindings(ins);
	CHECK_EQ_INT(db_bind_int(ins, 1, 100), 0);
	CHECK_EQ_INT(db_step(ins), DB_DONE);
	for (i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		db_reset(sel);
		CHECK_EQ_INT(db_bind_int(sel, 1, (int64_t)i), 0);
		CHECK_EQ_INT(db_step(sel), DB_ROW);
		CHECK_EQ_INT(db_col_type(sel, 0), DB_INT);
		CHECK_EQ_INT(db_col_int(sel, 0), ints[i]);
		CHECK_EQ_INT(db_col_type(sel, 1), DB_TEXT);
		CHECK_EQ_INT(db_col_bytes(sel, 1), i);
		CHECK(db_col_text(sel, 1) && strncmp(db_col_text(sel, 1), "hello world", i) == 0);
		CHECK(db_col_text(sel, 1) && db_col_text(sel, 1)[i] == '\0');
		CHECK_EQ_INT(db_col_type(sel, 2), DB_BLOB);
		CHECK_EQ_INT(db_col_bytes(sel, 2), i);
		CHECK(i == 0 || (db_col_blob(sel, 2) && memcmp(db_col_blob(sel, 2), blob, i) == 0));
		CHECK_EQ_INT(db_step(sel), DB_DONE);
	}
	db_reset(sel);
	CHECK_EQ_INT(db_bind_int(sel, 1, 100), 0);
	CHECK_EQ_INT(db_step(sel), DB_ROW);
	for (i = 0; i < 3; i++) {
		CHECK_EQ_INT(db_col_type(sel, (int)i), DB_NULL);
		CHECK(db_col_text(sel, (int)i) == NULL);
		CHECK_EQ_INT(db_col_int(sel, (int)i), 0);
		CHECK_EQ_INT(db_col_bytes(sel, (int)i), 0);
	}
	db_reset(sel);
	/* Text: UTF-8 as it is; on PostgreSQL, whose text holds neither, a byte that is
	 * not UTF-8 or a NUL is stored as U+FFFD (SQLite keeps the bytes). */
	db_reset(ins);
	CHECK_EQ_INT(db_bind_int(ins, 1, 101), 0);
	CHECK_EQ_INT(db_bind_text(ins, 3, "h\xc3\xa9 \xf0\x9f\x98\x80", 8), 0);
	CHECK_EQ_INT(db_step(ins), DB_DONE);
	db_reset(ins);
	CHECK_EQ_INT(db_bind_int(ins, 1, 102), 0);
	CHECK_EQ_INT(db_bind_text(ins, 3, "a\xc3\0b\xed\xa0\x80", 7), 0);
	CHECK_EQ_INT(db_step(ins), DB_DONE);
	db_reset(ins);
	db_reset(sel);
	CHECK_EQ_INT(db_bind_int(sel, 1, 101), 0);
	CHECK_EQ_INT(db_step(sel), DB_ROW);
	CHECK_EQ_STR(db_col_text(sel, 1), "h\xc3\xa9 \xf0\x9f\x98\x80");
	db_reset(sel);
	CHECK_EQ_INT(db_bind_int(sel, 1, 102), 0);
	CHECK_EQ_INT(db_step(sel), DB_ROW);
	if (test_kind == DB_POSTGRES) {
		CHECK_EQ_STR(db_col_text(sel, 1), "a\xef\xbf\xbd\xef\xbf\xbd" "b"
		             "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
	} else {
		CHECK_EQ_INT(db_col_bytes(sel, 1), 7);
		CHECK(memcmp(db_col_text(sel, 1), "a\xc3\0b\xed\xa0\x80", 7) == 0);
	}
	db_reset(sel);
	/* a sum is an integer on both (NUMERIC on PostgreSQL) */
	CHECK_EQ_INT(test_int(db, "SELECT sum(i) FROM rt WHERE i > 0 AND i < 1000000"), 1);
	CHECK_EQ_INT(test_int(db, "SELECT sum(k) FROM rt"), 115 + 101 + 102);
out:
	db_finalize(ins);
	db_finalize(sel);
	db_close(db);
}

#define TEST_STREAM_ROWS 100000

/* A long result comes row by row, and another statement may run in the middle of it:
 * run once with db_prepare_stream (PostgreSQL then reads the rest ahead) and once with
 * db_prepare (PostgreSQL holds the whole result from the first step). */
static void test_long_result(const char *name,
                             int (*prepare)(struct db *, const char *, struct db_stmt **))
{
	struct db *db = test_open(name, DB_CREATE);
	struct db_stmt *st = NULL, *other = NULL;
	int64_t rows = 0, sum = 0, want = (int64_t)TEST_STREAM_ROWS * (TEST_STREAM_ROWS + 1) / 2;
	enum db_status rc;

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(prepare(db, "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s"
	                         " WHERE x < ?) SELECT x, 'row ' || x FROM s", &st), 0);
	CHECK_EQ_INT(db_prepare(db, "SELECT value FROM meta WHERE name = ?", &other), 0);
	if (!st || !other)
		goto out;
	CHECK_EQ_INT(db_bind_int(st, 1, TEST_STREAM_ROWS), 0);
	CHECK_EQ_INT(db_bind_text(other, 1, "config_generation", 17), 0);
	while ((rc = db_step(st)) == DB_ROW) {
		rows++;
		sum += db_col_int(st, 0);
		if (rows == 10) {
			CHECK_EQ_INT(db_step(other), DB_ROW);
			CHECK_EQ_INT(db_col_int(other, 0), 0);
			db_reset(other);
		}
		if (rows == 50000)
			CHECK_EQ_STR(db_col_text(st, 1), "row 50000");
	}
	CHECK_EQ_INT(rc, DB_DONE);
	CHECK_EQ_INT(rows, TEST_STREAM_ROWS);
	CHECK_EQ_INT(sum, want);
	CHECK_EQ_INT(db_changes(st), 0);
	/* abandoned half way, then run again */
	db_reset(st);
	CHECK_EQ_INT(db_step(st), DB_ROW);
	CHECK_EQ_INT(db_step(st), DB_ROW);
	CHECK_EQ_INT(db_col_int(st, 0), 2);
	db_reset(st);
	CHECK_EQ_INT(db_step(st), DB_ROW);
	CHECK_EQ_INT(db_col_int(st, 0), 1);
	db_reset(st);
	CHECK_EQ_INT(db_step(other), DB_ROW);
	db_reset(other);
	/* rows of a change (RETURNING), then what it changed; an empty result */
	db_finalize(st);
	st = NULL;
	CHECK_EQ_INT(test_exec(db, "CREATE TABLE lr (x BIGINT)"), 0);
	CHECK_EQ_INT(prepare(db, "INSERT INTO lr (x) VALUES (1), (2), (3) RETURNING x", &st), 0);
	if (!st)
		goto out;
	for (rows = 1; rows <= 3; rows++) {
		CHECK_EQ_INT(db_step(st), DB_ROW);
		CHECK_EQ_INT(db_col_int(st, 0), rows);
	}
	CHECK_EQ_INT(db_step(st), DB_DONE);
	CHECK_EQ_INT(db_changes(st), 3);
	db_finalize(st);
	st = NULL;
	CHECK_EQ_INT(prepare(db, "SELECT x FROM lr WHERE x > 3", &st), 0);
	CHECK_EQ_INT(st ? db_step(st) : DB_ERROR, DB_DONE);
out:
	db_finalize(st);
	db_finalize(other);
	db_close(db);
}

static void test_stream(void)
{
	test_long_result("stream.db", db_prepare_stream);
}

static void test_whole(void)
{
	test_long_result("whole.db", db_prepare);
}

/* Statuses: a refused change is DB_CONSTRAINT; changes count what a run changed;
 * a rolled back transaction leaves nothing. */
static void test_status(void)
{
	struct db *db = test_open("status.db", DB_CREATE);
	struct db_stmt *ins = NULL, *upd = NULL;

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_prepare(db, "INSERT INTO meta (name, value) VALUES (?, ?)", &ins), 0);
	CHECK_EQ_INT(db_prepare(db, "UPDATE meta SET value = value + 1 WHERE name LIKE ?", &upd), 0);
	if (!ins || !upd)
		goto out;
	CHECK_EQ_INT(db_bind_text(ins, 1, "t1", 2), 0);
	CHECK_EQ_INT(db_bind_int(ins, 2, 5), 0);
	CHECK_EQ_INT(db_step(ins), DB_DONE);
	db_reset(ins);
	CHECK_EQ_INT(db_step(ins), DB_CONSTRAINT);   /* primary key */
	db_reset(ins);
	CHECK_EQ_INT(db_bind_null(ins, 2), 0);
	CHECK_EQ_INT(db_bind_text(ins, 1, "t2", 2), 0);
	CHECK_EQ_INT(db_step(ins), DB_CONSTRAINT);   /* NOT NULL */
	db_reset(ins);
	CHECK_EQ_INT(db_bind_text(upd, 1, "t%", 2), 0);
	CHECK_EQ_INT(db_step(upd), DB_DONE);
	CHECK_EQ_INT(db_changes(upd), 1);
	db_reset(upd);

	/* transactions */
	CHECK(!db_in_transaction(db));
	CHECK_EQ_INT(db_begin(db), DB_OK);
	CHECK(db_in_transaction(db));
	CHECK_EQ_INT(db_bind_int(ins, 2, 1), 0);
	CHECK_EQ_INT(db_step(ins), DB_DONE);
	db_reset(ins);
	db_rollback(db);
	CHECK(!db_in_transaction(db));
	CHECK_EQ_INT(test_int(db, "SELECT count(*) FROM meta WHERE name = 't2'"), 0);
	CHECK_EQ_INT(db_begin(db), DB_OK);
	CHECK_EQ_INT(db_step(ins), DB_DONE);
	db_reset(ins);
	CHECK_EQ_INT(db_step(upd), DB_DONE);
	CHECK_EQ_INT(db_changes(upd), 2);
	db_reset(upd);
	CHECK_EQ_INT(db_commit(db), DB_OK);
	CHECK(!db_in_transaction(db));
	CHECK_EQ_INT(test_int(db, "SELECT sum(value) FROM meta WHERE name LIKE 't%'"), 7 + 2);
	db_rollback(db);   /* outside a transaction: nothing */

	/* A failed statement: SQLite goes on with the transaction, PostgreSQL aborts it
	 * and its COMMIT fails (the transaction is rolled back). */
	CHECK_EQ_INT(db_begin(db), DB_OK);
	CHECK_EQ_INT(db_step(ins), DB_CONSTRAINT);
	db_reset(ins);
	CHECK_EQ_INT(db_commit(db), test_kind == DB_POSTGRES ? DB_ERROR : DB_OK);
	db_rollback(db);
	CHECK(!db_in_transaction(db));
out:
	db_finalize(ins);
	db_finalize(upd);
	db_close(db);
}

/* ---- PostgreSQL only ---- */

static void test_store_name(void)
{
	char buf[256];

	CHECK_EQ_STR(db_store_name("/var/lib/tally/tally.db", buf, sizeof(buf)),
	             "/var/lib/tally/tally.db");
	CHECK_EQ_STR(db_store_name("postgresql://u:secret@h:5432/db", buf, sizeof(buf)),
	             "postgresql://u:***@h:5432/db");
	CHECK_EQ_STR(db_store_name("postgres://u@h/db?password=secret&sslmode=require", buf,
	                           sizeof(buf)), "postgres://u@h/db?password=***&sslmode=require");
	CHECK_EQ_STR(db_store_name("postgresql://h/db?application_name=x&password=s", buf,
	                           sizeof(buf)), "postgresql://h/db?application_name=x&password=***");
	CHECK_EQ_STR(db_store_name("postgresql://a:b:c@h/d?x=password=y", buf, sizeof(buf)),
	             "postgresql://a:***@h/d?x=password=y");
	CHECK_EQ_STR(db_store_name("postgresql://h", buf, sizeof(buf)), "postgresql://h");
	CHECK_EQ_STR(db_store_name("postgresql://u:secret@h/db", buf, 16), "postgresql://u:");
	CHECK(db_is_postgres("postgres://x"));
	CHECK(!db_is_postgres("postgresq://x"));
	CHECK(!db_is_postgres("./postgresql://x"));
}

/* A store that does not answer: the error names it without its password. */
static void test_pg_refused(void)
{
	char err[512] = "";
	struct db *db = (struct db *)1;

	CHECK_EQ_INT(db_open("postgresql://u:s3cret@127.0.0.1:1/x", DB_READWRITE, &db, err,
	                     sizeof(err)), -1);
	CHECK(db == NULL);
	CHECK(strstr(err, "postgresql://u:***@127.0.0.1:1/x") != NULL);
	CHECK(strstr(err, "s3cret") == NULL);
}

/* Read-only sessions refuse changes; the probe neither creates nor migrates. */
static void test_pg_readonly(void)
{
	char err[512] = "";
	struct db *db = test_open("ro.db", DB_CREATE);
	struct db_stmt *st = NULL;

	db_close(db);
	db = test_open("ro.db", DB_READONLY);
	CHECK(db != NULL);
	if (db) {
		CHECK_EQ_INT(db_config_generation(db), 0);
		CHECK_EQ_INT(test_exec(db, "INSERT INTO meta VALUES ('x', 1)"), -1);
		CHECK_EQ_INT(db_prepare(db, "INSERT INTO meta VALUES ('x', 1)", &st), 0);
		CHECK_EQ_INT(db_step(st), DB_ERROR);
		db_finalize(st);
		db_close(db);
	}
	db = test_open("ro.db", DB_PROBE);
	CHECK(db != NULL);
	CHECK_EQ_INT(test_exec(db, "UPDATE meta SET value = 1"), -1);
	db_close(db);
	db = (struct db *)1;
	CHECK_EQ_INT(db_open(test_store("never.db"), DB_PROBE, &db, err, sizeof(err)), -1);
	CHECK(strstr(err, "no tally schema") != NULL);
}

/* The connection breaks (the server ends the session): the call in progress fails
 * with DB_LOST, a transaction it was in stays failed until rolled back, and the next
 * db_begin or db_step connects again with the statements prepared anew. */
static void test_pg_lost(void)
{
	struct db *db = test_open("lost.db", DB_CREATE);
	struct db_stmt *st = NULL, *all = NULL;
	char sql[96];
	int64_t pid = 0;

	CHECK(db != NULL);
	if (!db)
		return;
	CHECK_EQ_INT(db_prepare(db, "SELECT value FROM meta WHERE name = ?", &st), 0);
	if (!st)
		goto out;
	CHECK_EQ_INT(db_bind_text(st, 1, "config_generation", 17), 0);

	/* outside a transaction */
	CHECK_EQ_INT(db_query_int(db, "SELECT pg_backend_pid()", &pid), 0);
	snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%lld)", (long long)pid);
	CHECK_EQ_INT(test_exec(test_admin, sql), 0);
	CHECK_EQ_INT(db_step(st), DB_LOST);
	db_reset(st);
	CHECK_EQ_INT(db_step(st), DB_ROW);
	CHECK_EQ_INT(db_col_int(st, 0), 0);
	db_reset(st);

	/* A result held whole is read to its end after its connection broke; the next
	 * run connects again. */
	CHECK_EQ_INT(db_prepare(db, "SELECT name FROM meta", &all), 0);
	if (all) {
		CHECK_EQ_INT(db_step(all), DB_ROW);
		CHECK_EQ_INT(db_query_int(db, "SELECT pg_backend_pid()", &pid), 0);
		snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%lld)", (long long)pid);
		CHECK_EQ_INT(test_exec(test_admin, sql), 0);
		while (db_step(all) == DB_ROW)
			CHECK(db_col_text(all, 0) != NULL);
		CHECK_EQ_INT(db_step(all), DB_LOST);
		db_reset(all);
		CHECK_EQ_INT(db_step(all), DB_ROW);
		db_finalize(all);
	}

	/* inside one */
	CHECK_EQ_INT(db_begin(db), DB_OK);
	CHECK_EQ_INT(db_query_int(db, "SELECT pg_backend_pid()", &pid), 0);
	snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%lld)", (long long)pid);
	CHECK_EQ_INT(test_exec(test_admin, sql), 0);
	CHECK_EQ_INT(db_step(st), DB_LOST);
	db_reset(st);
	CHECK(db_in_transaction(db));
	CHECK_EQ_INT(db_step(st), DB_LOST);     /* not on a new connection, outside it */
	db_reset(st);
	CHECK_EQ_INT(db_commit(db), DB_LOST);
	db_rollback(db);
	CHECK(!db_in_transaction(db));
	CHECK_EQ_INT(db_begin(db), DB_OK);
	CHECK_EQ_INT(db_step(st), DB_ROW);
	db_reset(st);
	CHECK_EQ_INT(db_commit(db), DB_OK);
out:
	db_finalize(st);
	db_close(db);
}

/* The server goes away and comes back (tests/test_unit.py stops and starts it): each
 * step is told on stdin, each result said on stdout. */
static int test_outage(const char *url)
{
	char err[512], line[64];
	struct db *db = NULL;
	struct db_stmt *st = NULL;
	enum db_status rc;
	int status = 1;

	if (db_open(url, DB_CREATE, &db, err, sizeof(err)) < 0 ||
	    db_prepare(db, "SELECT value FROM meta WHERE name = 'config_generation'", &st) < 0) {
		fprintf(stderr, "outage: %s\n", db ? db_errmsg(db) : err);
		goto out;
	}
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))   /* the server is down */
		goto out;
	rc = db_step(st);
	db_reset(st);
	printf("down %d\n", (int)rc);
	fflush(stdout);
	if (db_begin(db) != DB_LOST)
		goto out;
	if (!fgets(line, sizeof(line), stdin))   /* it is up again */
		goto out;
	rc = db_step(st);
	printf("up %d %lld\n", (int)rc, rc == DB_ROW ? (long long)db_col_int(st, 0) : -1LL);
	db_reset(st);
	status = rc == DB_ROW && db_begin(db) == DB_OK && db_commit(db) == DB_OK ? 0 : 1;
out:
	db_finalize(st);
	db_close(db);
	return status;
}

static void test_now(void)
{
	int64_t now = db_now();

	CHECK(now > 1700000000);
	CHECK(db_now() - now <= 1);
}

/* The tests every store runs. */
static void test_stores(void)
{
	RUN(test_create);
	RUN(test_generation_triggers);
	RUN(test_constraints);
	RUN(test_usage_constraints);
	RUN(test_newer_refused);
	RUN(test_uninitialised_refused);
	RUN(test_migrate);
	RUN(test_migrate_atomic);
	RUN(test_migrate_team_visibility);
	RUN(test_migrate_end_users);
	RUN(test_migrate_tags);
	RUN(test_migrate_weeks);
	RUN(test_migrate_end_user_limits);
	RUN(test_migrate_model_budgets);
	RUN(test_migrate_tag_totals);
	RUN(test_migrate_request_tags);
	RUN(test_create_race);
	RUN(test_params);
	RUN(test_roundtrip);
	RUN(test_stream);
	RUN(test_whole);
	RUN(test_status);
}

int main(int argc, char **argv)
{
	char err[512];

	if (argc == 3 && strcmp(argv[1], "outage") == 0)
		return test_outage(argv[2]);
	if (tmpdir_make("db") < 0)
		return 1;
	test_stores();
	RUN(test_modes);
	RUN(test_probe);
	RUN(test_migrate_accounting);
	RUN(test_generation_error);
	RUN(test_now);
	RUN(test_store_name);
	RUN(test_pg_refused);
	test_pg_url = getenv("TALLY_TEST_PG_URL");
	if (test_pg_url && *test_pg_url) {
		if (db_open(test_pg_url, DB_CREATE, &test_admin, err, sizeof(err)) < 0) {
			fprintf(stderr, "TALLY_TEST_PG_URL: %s\n", err);
			return 1;
		}
		test_kind = DB_POSTGRES;
		test_stores();
		RUN(test_pg_readonly);
		RUN(test_pg_lost);
		db_close(test_admin);
	} else {
		printf("TALLY_TEST_PG_URL not set: PostgreSQL not tested\n");
	}
	tmpdir_remove();
	return UNIT_DONE();
}
