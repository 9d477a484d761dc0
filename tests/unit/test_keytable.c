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
	int64_t gen;
	char err[256];

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
	}
	return UNIT_DONE();
}
