/* Unit tests of queryd's planner (queryd/plan.c): which named query answers a summary
 * and which days it reads from the daily rollups (ragged ends, the 12-hour rule of a
 * summary by key, day, month and year boundaries, group=hour), the days whose sums are
 * kept, the bindings of a summary (of end users too), of the row filters, of a page of
 * request rows and the export's query. Single-threaded. */
#include <stdint.h>

#include "plan.h"
#include "unit.h"

#define H 3600LL
#define D (24 * H)
#define MAR10 1710028800LL   /* 2024-03-10 00:00 UTC */
#define FEB28 1709078400LL   /* 2024-02-28, 2024 a leap year */
#define MAR01 1709251200LL
#define DEC31 1703980800LL   /* 2023-12-31 */

static struct params test_params(int64_t from, int64_t to, enum params_group group)
{
	return (struct params){ .from = from, .to = to, .group = group, .stream = -1,
	                        .limit = PARAMS_LIMIT_DEFAULT };
}

static const struct conn_bind *test_bind(const struct plan_binds *b, const char *name)
{
	size_t i;

	for (i = 0; i < b->n; i++)
		if (strcmp(b->v[i].name, name) == 0)
			return &b->v[i];
	return NULL;
}

static void test_check_int(const struct plan_binds *b, const char *name, int64_t v)
{
	const struct conn_bind *x = test_bind(b, name);

	CHECK(x != NULL);
	if (x) {
		CHECK_EQ_INT(x->kind, CONN_BIND_INT);
		CHECK_EQ_INT(x->i, v);
	}
}

static enum conn_query test_query(struct params p)
{
	struct plan_summary pl;

	plan_summary(&p, MAR10, &pl);
	return pl.query;
}

static void test_summary_query(void)
{
	struct params p = test_params(MAR10 - D, MAR10, PARAMS_GROUP_MODEL);

	/* without a key: per model, or the totals by hour when the model does not matter */
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_MODELS);
	p.group = PARAMS_GROUP_PROVIDER;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_MODELS);
	p.group = PARAMS_GROUP_DAY;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_MODELS);
	p.group = PARAMS_GROUP_HOUR;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_TOTALS);
	p.model = "gpt-4o";
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_MODELS);
	/* by key: per key alone unless a model filter needs the model */
	p = test_params(MAR10 - D, MAR10, PARAMS_GROUP_KEY);
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_KEYS);
	p.model = "gpt-4o";
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY);
	/* a key filter: per key, with the model where the group or a filter names it */
	p = test_params(MAR10 - D, MAR10, PARAMS_GROUP_DAY);
	p.has_key_id = 1;
	p.key_id = 7;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_KEYS);
	p.group = PARAMS_GROUP_HOUR;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_KEYS);
	p.key_id = 0;   /* rows without a key: still a key filter */
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_KEYS);
	p.group = PARAMS_GROUP_MODEL;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY);
	p.group = PARAMS_GROUP_PROVIDER;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY);
	p.group = PARAMS_GROUP_HOUR;
	p.model = "gpt-4o";
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY);
	/* by team, or of one team by hour or day: the team rollups */
	p = test_params(MAR10 - D, MAR10, PARAMS_GROUP_TEAM);
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_TEAMS);
	p.group = PARAMS_GROUP_HOUR;
	p.has_team_id = 1;
	p.team_id = 4;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_TEAMS);
	p.group = PARAMS_GROUP_DAY;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_TEAMS);
	/* by end user, or of one end user by key or day, with or without a key: the end
	 * users' rollup, the only one that has them */
	p = test_params(MAR10 - D, MAR10, PARAMS_GROUP_END_USER);
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_END_USERS);
	p.has_key_id = 1;
	p.key_id = 7;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_END_USERS);
	p.group = PARAMS_GROUP_DAY;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_KEYS);
	p.end_user = "u-1";
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_END_USERS);
	p.group = PARAMS_GROUP_KEY;
	p.has_key_id = 0;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_END_USERS);
	/* by tag, or of one tag by key or day (a key's too): the tags' rollup */
	p = test_params(MAR10 - D, MAR10, PARAMS_GROUP_TAG);
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_TAGS);
	p.tag = "env=prod";
	p.group = PARAMS_GROUP_DAY;
	p.has_key_id = 1;
	CHECK_EQ_INT(test_query(p), CONN_SUMMARY_TAGS);
}

