/* Unit tests of keytable on every store (teststore.h: SQLite, and PostgreSQL when
 * TALLY_TEST_PG_URL is set): the snapshot of keys, teams, models, providers and rate
 * cards, byte-ordered model names, and a reload after the configuration generation
 * moved (a key added, a key revoked, a team's flag turned). */
#include <stdio.h>
#include <string.h>

#include "db.h"
#include "fixture.h"
#include "keytable.h"
#include "unit.h"

static enum teststore store;

static const struct kt_key *key_of(const struct keytable *t, const char *key)
{
	return keytable_find_key(t, key, strlen(key));
}

static const struct kt_model *model_of(const struct keytable *t, const char *name)
{
	return keytable_find_model(t, name, strlen(name));
}

static void test_snapshot(void)
{
	struct fixture f;
	const struct kt_key *k;
	const struct kt_model *m;

	if (fixture_open_on(&f, store) < 0) {
		CHECK(0);
		return;
	}
	CHECK_EQ_INT(f.kt->nproviders, 2);
	CHECK_EQ_INT(f.kt->nmodels, 3);
	CHECK_EQ_INT(f.kt->nkeys, 5);
	CHECK(f.kt->generation > 0);
	k = key_of(f.kt, FIX_KEY_OPEN);
	CHECK(k && strcmp(k->name, "open") == 0 && !k->revoked && !k->restricted);
	CHECK(k && k->default_model == model_of(f.kt, "gpt-a"));
	k = key_of(f.kt, FIX_KEY_REVOKED);
	CHECK(k && k->revoked && !k->default_model);
	k = key_of(f.kt, FIX_KEY_RESTRICTED);
	CHECK(k && k->restricted && k->nallowed == 2);
	CHECK(k && keytable_key_allows(k, model_of(f.kt, "claude-a")));
	CHECK(k && !keytable_key_allows(k, model_of(f.kt, "gpt-a")));
	/* An allow-list naming only a deleted model still restricts. */
	k = key_of(f.kt, FIX_KEY_STALE);
	CHECK(k && k->restricted && k->nallowed == 0);
	CHECK(!key_of(f.kt, "tly_unknown0000000000000000000000000000000000"));
	m = model_of(f.kt, "claude-a");
	CHECK(m && m->provider && m->provider->api == KT_API_ANTHROPIC &&
	      strcmp(m->provider->backend, "be_ant") == 0);
	CHECK(m && m->prices.ncards == 1 && strcmp(m->prices.cards[0].tier, "default") == 0 &&
	      m->prices.cards[0].micros[PRICE_INPUT] == 300 &&
	      m->prices.cards[0].micros[PRICE_OUTPUT] == 400);
	fixture_close(&f);
}

/* Names are searched as memcmp orders them: upper case before lower, whatever the
 * store's own collation would say. */
static void test_models_in_byte_order(void)
{
	struct fixture f;
	char err[256];

	if (fixture_open_on(&f, store) < 0) {
		CHECK(0);
		return;
	}
	CHECK_EQ_INT(db_exec(f.db, "INSERT INTO models (id, name, provider_id, created_at,"
	                           " updated_at) VALUES (10, 'Zed', 1, 1, 1), (11, 'alpha', 1, 1, 1),"
	                           " (12, 'b-Model', 1, 1, 1), (13, 'b_model', 2, 1, 1)",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&f), 0);
	CHECK_EQ_INT(f.kt->nmodels, 7);
	CHECK(model_of(f.kt, "Zed") && model_of(f.kt, "alpha") && model_of(f.kt, "b-Model") &&
	      model_of(f.kt, "b_model") && model_of(f.kt, "gpt-b"));
	CHECK(!model_of(f.kt, "zed"));
	fixture_close(&f);
}

