/* plan: the query and bindings of a summary or a page of request rows (see plan.h).
 * Pure; any thread. */
#include "plan.h"

#include "period.h"

/* A ragged end day with more than this many of its hours in the range is read whole from
 * the daily rollup, less its other hours: 1 + (24 - h) rows a key instead of h. */
#define PLAN_RAGGED_HOURS_MAX 12

static void plan_add(struct plan_binds *b, struct conn_bind bind)
{
	b->v[b->n++] = bind;
}

static void plan_int(struct plan_binds *b, const char *name, int64_t v)
{
	plan_add(b, (struct conn_bind){ .name = name, .kind = CONN_BIND_INT, .i = v });
}

/* s NULL binds NULL. */
static void plan_text(struct plan_binds *b, const char *name, const char *s)
{
	plan_add(b, (struct conn_bind){ .name = name, .kind = CONN_BIND_TEXT, .s = s });
}

/* The rollups that answer p with the fewest rows: per tag (and key) for a tag, per key
 * and end user for an end user (the only rollups that have them; params.c lets no team,
 * model, provider or hour meet either, nor one the other), per team for a team (params.c lets no key, model or provider meet it), the
 * totals by hour when nothing but the hour matters, per model when the key does not,
 * per key alone when neither model nor provider does, else per key and model. */
static enum conn_query plan_summary_query(const struct params *p)
{
	if (p->group == PARAMS_GROUP_TAG || p->tag)
		return CONN_SUMMARY_TAGS;
	if (p->group == PARAMS_GROUP_END_USER || p->end_user)
		return CONN_SUMMARY_END_USERS;
	if (p->group == PARAMS_GROUP_TEAM || p->has_team_id)
		return CONN_SUMMARY_TEAMS;
	if (!p->has_key_id && p->group != PARAMS_GROUP_KEY)
		return p->group == PARAMS_GROUP_HOUR && !p->model ? CONN_SUMMARY_TOTALS
		                                                  : CONN_SUMMARY_MODELS;
	if (!p->model && p->group != PARAMS_GROUP_MODEL && p->group != PARAMS_GROUP_PROVIDER)
		return CONN_SUMMARY_KEYS;
	return CONN_SUMMARY;
}

/* The days [*day_from, *day_to) a summary over [from, to) reads from the daily rollups;
 * the query adds the range's hours outside them and subtracts their hours outside the
 * range, so any days give the same sums. Whole days inside the range, and with
 * whole_ends (summary_keys and summary_teams subtract) a ragged end's day when that
 * reads fewer rows (the last 30 days up to now: ~7 000 rows by key, not ~10 600). None
 * for group=hour. */
static void plan_summary_days(const struct params *p, int whole_ends, int64_t *day_from,
                              int64_t *day_to)
{
	const int64_t day = PERIOD_DAY_MS / 1000, hour = PERIOD_HOUR_MS / 1000;
	int64_t lo = period_start_ms(PERIOD_DAY, p->from * 1000) / 1000;
	int64_t hi = period_start_ms(PERIOD_DAY, p->to * 1000) / 1000;

	if (lo < p->from && (!whole_ends || (lo + day - p->from) / hour <= PLAN_RAGGED_HOURS_MAX))
		lo += day;
	if (hi < p->to && whole_ends && (p->to - hi) / hour > PLAN_RAGGED_HOURS_MAX)
		hi += day;
	if (p->group == PARAMS_GROUP_HOUR || lo >= hi)
		lo = hi = p->to;
	*day_from = lo;
	*day_to = hi;
}

/* The end of the days [day_from, day_to) of a summary by key whose sums queryd keeps:
 * those before the day holding now, which changes with every batch. */
static int64_t plan_kept_to(int64_t day_from, int64_t day_to, int64_t now)
{
	int64_t today = period_start_ms(PERIOD_DAY, now * 1000) / 1000;

	return today < day_from ? day_from : today < day_to ? today : day_to;
}

/* The bindings of summary_end_users and summary_tags: their whole days, the key and
 * end user or tag filters (NULL when not given), the answer's groups (by day; by key;
 * by key and end user; by tag), whether a tag's rows are read per key (a key filter or
 * group=key) or across keys, and how many groups it returns: the first limit by cost,
 * or every day of the range. */
static void plan_ranked(const struct params *p, struct plan_summary *out)
{
	struct plan_binds *b = &out->binds;
	int by_day = p->group == PARAMS_GROUP_DAY, tags = out->query == CONN_SUMMARY_TAGS;

	plan_int(b, ":day_from", out->day_from);
	plan_int(b, ":day_to", out->day_to);
	if (p->has_key_id)
		plan_int(b, ":key_id", p->key_id);
	if (tags ? p->tag != NULL : p->end_user != NULL)
		plan_text(b, tags ? ":tag" : ":end_user", tags ? p->tag : p->end_user);
	plan_int(b, ":by_day", by_day);
	plan_int(b, tags ? ":by_tag" : ":by_end_user",
	         p->group == (tags ? PARAMS_GROUP_TAG : PARAMS_GROUP_END_USER));
	if (tags)
		plan_int(b, ":per_key", p->has_key_id || p->group == PARAMS_GROUP_KEY);
	plan_int(b, ":limit", by_day ? (out->day_to - out->day_from) / (PERIOD_DAY_MS / 1000)
	                             : p->limit);
}