static void test_days(struct params p, int64_t day_from, int64_t day_to)
{
	struct plan_summary pl;

	plan_summary(&p, MAR10, &pl);
	CHECK_EQ_INT(pl.day_from, day_from);
	CHECK_EQ_INT(pl.day_to, day_to);
}

static void test_summary_days(void)
{
	struct params p = test_params(MAR10, MAR10 + 3 * D, PARAMS_GROUP_DAY);

	/* whole days: all from the daily rollups */
	test_days(p, MAR10, MAR10 + 3 * D);
	/* ragged ends: only the whole days inside, however many hours the ends hold */
	p.from = MAR10 + 5 * H;
	p.to = MAR10 + 2 * D + 23 * H;
	test_days(p, MAR10 + D, MAR10 + 2 * D);
	/* inside one day, or across one midnight: no whole day, none read */
	p.from = MAR10 + H;
	p.to = MAR10 + 5 * H;
	test_days(p, p.to, p.to);
	p.from = MAR10 - 2 * H;
	p.to = MAR10 + 3 * H;
	test_days(p, p.to, p.to);
	/* group=hour reads hourly rows throughout */
	p = test_params(MAR10, MAR10 + 3 * D, PARAMS_GROUP_HOUR);
	test_days(p, p.to, p.to);
	/* across a month's end (February of a leap year) and a year's */
	p = test_params(FEB28 + 20 * H, MAR01 + D + 4 * H, PARAMS_GROUP_MODEL);
	test_days(p, FEB28 + D, MAR01 + D);
	p = test_params(DEC31 - D + 6 * H, DEC31 + 2 * D + 6 * H, PARAMS_GROUP_MODEL);
	test_days(p, DEC31, DEC31 + 2 * D);
}

static void test_summary_days_by_key(void)
{
	struct params p = test_params(MAR10 + 12 * H, MAR10 + D + 12 * H, PARAMS_GROUP_KEY);

	/* 12 hours of an end day in the range: its hours, not its day (here no day) */
	test_days(p, p.to, p.to);
	/* 13: the day whole, less its hours outside the range */
	p.from = MAR10 + 11 * H;
	p.to = MAR10 + D + 13 * H;
	test_days(p, MAR10, MAR10 + 2 * D);
	p.from = MAR10 + 12 * H;
	test_days(p, MAR10 + D, MAR10 + 2 * D);
	p.from = MAR10 + 11 * H;
	p.to = MAR10 + D + 12 * H;
	test_days(p, MAR10, MAR10 + D);
	/* inside one day: the day whole once more than 12 of its hours precede the end */
	p.from = MAR10 + H;
	p.to = MAR10 + 13 * H;
	test_days(p, MAR10, MAR10 + D);
	p.to = MAR10 + 12 * H;
	test_days(p, p.to, p.to);
	/* a key filter by hour reads no days, whatever the ends */
	p = test_params(MAR10 + H, MAR10 + 3 * D - H, PARAMS_GROUP_HOUR);
	p.has_key_id = 1;
	test_days(p, p.to, p.to);
	/* the last 24 hours up to 05:00: yesterday whole and today's 5 hours */
	p = test_params(MAR10 - 19 * H, MAR10 + 5 * H, PARAMS_GROUP_KEY);
	test_days(p, MAR10 - D, MAR10);
	/* across a year's end */
	p = test_params(DEC31 - 20 * H, DEC31 + D + 14 * H, PARAMS_GROUP_KEY);
	test_days(p, DEC31 - D, DEC31 + 2 * D);
	/* by team: the same rule (summary_teams subtracts too) */
	p = test_params(MAR10 + 11 * H, MAR10 + D + 13 * H, PARAMS_GROUP_TEAM);
	test_days(p, MAR10, MAR10 + 2 * D);
	p.from = MAR10 + 12 * H;
	p.to = MAR10 + D + 12 * H;
	test_days(p, p.to, p.to);
	p = test_params(MAR10 + H, MAR10 + 3 * D - H, PARAMS_GROUP_HOUR);
	p.has_team_id = 1;
	p.team_id = 2;
	test_days(p, p.to, p.to);
	p.group = PARAMS_GROUP_DAY;
	test_days(p, MAR10, MAR10 + 3 * D);
}

