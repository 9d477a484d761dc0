/* owner: stored responses and the keys that made them; the store look-ups on SQLite,
 * and on PostgreSQL when TALLY_TEST_PG_URL is set (teststore.h). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "db.h"
#include "owner.h"
#include "probe.h"
#include "teststore.h"
#include "tmpdir.h"
#include "unit.h"

static enum teststore store_kind;

static int get(struct owner *o, const char *id, struct owner_entry *e)
{
	return owner_get(o, id, strlen(id), e);
}

static void test_first_owner_keeps_it(void)
{
	struct owner *o = owner_new(8);
	struct owner_entry e;

	CHECK_EQ_INT(owner_put(o, "resp_a", 1, "gpt-x", 0), 1);
	CHECK_EQ_INT(owner_put(o, "resp_a", 2, "gpt-y", 0), 0);   /* another key cannot take it */
	CHECK(get(o, "resp_a", &e));
	CHECK_EQ_INT(e.key_id, 1);
	CHECK_EQ_STR(e.model, "gpt-x");
	CHECK(!get(o, "resp_b", &e));
	CHECK(!get(o, "resp_", &e));
	CHECK(!owner_get(o, "resp_ab", 5, &e));                          /* a prefix is no id */
	CHECK(owner_get(o, "resp_a/cancel", 6, &e));                     /* by length */
	CHECK_EQ_INT(owner_count(o), 1);
	owner_free(o);
}