void plan_summary(const struct params *p, int64_t now, struct plan_summary *out)
{
	struct plan_binds *b = &out->binds;

	out->query = plan_summary_query(p);
	plan_summary_days(p, out->query == CONN_SUMMARY_KEYS || out->query == CONN_SUMMARY_TEAMS,
	                  &out->day_from, &out->day_to);
	out->cache_to = plan_kept_to(out->day_from, out->day_to, now);
	b->n = 0;
	if (out->query == CONN_SUMMARY_END_USERS || out->query == CONN_SUMMARY_TAGS) {
		plan_ranked(p, out);
		return;
	}
	plan_int(b, ":from", p->from);
	plan_int(b, ":to", p->to);
	plan_int(b, ":day_from", out->day_from);
	plan_int(b, ":day_to", out->day_to);
	/* a key or model not given stays NULL (conn_stmt clears the bindings) */
	if (p->has_key_id)
		plan_int(b, ":key_id", p->key_id);
	if (p->model)
		plan_text(b, ":model", p->model);
	if (p->has_team_id)
		plan_int(b, ":team_id", p->team_id);
	if (out->query == CONN_SUMMARY_KEYS)
		plan_int(b, ":cache_to", out->cache_to);
}

void plan_filters(const struct params *p, struct plan_binds *b)
{
	int key = p->has_key_id && p->key_id, team = p->has_team_id && p->team_id;

	plan_int(b, ":from_ms", p->from * 1000);
	plan_add(b, (struct conn_bind){ .name = ":to_ms", .kind = CONN_BIND_INT,
	                                .i = p->to * 1000, .only_if_named = 1 });
	plan_add(b, (struct conn_bind){ .name = ":has_key", .kind = CONN_BIND_INT,
	                                .i = p->has_key_id, .only_if_named = 1 });
	/* key 0: rows without a key, the NULL key_id */
	plan_add(b, (struct conn_bind){ .name = ":key_id",
	                                .kind = key ? CONN_BIND_INT : CONN_BIND_NULL,
	                                .i = key ? p->key_id : 0, .only_if_named = 1 });
	plan_add(b, (struct conn_bind){ .name = ":has_team", .kind = CONN_BIND_INT,
	                                .i = p->has_team_id, .only_if_named = 1 });
	/* team 0: rows without a team, the NULL team_id */
	plan_add(b, (struct conn_bind){ .name = ":team_id",
	                                .kind = team ? CONN_BIND_INT : CONN_BIND_NULL,
	                                .i = team ? p->team_id : 0, .only_if_named = 1 });
	plan_add(b, (struct conn_bind){ .name = ":end_user", .kind = CONN_BIND_TEXT,
	                                .s = p->end_user, .only_if_named = 1 });
	plan_add(b, (struct conn_bind){ .name = ":tag", .kind = CONN_BIND_TEXT, .s = p->tag,
	                                .only_if_named = 1 });
	plan_text(b, ":model", p->model);
	plan_text(b, ":provider", p->provider);
	if (p->status_lo) {
		plan_int(b, ":status_lo", p->status_lo);
		plan_int(b, ":status_hi", p->status_hi);
	}
	plan_text(b, ":outcome", p->outcome);
	plan_int(b, ":errors_only", p->errors_only);
	if (p->stream >= 0)
		plan_int(b, ":stream", p->stream);
}

enum conn_query plan_export(const struct params *p)
{
	if (p->end_user)
		return CONN_EXPORT_END_USER;
	return p->tag ? CONN_EXPORT_TAG : CONN_EXPORT;
}

enum conn_query plan_requests_walk(const struct params *p)
{
	if (p->end_user)
		return CONN_REQUESTS_PAGE_END_USER;
	if (p->has_key_id)
		return p->key_id ? CONN_REQUESTS_PAGE_KEY : CONN_REQUESTS_PAGE_NOKEY;
	if (p->tag)
		return CONN_REQUESTS_PAGE_TAG;
	if (p->has_team_id && p->team_id)
		return CONN_REQUESTS_PAGE_TEAM;
	return p->model ? CONN_REQUESTS_PAGE_MODEL : CONN_REQUESTS_PAGE;
}

void plan_requests(const struct params *p, int64_t until_ms, struct plan_requests *out)
{
	int64_t before_ms = p->to * 1000, before_id = INT64_MIN;

	/* one upper bound for the index walk: the cursor, the range's end or until_ms; a
	 * row-value bound, the one SQLite walks the index from (another would be a filter) */
	if (p->has_before && p->before_ms < before_ms) {
		before_ms = p->before_ms;
		before_id = p->before_id;
	}
	if (until_ms < before_ms) {
		before_ms = until_ms;
		before_id = INT64_MIN;
	}
	out->query = plan_requests_walk(p);
	out->binds.n = 0;
	plan_filters(p, &out->binds);
	plan_int(&out->binds, ":before_ms", before_ms);
	plan_int(&out->binds, ":before_id", before_id);
	plan_int(&out->binds, ":limit", p->limit + 1);
}