static void test_summary_kept(void)
{
	struct params p = test_params(MAR10 - 10 * D, MAR10 + 5 * H, PARAMS_GROUP_KEY);
	struct plan_summary pl;

	/* the days before today's */
	plan_summary(&p, MAR10 + 4 * H, &pl);
	CHECK_EQ_INT(pl.day_from, MAR10 - 10 * D);
	CHECK_EQ_INT(pl.day_to, MAR10);
	CHECK_EQ_INT(pl.cache_to, MAR10);
	test_check_int(&pl.binds, ":cache_to", MAR10);
	/* now after the days: all of them; before them: none */
	plan_summary(&p, MAR10 + 40 * D, &pl);
	CHECK_EQ_INT(pl.cache_to, MAR10);
	plan_summary(&p, MAR10 - 20 * D, &pl);
	CHECK_EQ_INT(pl.cache_to, MAR10 - 10 * D);
	plan_summary(&p, MAR10 - 5 * D + H, &pl);
	CHECK_EQ_INT(pl.cache_to, MAR10 - 5 * D);
}

static void test_summary_binds(void)
{
	struct params p = test_params(MAR10 - 2 * D, MAR10 + 5 * H, PARAMS_GROUP_MODEL);
	struct plan_summary pl;

	plan_summary(&p, MAR10, &pl);
	CHECK_EQ_INT(pl.binds.n, 4);
	test_check_int(&pl.binds, ":from", p.from);
	test_check_int(&pl.binds, ":to", p.to);
	test_check_int(&pl.binds, ":day_from", MAR10 - 2 * D);
	test_check_int(&pl.binds, ":day_to", MAR10);
	CHECK(test_bind(&pl.binds, ":cache_to") == NULL);
	/* a key and a model only when given (key 0 is given) */
	p.has_key_id = 1;
	p.model = "gpt-4o";
	plan_summary(&p, MAR10, &pl);
	CHECK_EQ_INT(pl.query, CONN_SUMMARY);
	CHECK_EQ_INT(pl.binds.n, 6);
	test_check_int(&pl.binds, ":key_id", 0);
	CHECK(test_bind(&pl.binds, ":model") != NULL);
	CHECK_EQ_INT(test_bind(&pl.binds, ":model")->kind, CONN_BIND_TEXT);
	CHECK_EQ_STR(test_bind(&pl.binds, ":model")->s, "gpt-4o");
	CHECK(test_bind(&pl.binds, ":cache_to") == NULL);
}

/* A summary of end users: its whole days (params.c widened them) read from the daily
 * rollup, grouped as the answer is, the first limit groups or every day. */
static void test_summary_end_users(void)
{
	struct params p = test_params(MAR10 - 3 * D, MAR10, PARAMS_GROUP_END_USER);
	const struct conn_bind *x;
	struct plan_summary pl;

	plan_summary(&p, MAR10 + H, &pl);
	CHECK_EQ_INT(pl.day_from, MAR10 - 3 * D);
	CHECK_EQ_INT(pl.day_to, MAR10);
	/* no key or end user filter: left NULL (conn_stmt clears the bindings) */
	CHECK_EQ_INT(pl.binds.n, 5);
	test_check_int(&pl.binds, ":day_from", MAR10 - 3 * D);
	test_check_int(&pl.binds, ":day_to", MAR10);
	test_check_int(&pl.binds, ":by_day", 0);
	test_check_int(&pl.binds, ":by_end_user", 1);
	test_check_int(&pl.binds, ":limit", PARAMS_LIMIT_DEFAULT);
	CHECK(test_bind(&pl.binds, ":from") == NULL);
	CHECK(test_bind(&pl.binds, ":key_id") == NULL);
	CHECK(test_bind(&pl.binds, ":end_user") == NULL);
	/* a key and an end user by key: the first limit keys */
	p.group = PARAMS_GROUP_KEY;
	p.has_key_id = 1;
	p.key_id = 7;
	p.end_user = "=cmd|' /C calc'!A0";
	p.limit = 2;
	plan_summary(&p, MAR10 + H, &pl);
	CHECK_EQ_INT(pl.binds.n, 7);
	test_check_int(&pl.binds, ":key_id", 7);
	x = test_bind(&pl.binds, ":end_user");
	CHECK(x && x->kind == CONN_BIND_TEXT && strcmp(x->s, p.end_user) == 0);
	test_check_int(&pl.binds, ":by_day", 0);
	test_check_int(&pl.binds, ":by_end_user", 0);
	test_check_int(&pl.binds, ":limit", 2);
	/* by day: every day of the range, whatever the limit */
	p.group = PARAMS_GROUP_DAY;
	plan_summary(&p, MAR10 + H, &pl);
	test_check_int(&pl.binds, ":by_day", 1);
	test_check_int(&pl.binds, ":by_end_user", 0);
	test_check_int(&pl.binds, ":limit", 3);
	p.from = MAR10 - 400 * D;
	plan_summary(&p, MAR10 + H, &pl);
	test_check_int(&pl.binds, ":limit", 400);
}