static void test_reload_sees_changes(void)
{
	struct fixture f;
	const struct kt_key *k;
	struct keytable *t = NULL;
	int64_t gen, stamp;
	char err[256], sql[512];

	if (fixture_open_on(&f, store) < 0) {
		CHECK(0);
		return;
	}
	gen = f.kt->generation;
	CHECK_EQ_INT(db_config_generation(f.db), gen);
	CHECK_EQ_INT(fixture_add_key(&f, 6, "late", "tly_late000000000000000000000000000000000000",
	                             "gpt-b", 0), 0);
	CHECK_EQ_INT(db_exec(f.db, "UPDATE keys SET revoked_at = 5 WHERE name = 'open'", err,
	                     sizeof(err)), 0);
	CHECK(db_config_generation(f.db) > gen);
	CHECK_EQ_INT(fixture_reload(&f), 0);
	CHECK(f.kt->generation > gen);
	CHECK_EQ_INT(f.kt->generation, db_config_generation(f.db));
	k = key_of(f.kt, "tly_late000000000000000000000000000000000000");
	CHECK(k && k->default_model == model_of(f.kt, "gpt-b"));
	k = key_of(f.kt, FIX_KEY_OPEN);
	CHECK(k && k->revoked);
	/* The limits' stamp grows with every load, even where the store's generation goes
	 * back (a store restored or failed over): quota states take the newest limits by it. */
	stamp = k ? k->quota.generation : 0;
	CHECK(stamp > 0);
	CHECK_EQ_INT(db_exec(f.db, "UPDATE meta SET value = 1 WHERE name = 'config_generation'",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&f), 0);
	CHECK_EQ_INT(f.kt->generation, 1);
	k = key_of(f.kt, FIX_KEY_OPEN);
	CHECK(k && k->quota.generation > stamp);
	/* A row the agent cannot take (written past tallyctl's checks) fails the load, and
	 * the error names its table and row. */
	snprintf(sql, sizeof(sql), "INSERT INTO model_budgets (id, key_id, model, created_at,"
	         " budget_micros) VALUES (42, 1, '%0*d', 1, 5)", ACCT_NAME_MAX + 1, 7);
	CHECK_EQ_INT(db_exec(f.db, sql, err, sizeof(err)), 0);
	CHECK_EQ_INT(keytable_load(f.db, f.secret, &t, err, sizeof(err)), -1);
	CHECK_EQ_STR(err, "loading keys and models: a row of model_budgets the agent cannot take"
	                  " (id 42)");
	CHECK(!db_in_transaction(f.db));
	CHECK_EQ_INT(db_exec(f.db, "DELETE FROM model_budgets", err, sizeof(err)), 0);
	CHECK_EQ_INT(db_exec(f.db, "INSERT INTO end_user_limits (id, key_id, end_user, created_at,"
	                     " rpm) VALUES (7, 1, 'a\tb', 1, 5)", err, sizeof(err)), 0);
	CHECK_EQ_INT(keytable_load(f.db, f.secret, &t, err, sizeof(err)), -1);
	CHECK_EQ_STR(err, "loading keys and models: a row of end_user_limits the agent cannot take"
	                  " (id 7)");
	CHECK_EQ_INT(db_exec(f.db, "DELETE FROM end_user_limits", err, sizeof(err)), 0);
	/* A load that fails (a table gone) says so and leaves no transaction open. */
	CHECK_EQ_INT(db_exec(f.db, "DROP TABLE key_models", err, sizeof(err)), 0);
	CHECK_EQ_INT(keytable_load(f.db, f.secret, &t, err, sizeof(err)), -1);
	CHECK(strstr(err, "loading keys") != NULL);
	CHECK(!db_in_transaction(f.db));
	fixture_close(&f);
}

/* Teams come in by id with their limits, allow-list and members_see_usage; a key points
 * at its own; a team's flag turned is seen at the next reload. */
