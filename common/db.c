/* db: opens the database, applies sql/schema.sql to an empty one and runs the ordered
 * migrations on an older one. Called from any thread, each with its own connection;
 * schema creation and migration take an IMMEDIATE transaction, so processes racing
 * to open a new database (tallyctl, the agent) serialise instead of colliding. */
#include "db.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define DB_WAL_RETRY_MS 10

/* Generated from sql/schema.sql by the Makefile. */
extern const char tally_schema_sql[];

/* Version 1 to 2: usage tables (requests, usage_hourly, accounting) and nullable
 * model prices. SQLite cannot drop NOT NULL in place, so models is rebuilt (same ids)
 * with its index and config_generation triggers. Version 1 defaulted unset prices to
 * 0: a model whose three prices are all 0 gets NULL (unknown) prices instead. Nothing
 * references models by id, so dropping it under foreign_keys = ON is safe. */
static const char db_migration_2[] =
	"CREATE TABLE models_v2 (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  name TEXT NOT NULL UNIQUE CHECK (name <> ''),\n"
	"  provider_id INTEGER NOT NULL REFERENCES providers (id),\n"
	"  input_micros_per_mtok INTEGER CHECK (input_micros_per_mtok >= 0),\n"
	"  output_micros_per_mtok INTEGER CHECK (output_micros_per_mtok >= 0),\n"
	"  cached_micros_per_mtok INTEGER CHECK (cached_micros_per_mtok >= 0),\n"
	"  cache_write_micros_per_mtok INTEGER CHECK (cache_write_micros_per_mtok >= 0),\n"
	"  created_at INTEGER NOT NULL,\n"
	"  updated_at INTEGER NOT NULL);\n"
	"INSERT INTO models_v2 (id, name, provider_id, input_micros_per_mtok, output_micros_per_mtok,\n"
	"  cached_micros_per_mtok, created_at, updated_at)\n"
	"SELECT id, name, provider_id, CASE WHEN priced THEN input_micros_per_mtok END,\n"
	"  CASE WHEN priced THEN output_micros_per_mtok END,\n"
	"  CASE WHEN priced THEN cached_micros_per_mtok END, created_at, updated_at\n"
	"FROM (SELECT *, input_micros_per_mtok + output_micros_per_mtok + cached_micros_per_mtok > 0\n"
	"  AS priced FROM models);\n"
	"DROP TABLE models;\n"
	"ALTER TABLE models_v2 RENAME TO models;\n"
	"CREATE INDEX models_provider_id ON models (provider_id);\n"
	"CREATE TRIGGER models_gen_insert AFTER INSERT ON models BEGIN\n"
	"  UPDATE meta SET value = value + 1 WHERE name = 'config_generation'; END;\n"
	"CREATE TRIGGER models_gen_update AFTER UPDATE ON models BEGIN\n"
	"  UPDATE meta SET value = value + 1 WHERE name = 'config_generation'; END;\n"
	"CREATE TRIGGER models_gen_delete AFTER DELETE ON models BEGIN\n"
	"  UPDATE meta SET value = value + 1 WHERE name = 'config_generation'; END;\n"
	"CREATE TABLE requests (\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  request_id TEXT NOT NULL UNIQUE,\n"
	"  key_id INTEGER,\n"
	"  model TEXT,\n"
	"  model_requested TEXT,\n"
	"  provider TEXT,\n"
	"  verdict TEXT,\n"
	"  status INTEGER,\n"
	"  stream INTEGER CHECK (stream IN (0, 1)),\n"
	"  prompt_tokens INTEGER,\n"
	"  completion_tokens INTEGER,\n"
	"  cached_tokens INTEGER,\n"
	"  cache_creation_tokens INTEGER,\n"
	"  reasoning_tokens INTEGER,\n"
	"  cost_micros INTEGER,\n"
	"  outcome TEXT NOT NULL CHECK (outcome IN ('complete', 'client_abort', 'upstream_error',\n"
	"    'upstream_rejected', 'denied', 'gateway_rejected', 'no_record')),\n"
	"  usage_source TEXT NOT NULL CHECK (usage_source IN ('none', 'response', 'stream', 'partial')),\n"
	"  termination TEXT,\n"
	"  started_at INTEGER NOT NULL,\n"
	"  duration_ms INTEGER,\n"
	"  ttfb_ms INTEGER,\n"
	"  bytes_in INTEGER,\n"
	"  bytes_out INTEGER);\n"
	"CREATE INDEX requests_started_at ON requests (started_at);\n"
	"CREATE INDEX requests_key_started_at ON requests (key_id, started_at);\n"
	"CREATE TABLE usage_hourly (\n"
	"  hour INTEGER NOT NULL,\n"
	"  key_id INTEGER NOT NULL,\n"
	"  model TEXT NOT NULL,\n"
	"  requests INTEGER NOT NULL,\n"
	"  errors INTEGER NOT NULL,\n"
	"  prompt_tokens INTEGER NOT NULL,\n"
	"  completion_tokens INTEGER NOT NULL,\n"
	"  cached_tokens INTEGER NOT NULL,\n"
	"  cache_creation_tokens INTEGER NOT NULL,\n"
	"  reasoning_tokens INTEGER NOT NULL,\n"
	"  cost_micros INTEGER NOT NULL,\n"
	"  unpriced INTEGER NOT NULL,\n"
	"  duration_ms_sum INTEGER NOT NULL,\n"
	"  PRIMARY KEY (hour, key_id, model)) WITHOUT ROWID;\n"
	"CREATE TABLE accounting (\n"
	"  id INTEGER PRIMARY KEY CHECK (id = 1),\n"
	"  received INTEGER NOT NULL,\n"
	"  written INTEGER NOT NULL,\n"
	"  dropped INTEGER NOT NULL,\n"
	"  duplicates INTEGER NOT NULL,\n"
	"  timed_out INTEGER NOT NULL,\n"
	"  unpriced INTEGER NOT NULL,\n"
	"  updated_at INTEGER NOT NULL);\n"
	"INSERT INTO accounting VALUES (1, 0, 0, 0, 0, 0, 0, 0);\n";