/* A summary of tags: summary_end_users' plan on the tag rollups, with :tag, :by_tag and
 * :per_key (tag_daily where the key matters, tag_total_daily else). */
static void test_summary_tags(void)
{
	struct params p = test_params(MAR10 - 3 * D, MAR10, PARAMS_GROUP_TAG);
	const struct conn_bind *x;
	struct plan_summary pl;

	plan_summary(&p, MAR10 + H, &pl);
	CHECK_EQ_INT(pl.query, CONN_SUMMARY_TAGS);
	CHECK_EQ_INT(pl.binds.n, 6);
	test_check_int(&pl.binds, ":by_tag", 1);
	test_check_int(&pl.binds, ":per_key", 0);
	CHECK(test_bind(&pl.binds, ":tag") == NULL);
	CHECK(test_bind(&pl.binds, ":by_end_user") == NULL);
	/* by tag, of one key: per key */
	p.has_key_id = 1;
	p.key_id = 7;
	plan_summary(&p, MAR10 + H, &pl);
	test_check_int(&pl.binds, ":per_key", 1);
	/* by key, of one tag: per key */
	p.group = PARAMS_GROUP_KEY;
	p.has_key_id = 0;
	p.tag = "env=prod";
	plan_summary(&p, MAR10 + H, &pl);
	test_check_int(&pl.binds, ":per_key", 1);
	p.has_key_id = 1;
	plan_summary(&p, MAR10 + H, &pl);
	CHECK_EQ_INT(pl.binds.n, 8);
	test_check_int(&pl.binds, ":key_id", 7);
	x = test_bind(&pl.binds, ":tag");
	CHECK(x && x->kind == CONN_BIND_TEXT && strcmp(x->s, "env=prod") == 0);
	test_check_int(&pl.binds, ":by_tag", 0);
	test_check_int(&pl.binds, ":per_key", 1);
	CHECK(test_bind(&pl.binds, ":end_user") == NULL);
	p.group = PARAMS_GROUP_DAY;
	plan_summary(&p, MAR10 + H, &pl);
	test_check_int(&pl.binds, ":by_day", 1);
	test_check_int(&pl.binds, ":limit", 3);
	test_check_int(&pl.binds, ":per_key", 1);
	/* by day of one tag across keys: the totals */
	p.has_key_id = 0;
	plan_summary(&p, MAR10 + H, &pl);
	test_check_int(&pl.binds, ":per_key", 0);
	/* an end user's summary has none */
	p.tag = NULL;
	p.end_user = "u1";
	plan_summary(&p, MAR10 + H, &pl);
	CHECK_EQ_INT(pl.query, CONN_SUMMARY_END_USERS);
	CHECK(test_bind(&pl.binds, ":per_key") == NULL);
}