static void test_teams(void)
{
	struct fixture f;
	const struct kt_key *k;
	int64_t gen;
	char err[256];

	if (fixture_open_on(&f, store) < 0) {
		CHECK(0);
		return;
	}
	CHECK_EQ_INT(f.kt->nteams, 0);
	CHECK_EQ_INT(db_exec(f.db, "INSERT INTO teams (id, name, created_at, rpm, budget_micros,"
	                           " budget_period, members_see_usage) VALUES"
	                           " (10, 'open-team', 1, NULL, NULL, 'month', 0),"
	                           " (9, 'seeing', 1, 5, 700, 'day', 1);"
	                           "INSERT INTO team_models VALUES (9, 'gpt-a');"
	                           "UPDATE keys SET team_id = 9 WHERE id = 1;"
	                           "UPDATE keys SET team_id = 10 WHERE id = 4;",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&f), 0);
	CHECK_EQ_INT(f.kt->nteams, 2);
	if (f.kt->nteams != 2) {
		fixture_close(&f);
		return;
	}
	CHECK_EQ_INT(f.kt->teams[0].id, 9);
	CHECK_EQ_STR(f.kt->teams[0].name, "seeing");
	CHECK_EQ_INT(f.kt->teams[0].quota.rpm, 5);
	CHECK_EQ_INT(f.kt->teams[0].quota.budget_micros, 700);
	CHECK_EQ_INT(f.kt->teams[0].quota.period, QUOTA_PERIOD_DAY);
	CHECK(f.kt->teams[0].restricted && f.kt->teams[0].nallowed == 1);
	CHECK_EQ_INT(f.kt->teams[0].members_see_usage, 1);
	CHECK_EQ_INT(f.kt->teams[1].id, 10);
	CHECK(!f.kt->teams[1].restricted && f.kt->teams[1].quota.rpm == 0);
	CHECK_EQ_INT(f.kt->teams[1].members_see_usage, 0);
	k = key_of(f.kt, FIX_KEY_OPEN);
	CHECK(k && k->team == &f.kt->teams[0]);
	k = key_of(f.kt, FIX_KEY_NODEFAULT);
	CHECK(k && k->team == &f.kt->teams[1]);
	CHECK(key_of(f.kt, FIX_KEY_STALE) && !key_of(f.kt, FIX_KEY_STALE)->team);

	gen = f.kt->generation;
	CHECK_EQ_INT(db_exec(f.db, "UPDATE teams SET members_see_usage = 1 - members_see_usage",
	                     err, sizeof(err)), 0);
	CHECK(db_config_generation(f.db) > gen);
	CHECK_EQ_INT(fixture_reload(&f), 0);
	CHECK_EQ_INT(f.kt->nteams, 2);
	if (f.kt->nteams == 2) {
		CHECK_EQ_INT(f.kt->teams[0].members_see_usage, 0);
		CHECK_EQ_INT(f.kt->teams[1].members_see_usage, 1);
	}
	fixture_close(&f);
}

/* The limits of an end user of key k, or NULL. */
static const struct quota_cfg *limits_of(const struct keytable *t, const struct kt_key *k,
                                         const char *user)
{
	return keytable_end_user_limits(t, k, user, strlen(user));
}

/* End users' limits: a key's row for the end user, else its team's, else the key's
 * default, else the team's; keys without any (nor their team) skip the look-up; a row
 * without limits exempts; every key's end user is a subject of its own, the same for
 * the same secret, and ids order bytewise on both stores. */
