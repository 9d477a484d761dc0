/* The stores an agent unit test runs on: SQLite always, a file in the test's
 * temporary directory (tmpdir.h); PostgreSQL too when TALLY_TEST_PG_URL names a
 * database (tests/test_unit.py sets it), emptied before each use so that every test
 * starts from a fresh schema. Header-only so that each test binary stays one file. */
#ifndef TALLY_TEST_TESTSTORE_H
#define TALLY_TEST_TESTSTORE_H

#include <stdio.h>
#include <stdlib.h>

#include "db.h"
#include "tmpdir.h"

enum teststore { TESTSTORE_SQLITE, TESTSTORE_POSTGRES };

/* How many stores to run on: 2 when a PostgreSQL database is given. */
static inline int teststore_count(void)
{
	const char *url = getenv("TALLY_TEST_PG_URL");

	return url && url[0] ? 2 : 1;
}

static inline const char *teststore_name(enum teststore which)
{
	return which == TESTSTORE_POSTGRES ? "postgres" : "sqlite";
}

/* The store for a test, empty: tmpdir_file(file) (tmpdir_make first), or the
 * PostgreSQL database with its public schema dropped. NULL (reported) on failure;
 * the result lives until the next call. */
static inline const char *teststore_fresh(enum teststore which, const char *file)
{
	static char store[1024];
	const char *url = getenv("TALLY_TEST_PG_URL");
	struct db *db = NULL;
	char err[512];

	if (which == TESTSTORE_SQLITE) {
		snprintf(store, sizeof(store), "%s", tmpdir_file(file));
		return store;
	}
	snprintf(store, sizeof(store), "%s", url ? url : "");
	if (db_open(store, DB_CREATE, &db, err, sizeof(err)) < 0 ||
	    db_exec(db, "DROP SCHEMA public CASCADE; CREATE SCHEMA public", err, sizeof(err)) < 0) {
		fprintf(stderr, "teststore: cannot empty the PostgreSQL database: %s\n", err);
		db_close(db);
		return NULL;
	}
	db_close(db);
	return store;
}

#endif