static void test_filters(void)
{
	struct params p = test_params(100, 200, PARAMS_GROUP_MODEL);
	struct plan_binds b = { 0 };
	const struct conn_bind *x;
	size_t i;

	plan_filters(&p, &b);
	/* from, to, has_key, key_id, has_team, team_id, end_user, tag, model, provider,
	 * outcome, errors_only */
	CHECK_EQ_INT(b.n, 12);
	test_check_int(&b, ":from_ms", 100000);
	test_check_int(&b, ":to_ms", 200000);
	test_check_int(&b, ":has_key", 0);
	test_check_int(&b, ":errors_only", 0);
	for (i = 0; i < b.n; i++)
		CHECK_EQ_INT(b.v[i].only_if_named, strcmp(b.v[i].name, ":to_ms") == 0 ||
		                                   strcmp(b.v[i].name, ":has_key") == 0 ||
		                                   strcmp(b.v[i].name, ":key_id") == 0 ||
		                                   strcmp(b.v[i].name, ":has_team") == 0 ||
		                                   strcmp(b.v[i].name, ":team_id") == 0 ||
		                                   strcmp(b.v[i].name, ":end_user") == 0 ||
		                                   strcmp(b.v[i].name, ":tag") == 0);
	test_check_int(&b, ":has_team", 0);
	x = test_bind(&b, ":end_user");
	CHECK(x && x->kind == CONN_BIND_TEXT && x->s == NULL);
	x = test_bind(&b, ":tag");
	CHECK(x && x->kind == CONN_BIND_TEXT && x->s == NULL);
	x = test_bind(&b, ":team_id");
	CHECK(x && x->kind == CONN_BIND_NULL);
	/* no key, and key 0 (rows without one): a NULL key_id */
	x = test_bind(&b, ":key_id");
	CHECK(x && x->kind == CONN_BIND_NULL);
	/* filters not given bind NULL text; status and stream are left out */
	x = test_bind(&b, ":model");
	CHECK(x && x->kind == CONN_BIND_TEXT && x->s == NULL);
	CHECK(test_bind(&b, ":status_lo") == NULL);
	CHECK(test_bind(&b, ":stream") == NULL);
	p.has_key_id = 1;
	b.n = 0;
	plan_filters(&p, &b);
	x = test_bind(&b, ":key_id");
	CHECK(x && x->kind == CONN_BIND_NULL);
	test_check_int(&b, ":has_key", 1);
	p.key_id = 7;
	p.model = "m";
	p.provider = "openai";
	p.outcome = "complete";
	p.status_lo = 500;
	p.status_hi = 599;
	p.errors_only = 1;
	p.stream = 0;
	b.n = 0;
	plan_filters(&p, &b);
	CHECK_EQ_INT(b.n, 15);
	test_check_int(&b, ":key_id", 7);
	test_check_int(&b, ":status_lo", 500);
	test_check_int(&b, ":status_hi", 599);
	test_check_int(&b, ":errors_only", 1);
	test_check_int(&b, ":stream", 0);
	CHECK_EQ_STR(test_bind(&b, ":provider")->s, "openai");
	CHECK_EQ_STR(test_bind(&b, ":outcome")->s, "complete");
	/* team 0: rows without a team, a NULL team_id; else the team's id */
	p.has_team_id = 1;
	b.n = 0;
	plan_filters(&p, &b);
	test_check_int(&b, ":has_team", 1);
	x = test_bind(&b, ":team_id");
	CHECK(x && x->kind == CONN_BIND_NULL);
	p.team_id = 5;
	b.n = 0;
	plan_filters(&p, &b);
	test_check_int(&b, ":team_id", 5);
	/* an end user: its id as given */
	p.end_user = "@SUM(A1)";
	b.n = 0;
	plan_filters(&p, &b);
	x = test_bind(&b, ":end_user");
	CHECK(x && x->kind == CONN_BIND_TEXT && x->only_if_named);
	CHECK_EQ_STR(x->s, "@SUM(A1)");
	/* a tag: as given, where the query names it (a tag's own walk and the others that
	 * filter by it) */
	p.tag = "env=prod";
	b.n = 0;
	plan_filters(&p, &b);
	x = test_bind(&b, ":tag");
	CHECK(x && x->kind == CONN_BIND_TEXT && x->only_if_named);
	CHECK_EQ_STR(x->s, "env=prod");
}