static void test_end_user_limits(void)
{
	struct fixture f;
	const struct kt_key *open, *nodef, *stale;
	const struct quota_cfg *c;
	char err[256];

	if (fixture_open_on(&f, store) < 0) {
		CHECK(0);
		return;
	}
	CHECK_EQ_INT(db_exec(f.db, "INSERT INTO teams (id, name, created_at) VALUES (9, 't', 1);"
	                           "UPDATE keys SET team_id = 9 WHERE id IN (1, 4);"
	                           "INSERT INTO end_user_limits (key_id, team_id, end_user, created_at,"
	                           " rpm, tpm, budget_micros, budget_period) VALUES"
	                           " (1, NULL, 'alice', 1, 1, NULL, NULL, 'month'),"
	                           " (NULL, 9, 'alice', 1, 2, NULL, NULL, 'month'),"
	                           " (NULL, 9, 'bob', 1, 3, NULL, NULL, 'month'),"
	                           " (1, NULL, '', 1, 4, 40, 400, 'week'),"
	                           " (NULL, 9, '', 1, 5, NULL, NULL, 'month'),"
	                           " (1, NULL, 'Zed', 1, NULL, NULL, NULL, 'month'),"
	                           " (1, NULL, 'zed', 1, 6, NULL, NULL, 'day')",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&f), 0);
	open = key_of(f.kt, FIX_KEY_OPEN);
	nodef = key_of(f.kt, FIX_KEY_NODEFAULT);
	stale = key_of(f.kt, FIX_KEY_STALE);
	CHECK(open && nodef && stale);
	if (!open || !nodef || !stale) {
		fixture_close(&f);
		return;
	}
	CHECK_EQ_INT(f.kt->nend_user_limits, 7);
	CHECK(open->end_user_limited && nodef->end_user_limited && !stale->end_user_limited);
	/* Only the key's default has a budget: its week is the one period spend.c reads. */
	CHECK_EQ_INT(open->end_user_budgets, 1u << QUOTA_PERIOD_WEEK);
	CHECK_EQ_INT(nodef->end_user_budgets, 0);
	CHECK((c = limits_of(f.kt, open, "alice")) && c->rpm == 1);       /* the key's own */
	CHECK((c = limits_of(f.kt, open, "bob")) && c->rpm == 3);         /* the team's own */
	CHECK((c = limits_of(f.kt, open, "carol")) && c->rpm == 4 && c->tpm == 40 &&
	      c->budget_micros == 400 && c->period == QUOTA_PERIOD_WEEK);  /* the key's default */
	CHECK((c = limits_of(f.kt, nodef, "alice")) && c->rpm == 2);
	CHECK((c = limits_of(f.kt, nodef, "carol")) && c->rpm == 5);      /* the team's default */
	CHECK((c = limits_of(f.kt, open, "Zed")) && !quota_limited(c));   /* exempt */
	CHECK((c = limits_of(f.kt, open, "zed")) && c->rpm == 6 && c->period == QUOTA_PERIOD_DAY);
	CHECK(!limits_of(f.kt, open, ""));
	CHECK(!limits_of(f.kt, stale, "alice"));
	CHECK(keytable_end_user_subject(f.kt, 1, "alice", 5) ==
	      keytable_end_user_subject(f.kt, 1, "alice", 5));
	CHECK(keytable_end_user_subject(f.kt, 1, "alice", 5) !=
	      keytable_end_user_subject(f.kt, 4, "alice", 5));
	CHECK(keytable_end_user_subject(f.kt, 1, "alice", 5) !=
	      keytable_end_user_subject(f.kt, 1, "alicf", 5));
	/* "1" + "1:x" and "11" + ":x" must not meet: the key's id ends at its colon. */
	CHECK(keytable_end_user_subject(f.kt, 1, "1:x", 3) !=
	      keytable_end_user_subject(f.kt, 11, ":x", 2));
	{
		int64_t id;

		CHECK_EQ_INT(quota_subject_level(keytable_end_user_subject(f.kt, 1, "a", 1), &id),
		             QUOTA_LEVEL_END_USER);
	}
	/* A team's deletion takes its rows; the key's stay. */
	CHECK_EQ_INT(db_exec(f.db, "UPDATE keys SET team_id = NULL; DELETE FROM teams",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&f), 0);
	open = key_of(f.kt, FIX_KEY_OPEN);
	nodef = key_of(f.kt, FIX_KEY_NODEFAULT);
	CHECK_EQ_INT(f.kt->nend_user_limits, 4);
	CHECK(open && open->end_user_limited && nodef && !nodef->end_user_limited);
	CHECK(open && (c = limits_of(f.kt, open, "bob")) && c->rpm == 4);
	fixture_close(&f);
}

/* Budgets per model: each key's and team's a run of its own, in model order; the one a
 * model counts against is the one of its name, else one it is a dated snapshot or the
 * -latest alias of; a row the agent cannot count under an id of its own fails the load
 * whole. */