static void test_ids_not_kept(void)
{
	struct owner *o = owner_new(8);
	char long_id[ACCT_RESPONSE_ID_MAX + 1];
	struct owner_entry e;

	memset(long_id, 'a', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	CHECK_EQ_INT(owner_put(o, "", 1, "m", 0), -1);
	CHECK_EQ_INT(owner_put(o, "resp a", 1, "m", 0), -1);
	CHECK_EQ_INT(owner_put(o, "resp/a", 1, "m", 0), -1);
	CHECK_EQ_INT(owner_put(o, "resp%2fa", 1, "m", 0), -1);
	CHECK_EQ_INT(owner_put(o, "..", 1, "m", 0), -1);
	CHECK_EQ_INT(owner_put(o, ".x", 1, "m", 0), -1);
	CHECK_EQ_INT(owner_put(o, "_x", 1, "m", 0), -1);
	CHECK_EQ_INT(owner_put(o, long_id, 1, "m", 0), -1);
	long_id[ACCT_RESPONSE_ID_MAX - 1] = '\0';
	CHECK_EQ_INT(owner_put(o, long_id, 1, "m", 0), 1);
	CHECK(get(o, long_id, &e));
	CHECK(!owner_get(o, "resp\nx", 6, &e));
	CHECK_EQ_INT(owner_count(o), 1);
	owner_free(o);
}

/* Past max, the oldest go first, and the chains stay whole. */
static void test_oldest_forgotten(void)
{
	struct owner *o = owner_new(300);
	struct owner_entry e;
	char id[32];
	int i, kept = 0;

	for (i = 0; i < 1000; i++) {
		snprintf(id, sizeof(id), "resp_%04d", i);
		CHECK_EQ_INT(owner_put(o, id, i, "m", 0), 1);
	}
	CHECK_EQ_INT(owner_count(o), 300);
	for (i = 0; i < 1000; i++) {
		snprintf(id, sizeof(id), "resp_%04d", i);
		if (get(o, id, &e)) {
			CHECK_EQ_INT(e.key_id, i);
			CHECK(i >= 700);
			kept++;
		}
	}
	CHECK_EQ_INT(kept, 300);
	CHECK_EQ_INT(owner_put(o, "resp_0999", 5, "m", 0), 0);
	owner_free(o);
}

static void test_creates_in_flight(void)
{
	struct owner *o = owner_new(8);

	CHECK(!owner_creates_pending(o, 3));
	owner_creating(o, 3, 1);
	owner_creating(o, 3, 1);
	CHECK(owner_creates_pending(o, 3));
	owner_creating(o, 3, -1);
	CHECK(owner_creates_pending(o, 3));
	owner_creating(o, 3, -1);
	CHECK(!owner_creates_pending(o, 3));
	owner_creating(o, 3, -1);          /* a replayed row: no admission to undo */
	owner_creating(o, 3, 1);
	CHECK(owner_creates_pending(o, 3));
	owner_free(o);
}

static void test_load(void)
{
	struct owner *o = owner_new(2);
	struct owner_entry e;
	char err[256];
	const char *store;
	struct db *db = NULL;

	if (tmpdir_make("owner") < 0 || !(store = teststore_fresh(store_kind, "tally.db"))) {
		CHECK(0);
		return;
	}
	CHECK_EQ_INT(db_open(store, DB_CREATE, &db, err, sizeof(err)), 0);
	CHECK_EQ_INT(db_exec(db, "INSERT INTO stored_responses VALUES"
	                         " ('resp_old', 1, 'm1', 'r1', 100),"
	                         " ('resp_1', 1, 'm1', 'r2', 2000),"
	                         " ('resp_2', 2, 'm2', 'r3', 3000),"
	                         " ('resp_3', 3, 'm3', 'r4', 4000),"
	                         " ('bad id', 3, 'm3', 'r5', 5000);"
	                         "INSERT INTO requests (request_id, outcome, usage_source, started_at,"
	                         " prompt_tokens, completion_tokens) VALUES"
	                         " ('r3', 'complete', 'response', 1, 40, NULL)", err, sizeof(err)), 0);
	CHECK_EQ_INT(owner_load(o, db, 1000, err, sizeof(err)), 0);
	/* Too old, or beyond max (the newest are kept), or no id: not loaded. */
	CHECK(!get(o, "resp_old", &e));
	CHECK(!get(o, "resp_1", &e));
	CHECK(get(o, "resp_2", &e) && e.key_id == 2 && strcmp(e.model, "m2") == 0);
	CHECK_EQ_INT(e.tokens, 40);
	CHECK(get(o, "resp_3", &e) && e.key_id == 3);
	CHECK_EQ_INT(e.tokens, 0);
	db_close(db);
	owner_free(o);
	tmpdir_remove();
}

/* An id the store holds, looked up once the thread's time for probes allows: the
 * connect is charged to it, and a loaded machine can spend it all on one (the probe is
 * then a miss until the budget refills: PROBE_US a second). */
static int get_stored(struct owner *o, const char *id, struct owner_entry *e)
{
	int i;

	for (i = 0; i < 200; i++) {
		if (get(o, id, e))
			return 1;
		usleep(50000);
	}
	return 0;
}

struct asker {
	struct owner *o;
	const char *id;
	int found;
	struct owner_entry e;
};

static void *ask(void *arg)
{
	struct asker *a = arg;

	a->found = owner_get(a->o, a->id, strlen(a->id), &a->e);
	return NULL;
}

/* Once the table is full, an id it lacks is looked up in the store, by any thread on a
 * connection of its own; a table that never filled answers alone. */
static void test_store_answers_what_the_table_forgot(void)
{
	struct owner *o = owner_new(2), *roomy = owner_new(8);
	struct asker a = { o, "resp_1", 0, { 0, "", 0 } };
	struct owner_entry e;
	char err[256];
	const char *store;
	struct db *db = NULL;
	pthread_t t;

	if (tmpdir_make("owner-store") < 0 || !(store = teststore_fresh(store_kind, "tally.db"))) {
		CHECK(0);
		return;
	}
	CHECK_EQ_INT(db_open(store, DB_CREATE, &db, err, sizeof(err)), 0);
	CHECK_EQ_INT(db_exec(db, "INSERT INTO stored_responses VALUES"
	                         " ('resp_1', 4, 'm4', 'r1', 100), ('resp_9', 5, 'm5', 'r9', 100);"
	                         "INSERT INTO requests (request_id, outcome, usage_source, started_at,"
	                         " prompt_tokens, completion_tokens) VALUES"
	                         " ('r1', 'complete', 'response', 1, 700, 300)",
	                         err, sizeof(err)), 0);
	CHECK_EQ_INT(owner_set_store(o, store), 0);
	CHECK_EQ_INT(owner_set_store(roomy, store), 0);
	owner_put(o, "resp_1", 4, "m4", 0);
	owner_put(o, "resp_2", 4, "m4", 0);
	owner_put(o, "resp_3", 4, "m4", 0);           /* full: resp_1 leaves the table */
	CHECK(get(o, "resp_1", &e) && e.key_id == 4 && strcmp(e.model, "m4") == 0);
	/* With the tokens its create's row reported; none without a row. */
	CHECK_EQ_INT(e.tokens, 1000);
	CHECK(get_stored(o, "resp_9", &e) && e.key_id == 5);
	CHECK_EQ_INT(e.tokens, 0);
	CHECK(!get(o, "resp_none", &e));
	CHECK(pthread_create(&t, NULL, ask, &a) == 0 && pthread_join(t, NULL) == 0);
	CHECK(a.found && a.e.key_id == 4);
	CHECK_EQ_INT(owner_creates_pending(roomy, 1), store_kind == TESTSTORE_POSTGRES);
	if (store_kind == TESTSTORE_POSTGRES) {
		/* Shared by nodes: any miss may be another node's create; found, it is kept. */
		CHECK(get(roomy, "resp_9", &e) && e.key_id == 5 && strcmp(e.model, "m5") == 0);
		CHECK_EQ_INT(owner_count(roomy), 1);
		CHECK(!get(roomy, "resp_none", &e));
		CHECK_EQ_INT(owner_count(roomy), 1);
	} else {
		CHECK(!get(roomy, "resp_9", &e));
	}
	CHECK_EQ_INT(owner_set_store(o, NULL), 0);
	/* on PostgreSQL the ids found in the store were kept: resp_1 and resp_9 */
	CHECK(!get(o, store_kind == TESTSTORE_POSTGRES ? "resp_2" : "resp_1", &e));
	db_close(db);
	owner_free(o);
	owner_free(roomy);
	tmpdir_remove();
}

/* A thread probes PROBE_US of every second, saved up to one second's worth; a
 * probe that overruns is paid back before the next. */
static void test_probe_budget(void)
{
	struct probe_budget b = { 0, 0 };
	int64_t t = 1000000;
	int i, n = 0;

	CHECK(probe_budget_allows(&b, t));
	probe_budget_spend(&b, PROBE_US - 1);
	CHECK(probe_budget_allows(&b, t));
	probe_budget_spend(&b, 3 * PROBE_US);   /* a slow one: 3 s of budget owed */
	CHECK(!probe_budget_allows(&b, t + 1000000));
	CHECK(!probe_budget_allows(&b, t + 2900000));
	CHECK(probe_budget_allows(&b, t + 3100000));
	/* asked every microsecond, the refill still adds up */
	t += 20000000;
	CHECK(probe_budget_allows(&b, t));
	probe_budget_spend(&b, PROBE_US);
	for (i = 1; i <= 1000000; i++)
		if (probe_budget_allows(&b, t + i)) {
			probe_budget_spend(&b, 100);
			n++;
		}
	CHECK(n >= PROBE_US / 100 - 1 && n <= PROBE_US / 100 + 1);
	/* idle, it saves one second's worth, no more */
	t += 60000000;
	CHECK(probe_budget_allows(&b, t));
	probe_budget_spend(&b, PROBE_US + 100);
	CHECK(!probe_budget_allows(&b, t));
	CHECK(!probe_budget_allows(&b, t + 1000));   /* 50 us back of 100 owed */
	CHECK(probe_budget_allows(&b, t + 2100));
}

int main(void)
{
	int i;

	RUN(test_first_owner_keeps_it);
	RUN(test_ids_not_kept);
	RUN(test_oldest_forgotten);
	RUN(test_creates_in_flight);
	RUN(test_probe_budget);
	for (i = 0; i < teststore_count(); i++) {
		store_kind = (enum teststore)i;
		printf("store: %s\n", teststore_name(store_kind));
		RUN(test_load);
		RUN(test_store_answers_what_the_table_forgot);
	}
	return UNIT_DONE();
}