static void test_requests(void)
{
	struct params p = test_params(100, 200, PARAMS_GROUP_MODEL);
	struct plan_requests pl;

	/* the index to walk */
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE);
	p.model = "m";
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_MODEL);
	/* a team: its index, but not for rows without a team (not in it), nor under a key */
	p.has_team_id = 1;
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_MODEL);
	p.model = NULL;
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE);
	p.team_id = 6;
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_TEAM);
	p.model = "m";
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_TEAM);
	p.has_key_id = 1;
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_NOKEY);
	p.key_id = 3;
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_KEY);
	/* the filters, then one upper bound: the range's end without a cursor */
	CHECK_EQ_INT(pl.binds.n, 15);
	CHECK_EQ_STR(pl.binds.v[0].name, ":from_ms");
	test_check_int(&pl.binds, ":before_ms", 200000);
	test_check_int(&pl.binds, ":before_id", INT64_MIN);
	test_check_int(&pl.binds, ":limit", PARAMS_LIMIT_DEFAULT + 1);
	/* the cursor when it is older than the end, else still the end */
	p.has_before = 1;
	p.before_ms = 150000;
	p.before_id = 42;
	p.limit = 1;
	plan_requests(&p, INT64_MAX, &pl);
	test_check_int(&pl.binds, ":before_ms", 150000);
	test_check_int(&pl.binds, ":before_id", 42);
	test_check_int(&pl.binds, ":limit", 2);
	p.before_ms = 200000;
	plan_requests(&p, INT64_MAX, &pl);
	test_check_int(&pl.binds, ":before_ms", 200000);
	test_check_int(&pl.binds, ":before_id", INT64_MIN);
	p.before_ms = 900000;
	plan_requests(&p, INT64_MAX, &pl);
	test_check_int(&pl.binds, ":before_ms", 200000);
	/* a tag's last day ending before both: the walk starts there, at any id */
	p.before_ms = 150000;
	plan_requests(&p, 120000, &pl);
	test_check_int(&pl.binds, ":before_ms", 120000);
	test_check_int(&pl.binds, ":before_id", INT64_MIN);
	plan_requests(&p, 0, &pl);          /* a tag with no rows: nothing to walk */
	test_check_int(&pl.binds, ":before_ms", 0);
	plan_requests(&p, 160000, &pl);     /* the cursor stays below it */
	test_check_int(&pl.binds, ":before_ms", 150000);
	test_check_int(&pl.binds, ":before_id", 42);
	p.before_ms = 900000;
	/* an end user: its own index, whatever else narrows its rows; every binding made */
	p.end_user = "u-1";
	p.status_lo = 400;
	p.status_hi = 499;
	p.stream = 1;
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_END_USER);
	CHECK_EQ_INT(pl.binds.n, PLAN_BINDS_MAX);
	p.has_key_id = p.has_team_id = 0;
	p.model = NULL;
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_END_USER);
	/* a tag: an end user's or a key's index before its own, its own before a team's
	 * or a model's */
	p.tag = "env=prod";
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_END_USER);
	p.end_user = NULL;
	p.has_key_id = 1;
	p.key_id = 3;
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_KEY);
	p.has_key_id = 0;
	p.has_team_id = 1;
	p.team_id = 2;
	p.model = "m";
	plan_requests(&p, INT64_MAX, &pl);
	CHECK_EQ_INT(pl.query, CONN_REQUESTS_PAGE_TAG);
	CHECK_EQ_STR(test_bind(&pl.binds, ":tag")->s, "env=prod");
	CHECK(test_bind(&pl.binds, ":tag")->only_if_named);
}

static void test_export(void)
{
	struct params p = test_params(100, 200, PARAMS_GROUP_MODEL);

	CHECK_EQ_INT(plan_export(&p), CONN_EXPORT);
	p.has_key_id = 1;
	p.key_id = 3;
	p.has_team_id = 1;
	p.model = "m";
	CHECK_EQ_INT(plan_export(&p), CONN_EXPORT);
	p.tag = "env=prod";
	CHECK_EQ_INT(plan_export(&p), CONN_EXPORT_TAG);
	p.end_user = "u-1";
	CHECK_EQ_INT(plan_export(&p), CONN_EXPORT_END_USER);
}

int main(void)
{
	RUN(test_summary_query);
	RUN(test_summary_days);
	RUN(test_summary_days_by_key);
	RUN(test_summary_kept);
	RUN(test_summary_binds);
	RUN(test_summary_end_users);
	RUN(test_summary_tags);
	RUN(test_filters);
	RUN(test_requests);
	RUN(test_export);
	return UNIT_DONE();
}
