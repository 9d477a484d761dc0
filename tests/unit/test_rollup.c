/* Unit tests of rollup: every rollup table of a fresh database (SQLite, and the
 * PostgreSQL database TALLY_TEST_PG_URL names if set) holds exactly its key and
 * rollup.h's summed columns, and the names come out as the schema spells them.
 * (queryd checks its summary queries against the same list when it starts.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "rollup.h"
#include "tmpdir.h"
#include "unit.h"

/* 1 if name is one of rollup.h's columns. */
static int is_summed(const char *name)
{
	char col[32];
	int i;

	for (i = 0; i < ROLLUP_SUMS; i++) {
		rollup_column(i, col, sizeof(col));
		if (strcmp(col, name) == 0)
			return 1;
	}
	return 0;
}

static void check_table(struct db *db, const char *table, const char *const *key, int nkey)
{
	char sql[256];
	struct db_stmt *st = NULL;
	int n = 0, keys = 0, summed = 0, other = 0, i;

	if (db_kind(db) == DB_SQLITE)
		snprintf(sql, sizeof(sql), "SELECT name FROM pragma_table_info('%s')", table);
	else
		snprintf(sql, sizeof(sql), "SELECT column_name FROM information_schema.columns"
		         " WHERE table_schema = current_schema() AND table_name = '%s'", table);
	CHECK_EQ_INT(db_prepare(db, sql, &st), 0);
	while (st && db_step(st) == DB_ROW) {
		const char *name = db_col_text(st, 0);
		int is_key = 0;

		for (i = 0; i < nkey; i++)
			is_key |= strcmp(name, key[i]) == 0;
		if (is_key)
			keys++;
		else if (is_summed(name))
			summed++;
		else {
			fprintf(stderr, "%s.%s is neither a key nor in rollup.h\n", table, name);
			other++;
		}
		n++;
	}
	db_finalize(st);
	CHECK_EQ_INT(keys, nkey);
	CHECK_EQ_INT(summed, ROLLUP_SUMS);
	CHECK_EQ_INT(other, 0);
	CHECK_EQ_INT(n, nkey + ROLLUP_SUMS);
}

/* The tables of the store, SQLite's path or PostgreSQL's URL. */
static void check_tables(const char *store)
{
	static const char *const hourly[] = { "hour", "key_id", "model", "provider" };
	static const char *const daily[] = { "day", "key_id", "model", "provider" };
	static const char *const model_hourly[] = { "hour", "model", "provider" };
	static const char *const model_daily[] = { "day", "model", "provider" };
	static const char *const key_hourly[] = { "hour", "key_id" };
	static const char *const key_daily[] = { "day", "key_id" };
	static const char *const team_hourly[] = { "hour", "team_id" };
	static const char *const team_daily[] = { "day", "team_id" };
	static const char *const team_model_daily[] = { "day", "team_id", "model", "provider" };
	static const char *const end_user_daily[] = { "day", "key_id", "end_user" };
	static const char *const tag_daily[] = { "day", "tag", "key_id" };
	static const char *const tag_total_daily[] = { "day", "tag" };
	static const char *const total_hourly[] = { "hour" };
	struct db *db = NULL;
	char err[256];

	if (db_open(store, DB_CREATE, &db, err, sizeof(err)) < 0)
		fprintf(stderr, "%s\n", err);
	CHECK(db != NULL);
	if (db) {
		check_table(db, "usage_hourly", hourly, 4);
		check_table(db, "usage_daily", daily, 4);
		check_table(db, "model_hourly", model_hourly, 3);
		check_table(db, "model_daily", model_daily, 3);
		check_table(db, "key_hourly", key_hourly, 2);
		check_table(db, "key_daily", key_daily, 2);
		check_table(db, "team_hourly", team_hourly, 2);
		check_table(db, "team_daily", team_daily, 2);
		check_table(db, "team_model_daily", team_model_daily, 4);
		check_table(db, "end_user_daily", end_user_daily, 3);
		check_table(db, "tag_daily", tag_daily, 3);
		check_table(db, "tag_total_daily", tag_total_daily, 2);
		check_table(db, "total_hourly", total_hourly, 1);
	}
	db_close(db);
}

static void test_tables(void)
{
	if (tmpdir_make("rollup") < 0) {
		CHECK(0);
		return;
	}
	check_tables(tmpdir_file("tally.db"));
	tmpdir_remove();
}

static void test_tables_pg(void)
{
	const char *url = getenv("TALLY_TEST_PG_URL");

	if (url && *url)
		check_tables(url);
}

static void test_names(void)
{
	char col[32];

	rollup_column(ROLLUP_COST, col, sizeof(col));
	CHECK_EQ_STR(col, "cost_micros");
	rollup_column(ROLLUP_NAMED, col, sizeof(col));
	CHECK_EQ_STR(col, "lat_le_25");
	rollup_column(ROLLUP_SUMS - 1, col, sizeof(col));
	CHECK_EQ_STR(col, "lat_gt_60000");
}

int main(void)
{
	RUN(test_tables);
	RUN(test_tables_pg);
	RUN(test_names);
	return UNIT_DONE();
}
