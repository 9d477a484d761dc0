/* Unit tests of rowcols: the requests table of a fresh SQLite database (and of the
 * PostgreSQL database TALLY_TEST_PG_URL names if set) holds exactly rowcols.h's columns
 * besides its id, each with the type its kind stores; so do the table SQLite's
 * migrations build and PostgreSQL's schema as compiled in (its migrations add only
 * columns of rowcols.h); and the journal's entry codec carries every field a column
 * binds from, so that a replayed row stores what the row had. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct.h"
#include "db.h"
#include "journal.h"
#include "price.h"
#include "rowcols.h"
#include "tmpdir.h"
#include "unit.h"

/* Compiled in from sql/ by the Makefile (common/db.c declares them the same way). */
extern const char *const tally_migrations_sql[];
extern const char tally_pg_schema_sql[];
extern const char *const tally_pg_migrations_sql[];

/* Checks column name of type type (as the store spells it, any case) against
 * rowcols.h; seen[] counts the columns found. Returns 1 if it is one of them. */
static int check_column(const char *where, const char *name, const char *type, int *seen)
{
	int i;

	if (strcmp(name, "id") == 0)
		return 1;
	for (i = 0; i < ROWCOL_COLUMNS; i++) {
		if (strcmp(rowcols[i].name, name) != 0)
			continue;
		seen[i]++;
		if (rowcol_is_text(rowcols[i].kind) ? strcasecmp(type, "text") != 0
		    : strcasecmp(type, "integer") != 0 && strcasecmp(type, "bigint") != 0) {
			fprintf(stderr, "%s: requests.%s is %s\n", where, name, type);
			CHECK(0);
		}
		return 1;
	}
	fprintf(stderr, "%s: requests.%s is not in rowcols.h\n", where, name);
	CHECK(0);
	return 0;
}

/* Every column of rowcols.h was seen once. */
static void check_seen(const char *where, const int *seen)
{
	int i;

	for (i = 0; i < ROWCOL_COLUMNS; i++)
		if (seen[i] != 1) {
			fprintf(stderr, "%s: rowcols.h's %s is in requests %d times\n", where,
			        rowcols[i].name, seen[i]);
			CHECK(0);
		}
}

/* The store's requests table, SQLite's path or PostgreSQL's URL. */
static void check_store(const char *store)
{
	int seen[ROWCOL_COLUMNS] = { 0 };
	struct db_stmt *st = NULL;
	struct db *db = NULL;
	const char *where;
	char err[256];

	if (db_open(store, DB_CREATE, &db, err, sizeof(err)) < 0)
		fprintf(stderr, "%s\n", err);
	CHECK(db != NULL);
	if (!db)
		return;
	where = db_kind(db) == DB_SQLITE ? "SQLite" : "PostgreSQL";
	CHECK_EQ_INT(db_prepare(db, db_kind(db) == DB_SQLITE
	                        ? "SELECT name, type FROM pragma_table_info('requests')"
	                        : "SELECT column_name, data_type FROM information_schema.columns"
	                          " WHERE table_schema = current_schema()"
	                          " AND table_name = 'requests'", &st), 0);
	while (st && db_step(st) == DB_ROW)
		check_column(where, db_col_text(st, 0), db_col_text(st, 1), seen);
	db_finalize(st);
	db_close(db);
	check_seen(where, seen);
}

static void test_sqlite(void)
{
	if (tmpdir_make("rowcols") < 0) {
		CHECK(0);
		return;
	}
	check_store(tmpdir_file("tally.db"));
	tmpdir_remove();
}

static void test_pg(void)
{
	const char *url = getenv("TALLY_TEST_PG_URL");

	if (url && *url)
		check_store(url);
}

/* The word at *p (letters, digits, _) into buf, *p past it and the blanks after. */
static void sql_word(const char **p, char *buf, size_t len)
{
	size_t n = 0;

	while (isalnum((unsigned char)**p) || **p == '_') {
		if (n + 1 < len)
			buf[n++] = **p;
		(*p)++;
	}
	buf[n] = '\0';
	while (**p == ' ' || **p == '\t')
		(*p)++;
}

/* The column definitions of "CREATE TABLE requests (" in sql, if there, a line each:
 * a name, then its type; lines that start otherwise (a CHECK's continuation) are none.
 * The table ends with the line that ends in ");" (comments aside). */
static void sql_create(const char *where, const char *sql, int *seen)
{
	const char *p = strstr(sql, "CREATE TABLE requests (");
	const char *end, *dash;
	char name[64], type[64];

	for (p = p ? strchr(p, '\n') : NULL; p && *++p; p = strchr(p, '\n')) {
		end = strchr(p, '\n');
		end = end ? end : p + strlen(p);
		dash = strstr(p, "--");
		end = dash && dash < end ? dash : end;
		while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		while (*p == ' ' || *p == '\t')
			p++;
		if (isalpha((unsigned char)*p)) {
			sql_word(&p, name, sizeof(name));
			sql_word(&p, type, sizeof(type));
			check_column(where, name, type, seen);
		}
		if (end - p >= 2 && strncmp(end - 2, ");", 2) == 0)
			break;
	}
}