/* Version 3: per-key limits. */
static const char db_migration_3[] =
	"ALTER TABLE keys ADD COLUMN rpm INTEGER CHECK (rpm > 0);\n"
	"ALTER TABLE keys ADD COLUMN tpm INTEGER CHECK (tpm > 0);\n"
	"ALTER TABLE keys ADD COLUMN max_concurrent INTEGER CHECK (max_concurrent > 0);\n"
	"ALTER TABLE keys ADD COLUMN budget_micros INTEGER CHECK (budget_micros > 0);\n"
	"ALTER TABLE keys ADD COLUMN budget_period TEXT NOT NULL DEFAULT 'month'"
	" CHECK (budget_period IN ('day', 'month', 'total'));\n"
	"CREATE INDEX usage_hourly_key_hour ON usage_hourly (key_id, hour);\n";

/* Version 4: rollups by provider too, daily rollups beside the hourly ones, stream
 * counts and latency buckets (common/latency.h), and the same without the key
 * (model_hourly, model_daily). Every rollup is rebuilt from the raw
 * rows with total(), which never fails on NULLs or overflow as sum() would; its float
 * results are stored back as integers by the INTEGER column affinity. started_at is
 * never negative here. */
static const char db_migration_4[] =
	"DROP TABLE usage_hourly;\n"
	"CREATE TABLE usage_hourly (\n"
	"  hour INTEGER NOT NULL,\n"
	"  key_id INTEGER NOT NULL,\n"
	"  model TEXT NOT NULL,\n"
	"  provider TEXT NOT NULL,\n"
	"  requests INTEGER NOT NULL,\n"
	"  errors INTEGER NOT NULL,\n"
	"  streams INTEGER NOT NULL,\n"
	"  prompt_tokens INTEGER NOT NULL,\n"
	"  completion_tokens INTEGER NOT NULL,\n"
	"  cached_tokens INTEGER NOT NULL,\n"
	"  cache_creation_tokens INTEGER NOT NULL,\n"
	"  reasoning_tokens INTEGER NOT NULL,\n"
	"  cost_micros INTEGER NOT NULL,\n"
	"  unpriced INTEGER NOT NULL,\n"
	"  duration_ms_sum INTEGER NOT NULL,\n"
	"  lat_le_25 INTEGER NOT NULL,\n"
	"  lat_le_50 INTEGER NOT NULL,\n"
	"  lat_le_100 INTEGER NOT NULL,\n"
	"  lat_le_200 INTEGER NOT NULL,\n"
	"  lat_le_350 INTEGER NOT NULL,\n"
	"  lat_le_500 INTEGER NOT NULL,\n"
	"  lat_le_750 INTEGER NOT NULL,\n"
	"  lat_le_1000 INTEGER NOT NULL,\n"
	"  lat_le_1500 INTEGER NOT NULL,\n"
	"  lat_le_2500 INTEGER NOT NULL,\n"
	"  lat_le_4000 INTEGER NOT NULL,\n"
	"  lat_le_6000 INTEGER NOT NULL,\n"
	"  lat_le_10000 INTEGER NOT NULL,\n"
	"  lat_le_20000 INTEGER NOT NULL,\n"
	"  lat_le_60000 INTEGER NOT NULL,\n"
	"  lat_gt_60000 INTEGER NOT NULL,\n"
	"  PRIMARY KEY (hour, key_id, model, provider)) WITHOUT ROWID;\n"
	"CREATE INDEX usage_hourly_key_hour ON usage_hourly (key_id, hour);\n"
	"CREATE TABLE usage_daily (\n"
	"  day INTEGER NOT NULL,\n"
	"  key_id INTEGER NOT NULL,\n"
	"  model TEXT NOT NULL,\n"
	"  provider TEXT NOT NULL,\n"
	"  requests INTEGER NOT NULL,\n"
	"  errors INTEGER NOT NULL,\n"
	"  streams INTEGER NOT NULL,\n"
	"  prompt_tokens INTEGER NOT NULL,\n"
	"  completion_tokens INTEGER NOT NULL,\n"
	"  cached_tokens INTEGER NOT NULL,\n"
	"  cache_creation_tokens INTEGER NOT NULL,\n"
	"  reasoning_tokens INTEGER NOT NULL,\n"
	"  cost_micros INTEGER NOT NULL,\n"
	"  unpriced INTEGER NOT NULL,\n"
	"  duration_ms_sum INTEGER NOT NULL,\n"
	"  lat_le_25 INTEGER NOT NULL,\n"
	"  lat_le_50 INTEGER NOT NULL,\n"
	"  lat_le_100 INTEGER NOT NULL,\n"
	"  lat_le_200 INTEGER NOT NULL,\n"
	"  lat_le_350 INTEGER NOT NULL,\n"
	"  lat_le_500 INTEGER NOT NULL,\n"
	"  lat_le_750 INTEGER NOT NULL,\n"
	"  lat_le_1000 INTEGER NOT NULL,\n"
	"  lat_le_1500 INTEGER NOT NULL,\n"
	"  lat_le_2500 INTEGER NOT NULL,\n"
	"  lat_le_4000 INTEGER NOT NULL,\n"
	"  lat_le_6000 INTEGER NOT NULL,\n"
	"  lat_le_10000 INTEGER NOT NULL,\n"
	"  lat_le_20000 INTEGER NOT NULL,\n"
	"  lat_le_60000 INTEGER NOT NULL,\n"
	"  lat_gt_60000 INTEGER NOT NULL,\n"
	"  PRIMARY KEY (day, key_id, model, provider)) WITHOUT ROWID;\n"
	"CREATE INDEX usage_daily_key_day ON usage_daily (key_id, day);\n"
	"INSERT INTO usage_hourly SELECT started_at / 3600000 * 3600, coalesce(key_id, 0),\n"
	"  coalesce(model, ''), coalesce(provider, ''), count(*), total(outcome <> 'complete'),\n"
	"  total(stream = 1), total(prompt_tokens), total(completion_tokens), total(cached_tokens),\n"
	"  total(cache_creation_tokens), total(reasoning_tokens), total(cost_micros),\n"
	"  total(cost_micros IS NULL AND coalesce(prompt_tokens, completion_tokens) IS NOT NULL),\n"
	"  total(duration_ms),\n"
	"  total(duration_ms <= 25), total(duration_ms > 25 AND duration_ms <= 50),\n"
	"  total(duration_ms > 50 AND duration_ms <= 100), total(duration_ms > 100 AND duration_ms <= 200),\n"
	"  total(duration_ms > 200 AND duration_ms <= 350), total(duration_ms > 350 AND duration_ms <= 500),\n"
	"  total(duration_ms > 500 AND duration_ms <= 750), total(duration_ms > 750 AND duration_ms <= 1000),\n"
	"  total(duration_ms > 1000 AND duration_ms <= 1500), total(duration_ms > 1500 AND duration_ms <= 2500),\n"
	"  total(duration_ms > 2500 AND duration_ms <= 4000), total(duration_ms > 4000 AND duration_ms <= 6000),\n"
	"  total(duration_ms > 6000 AND duration_ms <= 10000), total(duration_ms > 10000 AND duration_ms <= 20000),\n"
	"  total(duration_ms > 20000 AND duration_ms <= 60000), total(duration_ms > 60000)\n"
	"FROM requests GROUP BY 1, 2, 3, 4;\n"
	"INSERT INTO usage_daily SELECT started_at / 86400000 * 86400, coalesce(key_id, 0),\n"
	"  coalesce(model, ''), coalesce(provider, ''), count(*), total(outcome <> 'complete'),\n"
	"  total(stream = 1), total(prompt_tokens), total(completion_tokens), total(cached_tokens),\n"
	"  total(cache_creation_tokens), total(reasoning_tokens), total(cost_micros),\n"
	"  total(cost_micros IS NULL AND coalesce(prompt_tokens, completion_tokens) IS NOT NULL),\n"
	"  total(duration_ms),\n"
	"  total(duration_ms <= 25), total(duration_ms > 25 AND duration_ms <= 50),\n"
	"  total(duration_ms > 50 AND duration_ms <= 100), total(duration_ms > 100 AND duration_ms <= 200),\n"
	"  total(duration_ms > 200 AND duration_ms <= 350), total(duration_ms > 350 AND duration_ms <= 500),\n"
	"  total(duration_ms > 500 AND duration_ms <= 750), total(duration_ms > 750 AND duration_ms <= 1000),\n"
	"  total(duration_ms > 1000 AND duration_ms <= 1500), total(duration_ms > 1500 AND duration_ms <= 2500),\n"
	"  total(duration_ms > 2500 AND duration_ms <= 4000), total(duration_ms > 4000 AND duration_ms <= 6000),\n"
	"  total(duration_ms > 6000 AND duration_ms <= 10000), total(duration_ms > 10000 AND duration_ms <= 20000),\n"
	"  total(duration_ms > 20000 AND duration_ms <= 60000), total(duration_ms > 60000)\n"
	"FROM requests GROUP BY 1, 2, 3, 4;\n"
	"CREATE TABLE model_hourly (\n"
	"  hour INTEGER NOT NULL,\n"
	"  model TEXT NOT NULL,\n"
	"  provider TEXT NOT NULL,\n"
	"  requests INTEGER NOT NULL,\n"
	"  errors INTEGER NOT NULL,\n"
	"  streams INTEGER NOT NULL,\n"
	"  prompt_tokens INTEGER NOT NULL,\n"
	"  completion_tokens INTEGER NOT NULL,\n"
	"  cached_tokens INTEGER NOT NULL,\n"
	"  cache_creation_tokens INTEGER NOT NULL,\n"
	"  reasoning_tokens INTEGER NOT NULL,\n"
	"  cost_micros INTEGER NOT NULL,\n"
	"  unpriced INTEGER NOT NULL,\n"
	"  duration_ms_sum INTEGER NOT NULL,\n"
	"  lat_le_25 INTEGER NOT NULL,\n"
	"  lat_le_50 INTEGER NOT NULL,\n"
	"  lat_le_100 INTEGER NOT NULL,\n"
	"  lat_le_200 INTEGER NOT NULL,\n"
	"  lat_le_350 INTEGER NOT NULL,\n"
	"  lat_le_500 INTEGER NOT NULL,\n"
	"  lat_le_750 INTEGER NOT NULL,\n"
	"  lat_le_1000 INTEGER NOT NULL,\n"
	"  lat_le_1500 INTEGER NOT NULL,\n"
	"  lat_le_2500 INTEGER NOT NULL,\n"
	"  lat_le_4000 INTEGER NOT NULL,\n"
	"  lat_le_6000 INTEGER NOT NULL,\n"
	"  lat_le_10000 INTEGER NOT NULL,\n"
	"  lat_le_20000 INTEGER NOT NULL,\n"
	"  lat_le_60000 INTEGER NOT NULL,\n"
	"  lat_gt_60000 INTEGER NOT NULL,\n"
	"  PRIMARY KEY (hour, model, provider)) WITHOUT ROWID;\n"
	"CREATE TABLE model_daily (\n"
	"  day INTEGER NOT NULL,\n"
	"  model TEXT NOT NULL,\n"
	"  provider TEXT NOT NULL,\n"
	"  requests INTEGER NOT NULL,\n"
	"  errors INTEGER NOT NULL,\n"
	"  streams INTEGER NOT NULL,\n"
	"  prompt_tokens INTEGER NOT NULL,\n"
	"  completion_tokens INTEGER NOT NULL,\n"
	"  cached_tokens INTEGER NOT NULL,\n"
	"  cache_creation_tokens INTEGER NOT NULL,\n"
	"  reasoning_tokens INTEGER NOT NULL,\n"
	"  cost_micros INTEGER NOT NULL,\n"
	"  unpriced INTEGER NOT NULL,\n"
	"  duration_ms_sum INTEGER NOT NULL,\n"
	"  lat_le_25 INTEGER NOT NULL,\n"
	"  lat_le_50 INTEGER NOT NULL,\n"
	"  lat_le_100 INTEGER NOT NULL,\n"
	"  lat_le_200 INTEGER NOT NULL,\n"
	"  lat_le_350 INTEGER NOT NULL,\n"
	"  lat_le_500 INTEGER NOT NULL,\n"
	"  lat_le_750 INTEGER NOT NULL,\n"
	"  lat_le_1000 INTEGER NOT NULL,\n"
	"  lat_le_1500 INTEGER NOT NULL,\n"
	"  lat_le_2500 INTEGER NOT NULL,\n"
	"  lat_le_4000 INTEGER NOT NULL,\n"
	"  lat_le_6000 INTEGER NOT NULL,\n"
	"  lat_le_10000 INTEGER NOT NULL,\n"
	"  lat_le_20000 INTEGER NOT NULL,\n"
	"  lat_le_60000 INTEGER NOT NULL,\n"
	"  lat_gt_60000 INTEGER NOT NULL,\n"
	"  PRIMARY KEY (day, model, provider)) WITHOUT ROWID;\n"
	"INSERT INTO model_hourly SELECT started_at / 3600000 * 3600,\n"
	"  coalesce(model, ''), coalesce(provider, ''), count(*), total(outcome <> 'complete'),\n"
	"  total(stream = 1), total(prompt_tokens), total(completion_tokens), total(cached_tokens),\n"
	"  total(cache_creation_tokens), total(reasoning_tokens), total(cost_micros),\n"
	"  total(cost_micros IS NULL AND coalesce(prompt_tokens, completion_tokens) IS NOT NULL),\n"
	"  total(duration_ms),\n"
	"  total(duration_ms <= 25), total(duration_ms > 25 AND duration_ms <= 50),\n"
	"  total(duration_ms > 50 AND duration_ms <= 100), total(duration_ms > 100 AND duration_ms <= 200),\n"
	"  total(duration_ms > 200 AND duration_ms <= 350), total(duration_ms > 350 AND duration_ms <= 500),\n"
	"  total(duration_ms > 500 AND duration_ms <= 750), total(duration_ms > 750 AND duration_ms <= 1000),\n"
	"  total(duration_ms > 1000 AND duration_ms <= 1500), total(duration_ms > 1500 AND duration_ms <= 2500),\n"
	"  total(duration_ms > 2500 AND duration_ms <= 4000), total(duration_ms > 4000 AND duration_ms <= 6000),\n"
	"  total(duration_ms > 6000 AND duration_ms <= 10000), total(duration_ms > 10000 AND duration_ms <= 20000),\n"
	"  total(duration_ms > 20000 AND duration_ms <= 60000), total(duration_ms > 60000)\n"
	"FROM requests GROUP BY 1, 2, 3;\n"
	"INSERT INTO model_daily SELECT started_at / 86400000 * 86400,\n"
	"  coalesce(model, ''), coalesce(provider, ''), count(*), total(outcome <> 'complete'),\n"
	"  total(stream = 1), total(prompt_tokens), total(completion_tokens), total(cached_tokens),\n"
	"  total(cache_creation_tokens), total(reasoning_tokens), total(cost_micros),\n"
	"  total(cost_micros IS NULL AND coalesce(prompt_tokens, completion_tokens) IS NOT NULL),\n"
	"  total(duration_ms),\n"
	"  total(duration_ms <= 25), total(duration_ms > 25 AND duration_ms <= 50),\n"
	"  total(duration_ms > 50 AND duration_ms <= 100), total(duration_ms > 100 AND duration_ms <= 200),\n"
	"  total(duration_ms > 200 AND duration_ms <= 350), total(duration_ms > 350 AND duration_ms <= 500),\n"
	"  total(duration_ms > 500 AND duration_ms <= 750), total(duration_ms > 750 AND duration_ms <= 1000),\n"
	"  total(duration_ms > 1000 AND duration_ms <= 1500), total(duration_ms > 1500 AND duration_ms <= 2500),\n"
	"  total(duration_ms > 2500 AND duration_ms <= 4000), total(duration_ms > 4000 AND duration_ms <= 6000),\n"
	"  total(duration_ms > 6000 AND duration_ms <= 10000), total(duration_ms > 10000 AND duration_ms <= 20000),\n"
	"  total(duration_ms > 20000 AND duration_ms <= 60000), total(duration_ms > 60000)\n"
	"FROM requests GROUP BY 1, 2, 3;\n";