static void test_model_budgets(void)
{
	struct fixture f;
	const struct kt_key *open, *nodef;
	const struct kt_model_budget *b;
	char err[256];

	if (fixture_open_on(&f, store) < 0) {
		CHECK(0);
		return;
	}
	CHECK_EQ_INT(db_exec(f.db, "INSERT INTO teams (id, name, created_at) VALUES (9, 't', 1);"
	                           "UPDATE keys SET team_id = 9 WHERE id = 4;"
	                           "INSERT INTO model_budgets (id, key_id, team_id, model, created_at,"
	                           " budget_micros, budget_period) VALUES"
	                           " (5, 1, NULL, 'gpt-a', 1, 100, 'day'),"
	                           " (6, NULL, 9, 'gpt-a', 1, 200, 'month'),"
	                           " (7, 1, NULL, 'gpt-a-2026-01-02', 1, 300, 'week'),"
	                           " (8, 1, NULL, 'Gpt-a', 1, 400, 'total')",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&f), 0);
	open = key_of(f.kt, FIX_KEY_OPEN);
	nodef = key_of(f.kt, FIX_KEY_NODEFAULT);
	CHECK(open && nodef && nodef->team);
	if (!open || !nodef || !nodef->team) {
		fixture_close(&f);
		return;
	}
	CHECK_EQ_INT(f.kt->nmodel_budgets, 4);
	CHECK_EQ_INT(open->nmodel_budgets, 3);
	CHECK_EQ_INT(nodef->nmodel_budgets, 0);
	CHECK_EQ_INT(nodef->team->nmodel_budgets, 1);
	CHECK_EQ_STR(open->model_budgets[0].model, "Gpt-a");            /* bytewise */
	b = keytable_model_budget(open->model_budgets, open->nmodel_budgets, "gpt-a");
	CHECK(b && b->id == 5 && b->quota.budget_micros == 100 && b->quota.period == QUOTA_PERIOD_DAY);
	/* Its own name first, then the model it is a snapshot of. */
	b = keytable_model_budget(open->model_budgets, open->nmodel_budgets, "gpt-a-2026-01-02");
	CHECK(b && b->id == 7 && b->quota.period == QUOTA_PERIOD_WEEK);
	b = keytable_model_budget(open->model_budgets, open->nmodel_budgets, "gpt-a-2026-03-04");
	CHECK(b && b->id == 5);
	b = keytable_model_budget(open->model_budgets, open->nmodel_budgets, "gpt-a-latest");
	CHECK(b && b->id == 5);
	CHECK(!keytable_model_budget(open->model_budgets, open->nmodel_budgets, "gpt-a-latestx"));
	CHECK(!keytable_model_budget(open->model_budgets, open->nmodel_budgets, "gpt-ab"));
	CHECK(!keytable_model_budget(open->model_budgets, open->nmodel_budgets, "gpt-"));
	b = keytable_model_budget(nodef->team->model_budgets, nodef->team->nmodel_budgets,
	                          "gpt-a-20260102");
	CHECK(b && b->id == 6 && b->team_id == 9 && b->key_id == 0);
	{
		int64_t id;

		CHECK_EQ_INT(quota_subject_level(quota_key_model_subject(5), &id), QUOTA_LEVEL_KEY_MODEL);
		CHECK_EQ_INT(id, 5);
		CHECK_EQ_INT(quota_subject_level(quota_team_model_subject(QUOTA_MODEL_SUBJECT_IDS - 1),
		                                 &id), QUOTA_LEVEL_TEAM_MODEL);
		CHECK_EQ_INT(id, QUOTA_MODEL_SUBJECT_IDS - 1);
		CHECK_EQ_INT(quota_subject_level(quota_key_model_subject(QUOTA_MODEL_SUBJECT_IDS - 1),
		                                 &id), QUOTA_LEVEL_KEY_MODEL);
		CHECK_EQ_INT(quota_subject_level(quota_tag_subject(QUOTA_KEY_MODEL_SUBJECTS -
		                                                   QUOTA_TAG_SUBJECTS - 1), &id),
		             QUOTA_LEVEL_TAG);
	}
	/* A budget whose id would run into the end users' subjects fails the load, as a
	 * tag budget's running into the model budgets' does. */
	CHECK_EQ_INT(db_exec(f.db, "UPDATE model_budgets SET id = 1152921504606846976 WHERE id = 8",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&f), -1);
	CHECK_EQ_INT(db_exec(f.db, "UPDATE model_budgets SET id = 8 WHERE id = 1152921504606846976;"
	                           "INSERT INTO tag_budgets (id, tag, created_at, budget_micros)"
	                           " VALUES (2305561534236983296, 'a=b', 1, 1)",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&f), -1);
	/* Deleting a key or a team takes its budgets. */
	CHECK_EQ_INT(db_exec(f.db, "DELETE FROM tag_budgets; UPDATE keys SET team_id = NULL;"
	                           " DELETE FROM teams", err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&f), 0);
	CHECK_EQ_INT(f.kt->nmodel_budgets, 3);
	fixture_close(&f);
}

int main(void)
{
	int i;

	for (i = 0; i < teststore_count(); i++) {
		store = (enum teststore)i;
		printf("store: %s\n", teststore_name(store));
		RUN(test_snapshot);
		RUN(test_models_in_byte_order);
		RUN(test_reload_sees_changes);
		RUN(test_teams);
		RUN(test_end_user_limits);
		RUN(test_model_budgets);
	}
	return UNIT_DONE();
}