/* "ALTER TABLE requests ADD COLUMN name type" in sql. */
static void sql_alter(const char *where, const char *sql, int *seen)
{
	static const char add[] = "ALTER TABLE requests ADD COLUMN ";
	const char *p = sql;
	char name[64], type[64];

	while ((p = strstr(p, add)) != NULL) {
		p += sizeof(add) - 1;
		sql_word(&p, name, sizeof(name));
		sql_word(&p, type, sizeof(type));
		check_column(where, name, type, seen);
	}
}

/* SQLite's migrations, as compiled in, make the same table as its schema (test_sqlite). */
static void test_sqlite_migrations(void)
{
	int seen[ROWCOL_COLUMNS] = { 0 };
	int v;

	for (v = 0; tally_migrations_sql[v]; v++) {
		sql_create("sql/migrations", tally_migrations_sql[v], seen);
		sql_alter("sql/migrations", tally_migrations_sql[v], seen);
	}
	check_seen("sql/migrations", seen);
}

/* PostgreSQL's schema as compiled in (a store of it is checked by test_pg when there is
 * one), and the columns its migrations add onto its first schema, version 9, whose text
 * is gone: each one of rowcols.h's, once. */
static void test_pg_text(void)
{
	int seen[ROWCOL_COLUMNS] = { 0 }, added[ROWCOL_COLUMNS] = { 0 };
	int v, i;

	sql_create("sql/pg/schema.sql", tally_pg_schema_sql, seen);
	check_seen("sql/pg/schema.sql", seen);
	for (v = 0; v < DB_SCHEMA_VERSION; v++)
		if (tally_pg_migrations_sql[v])
			sql_alter("sql/pg/migrations", tally_pg_migrations_sql[v], added);
	for (i = 0; i < ROWCOL_COLUMNS; i++)
		CHECK(added[i] <= 1);
}

/* Gives column i's field in row a value of its kind that neither acct_row_init nor a
 * field the journal lacks (0, ACCT_NONE) would have. */
static void mark_field(struct acct_row *row, int i)
{
	const struct rowcol *c = &rowcols[i];
	char *f = (char *)row + c->off;
	int64_t i64 = 1000 + i;
	int v = 1000 + i;
	unsigned u = PRICE_FALLBACK_TIER | 1;

	switch (c->kind) {
	case ROWCOL_TEXT:
		snprintf(f, c->size, "c%d", i);
		break;
	case ROWCOL_COUNT:
	case ROWCOL_TIME:
		CHECK_EQ_INT((int)c->size, (int)sizeof(i64));
		memcpy(f, &i64, sizeof(i64));
		break;
	case ROWCOL_STATUS:
	case ROWCOL_FLAG:
		v = c->kind == ROWCOL_FLAG ? 1 : v;
		CHECK_EQ_INT((int)c->size, (int)sizeof(v));
		memcpy(f, &v, sizeof(v));
		break;
	case ROWCOL_OUTCOME:
	case ROWCOL_SOURCE:
		v = c->kind == ROWCOL_OUTCOME ? ACCT_OUTCOME_COUNT - 1 : ACCT_USAGE_SOURCE_COUNT - 1;
		CHECK_EQ_INT((int)c->size, (int)sizeof(v));
		memcpy(f, &v, sizeof(v));
		break;
	case ROWCOL_FALLBACK:
		CHECK_EQ_INT((int)c->size, (int)sizeof(u));
		memcpy(f, &u, sizeof(u));
		break;
	}
}

/* A row entry through the journal's codec keeps every column's field. */
static void test_journal(void)
{
	unsigned char buf[JOURNAL_ENTRY_MAX];
	struct acct_row row, back;
	enum journal_kind k;
	size_t n, used = 0;
	int i;

	acct_row_init(&row);
	for (i = 0; i < ROWCOL_COLUMNS; i++)
		mark_field(&row, i);
	n = journal_entry_encode(JOURNAL_ROW, &row, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK_EQ_INT(journal_entry_decode(buf, n, &k, &back, &used), 1);
	CHECK_EQ_INT(k, JOURNAL_ROW);
	CHECK_EQ_INT((int)used, (int)n);
	for (i = 0; i < ROWCOL_COLUMNS; i++) {
		const struct rowcol *c = &rowcols[i];
		const char *a = (const char *)&row + c->off, *b = (const char *)&back + c->off;

		if (c->kind == ROWCOL_TEXT ? strncmp(a, b, c->size) != 0 : memcmp(a, b, c->size) != 0) {
			fprintf(stderr, "the journal loses requests.%s\n", c->name);
			CHECK(0);
		}
	}
}

int main(void)
{
	RUN(test_sqlite);
	RUN(test_pg);
	RUN(test_sqlite_migrations);
	RUN(test_pg_text);
	RUN(test_journal);
	return UNIT_DONE();
}
