/* Unit tests of the self-check's shared report and database check (common/preflight.c)
 * on files in a private temporary directory, and on PostgreSQL when TALLY_TEST_PG_URL
 * is set (reading HAProxy's configuration: test_haproxycfg.c). Single-threaded. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db.h"
#include "preflight.h"
#include "teststore.h"
#include "tmpdir.h"
#include "unit.h"

/* The report's lines and exit status, and the database check, read back from a file. */
static void test_preflight(void)
{
	struct preflight p;
	char line[1024], err[512], sql[64], want[64];
	const char *path = tmpdir_file("report.txt");
	FILE *out = fopen(path, "w+");
	struct db *db = NULL;
	struct stat st;

	CHECK(out != NULL);
	if (!out)
		return;
	preflight_init(&p, out);
	CHECK_EQ_INT(preflight_report(&p, 1, "first %d", 1), 0);
	CHECK_EQ_INT(preflight_finish(&p, "prog"), 0);
	CHECK_EQ_INT(preflight_report(&p, 0, "second: %s", "why"), -1);
	/* a missing database: reported, not created */
	CHECK_EQ_INT(preflight_db(&p, tmpdir_file("none.db")), -1);
	CHECK(access(tmpdir_file("none.db"), F_OK) < 0);
	/* one at the schema: opens, and leaves no -wal or -shm behind */
	CHECK_EQ_INT(db_open(tmpdir_file("ok.db"), DB_CREATE, &db, err, sizeof(err)), 0);
	db_close(db);
	CHECK(access(tmpdir_file("ok.db-wal"), F_OK) < 0);
	CHECK_EQ_INT(preflight_db(&p, tmpdir_file("ok.db")), 0);
	CHECK(access(tmpdir_file("ok.db-wal"), F_OK) < 0);
	CHECK(access(tmpdir_file("ok.db-shm"), F_OK) < 0);
	/* an older one: refused, and not migrated */
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", DB_SCHEMA_VERSION - 1);
	CHECK_EQ_INT(db_open(tmpdir_file("ok.db"), DB_READWRITE, &db, err, sizeof(err)), 0);
	CHECK_EQ_INT(db_exec(db, sql, err, sizeof(err)), 0);
	db_close(db);
	CHECK_EQ_INT(preflight_db(&p, tmpdir_file("ok.db")), -1);
	CHECK_EQ_INT(preflight_finish(&p, "prog"), 1);
	CHECK_EQ_INT(p.checks, 5);
	CHECK_EQ_INT(p.failed, 3);
	CHECK(stat(tmpdir_file("ok.db"), &st) == 0);

	rewind(out);
	CHECK(fgets(line, sizeof(line), out) && strcmp(line, "ok   first 1\n") == 0);
	CHECK(fgets(line, sizeof(line), out) && strcmp(line, "prog --self-check: 1 checks passed\n") == 0);
	CHECK(fgets(line, sizeof(line), out) && strcmp(line, "FAIL second: why\n") == 0);
	CHECK(fgets(line, sizeof(line), out) && strncmp(line, "FAIL database ", 14) == 0 &&
	      strstr(line, "none.db: No such file") && strstr(line, "tallyctl"));
	snprintf(want, sizeof(want), "schema version %d", DB_SCHEMA_VERSION);
	CHECK(fgets(line, sizeof(line), out) && strncmp(line, "ok   database ", 14) == 0 &&
	      strstr(line, want));
	snprintf(want, sizeof(want), "schema version %d is older than %d", DB_SCHEMA_VERSION - 1,
	         DB_SCHEMA_VERSION);
	CHECK(fgets(line, sizeof(line), out) && strncmp(line, "FAIL database ", 14) == 0 &&
	      strstr(line, want) && strstr(line, "tallyctl"));
	CHECK(fgets(line, sizeof(line), out) && strcmp(line, "prog --self-check: 3 of 5 checks failed\n") == 0);
	fclose(out);
	/* still older: the check migrated nothing */
	CHECK_EQ_INT(db_open(tmpdir_file("ok.db"), DB_READONLY, &db, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%d", DB_SCHEMA_VERSION - 1);
	CHECK(strstr(err, want) != NULL);
}

/* On PostgreSQL (TALLY_TEST_PG_URL): an empty database fails the check, one at the
 * schema passes. */
static void test_preflight_postgres(void)
{
	struct preflight p;
	char line[1024], err[512], want[64];
	const char *path = tmpdir_file("report-pg.txt");
	const char *url = teststore_fresh(TESTSTORE_POSTGRES, "unused");
	FILE *out = fopen(path, "w+");
	struct db *db = NULL;

	CHECK(out != NULL && url != NULL);
	if (!out || !url) {
		if (out)
			fclose(out);
		return;
	}
	preflight_init(&p, out);
	CHECK_EQ_INT(preflight_db(&p, url), -1);
	CHECK_EQ_INT(db_open(url, DB_CREATE, &db, err, sizeof(err)), 0);
	db_close(db);
	db = NULL;
	CHECK_EQ_INT(preflight_db(&p, url), 0);
	rewind(out);
	CHECK(fgets(line, sizeof(line), out) && strncmp(line, "FAIL database ", 14) == 0);
	snprintf(want, sizeof(want), "schema version %d", DB_SCHEMA_VERSION);
	CHECK(fgets(line, sizeof(line), out) && strncmp(line, "ok   database ", 14) == 0 &&
	      strstr(line, want));
	fclose(out);
}

int main(void)
{
	if (tmpdir_make("selfcheck") < 0)
		return 1;
	RUN(test_preflight);
	if (teststore_count() == 2)
		RUN(test_preflight_postgres);
	tmpdir_remove();
	return UNIT_DONE();
}