/* Entry i upgrades version i + 1 to i + 2. Append only; NULL ends the list. A new
 * entry comes with schema.sql and DB_SCHEMA_VERSION bumped to match. Each is frozen
 * once released: schema.sql moves on, a migration never does. */
static const char *const db_migrations[] = {
	db_migration_2,
	db_migration_3,
	db_migration_4,
	NULL,
};

#define DB_MIGRATION_COUNT ((int)(sizeof(db_migrations) / sizeof(db_migrations[0])) - 1)

_Static_assert(sizeof(db_migrations) / sizeof(db_migrations[0]) == DB_SCHEMA_VERSION,
               "one migration per schema version after the first");

int db_exec(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		snprintf(err, errlen, "%s", msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

static void db_rollback(sqlite3 *db)
{
	if (!sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

int db_query_int(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st = NULL;
	int rc = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	if (sqlite3_step(st) != SQLITE_ROW)
		goto out;
	*out = sqlite3_column_int64(st, 0);
	rc = 0;
out:
	sqlite3_finalize(st);
	return rc;
}

int db_schema_version(sqlite3 *db)
{
	int64_t v;

	return db_query_int(db, "PRAGMA user_version", &v) < 0 ? -1 : (int)v;
}

int64_t db_config_generation(sqlite3 *db)
{
	int64_t v;

	if (db_query_int(db, "SELECT value FROM meta WHERE name = 'config_generation'", &v) < 0)
		return -1;
	return v;
}

int64_t db_now(void)
{
	return (int64_t)time(NULL);
}

/* Explains why version v cannot be used by a binary expecting want; 0 if v is usable
 * (equal, or older and migrate is set). */
static int db_version_check(sqlite3 *db, int v, int want, int migrate, char *err, size_t errlen)
{
	if (v < 0)
		snprintf(err, errlen, "cannot read schema version: %s", sqlite3_errmsg(db));
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

int db_migrate(sqlite3 *db, const char *const *migrations, int count, char *err, size_t errlen)
{
	const int target = count + 1;
	char msg[512], bump[64];
	int v = db_schema_version(db);

	if (v == target)
		return 0;
	for (;;) {
		if (db_exec(db, "BEGIN IMMEDIATE", err, errlen) < 0)
			return -1;
		/* Read again under the lock: another process may have migrated meanwhile. */
		v = db_schema_version(db);
		if (db_version_check(db, v, target, 1, err, errlen) < 0)
			goto fail;
		if (v == target)
			return db_exec(db, "COMMIT", err, errlen);
		snprintf(bump, sizeof(bump), "PRAGMA user_version = %d", v + 1);
		if (db_exec(db, migrations[v - 1], msg, sizeof(msg)) < 0 ||
		    db_exec(db, bump, msg, sizeof(msg)) < 0 ||
		    db_exec(db, "COMMIT", msg, sizeof(msg)) < 0) {
			snprintf(err, errlen, "migration from version %d to %d failed: %s", v, v + 1, msg);
			goto fail;
		}
	}
fail:
	db_rollback(db);
	return -1;
}

/* Applies schema.sql if the database is empty (version 0 and no objects). */
static int db_init_schema(sqlite3 *db, char *err, size_t errlen)
{
	int64_t objects;
	int v;

	if (db_schema_version(db) != 0)
		return 0;
	if (db_exec(db, "BEGIN IMMEDIATE", err, errlen) < 0)
		return -1;
	v = db_schema_version(db);
	if (v != 0)
		return db_exec(db, "COMMIT", err, errlen);
	if (db_query_int(db, "SELECT count(*) FROM sqlite_master", &objects) < 0) {
		snprintf(err, errlen, "cannot inspect database: %s", sqlite3_errmsg(db));
		goto fail;
	}
	if (objects > 0) {
		snprintf(err, errlen, "not a tally database (it has tables but no schema version)");
		goto fail;
	}
	if (db_exec(db, tally_schema_sql, err, errlen) < 0)
		goto fail;
	v = db_schema_version(db);
	if (v != DB_SCHEMA_VERSION) {
		snprintf(err, errlen, "sql/schema.sql sets version %d but this binary expects %d",
		         v, DB_SCHEMA_VERSION);
		goto fail;
	}
	return db_exec(db, "COMMIT", err, errlen);
fail:
	db_rollback(db);
	return -1;
}

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

int db_open(const char *path, enum db_mode mode, sqlite3 **out, char *err, size_t errlen)
{
	static const int flags[] = {
		[DB_READONLY] = SQLITE_OPEN_READONLY,
		[DB_READWRITE] = SQLITE_OPEN_READWRITE,
		[DB_CREATE] = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
	};
	sqlite3 *db = NULL;
	char msg[512];
	int rc;

	*out = NULL;
	rc = sqlite3_open_v2(path, &db, flags[mode] | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		snprintf(msg, sizeof(msg), "%s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		goto fail;
	}
	sqlite3_extended_result_codes(db, 1);
	sqlite3_busy_timeout(db, DB_BUSY_TIMEOUT_MS);
	if (mode != DB_READONLY && db_set_wal(db, msg, sizeof(msg)) < 0)
		goto fail;
	if (db_exec(db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", msg, sizeof(msg)) < 0)
		goto fail;
	if (mode == DB_CREATE) {
		if (db_init_schema(db, msg, sizeof(msg)) < 0 ||
		    db_migrate(db, db_migrations, DB_MIGRATION_COUNT, msg, sizeof(msg)) < 0)
			goto fail;
	} else if (db_version_check(db, db_schema_version(db), DB_SCHEMA_VERSION, 0,
	                            msg, sizeof(msg)) < 0) {
		goto fail;
	}
	*out = db;
	return 0;
fail:
	snprintf(err, errlen, "database %s: %s", path, msg);
	sqlite3_close(db);
	return -1;
}
