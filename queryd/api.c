/* api: endpoint handlers (see api.h). Runs on the MHD thread of the request, with that
 * thread's connection. Every statement is released (reset) before returning, so no
 * read transaction outlives a request. */
#include "api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daycache.h"
#include "db.h"
#include "hash.h"
#include "json.h"
#include "latency.h"
#include "live.h"
#include "log.h"
#include "period.h"
#include "tz.h"
#include "plan.h"
#include "pricecard.h"
#include "rollup.h"
#include "row.h"
#include "satadd.h"
#include "sumrow.h"

int api_error(struct api_reply *r, unsigned status, const char *msg, const char *param)
{
	cJSON_Delete(r->body);   /* a reply half built when the error came */
	r->status = status;
	r->body = cJSON_CreateObject();
	if (r->body && (json_add_str(r->body, "error", msg) < 0 ||
	                (param && json_add_str(r->body, "param", param) < 0))) {
		cJSON_Delete(r->body);
		r->body = NULL;
	}
	return -1;
}

/* A database failure: logged with the store's words, answered 503. */
static int api_db_error(struct conn *c, struct db_stmt *st, struct api_reply *r)
{
	log_warn("database read failed: %s", db_errmsg(c->db));
	if (st)
		conn_release(st);
	return api_error(r, 503, "the database cannot be read", NULL);
}

static int api_nomem(struct db_stmt *st, struct api_reply *r)
{
	if (st)
		conn_release(st);
	return api_error(r, 500, "out of memory", NULL);
}

/* Starts a success reply with a fresh object. */
static int api_ok(struct api_reply *r)
{
	r->status = 200;
	r->body = cJSON_CreateObject();
	return r->body ? 0 : -1;
}

int api_health(struct conn *c, int serves_data, struct api_reply *r)
{
	int v = db_schema_version(c->db);

	if (v < 0)
		return api_db_error(c, NULL, r);
	if (api_ok(r) < 0 || json_add(r->body, "ok", cJSON_CreateTrue()) < 0 ||
	    json_add(r->body, "data", cJSON_CreateBool(serves_data)) < 0 ||
	    json_add_int(r->body, "schema_version", v) < 0)
		return api_nomem(NULL, r);
	return 0;
}

/* The id of name by query q (key_id or team_id) into *id, *has set; an unknown name is
 * a 400 naming param. */
static int api_resolve(struct conn *c, enum conn_query q, const char *name, const char *param,
                       int64_t *id, int *has, struct api_reply *r)
{
	struct db_stmt *st;
	char msg[32];
	int step;

	if (!name)
		return 0;
	st = conn_stmt(c, q);
	if (!st || conn_bind_text(st, ":name", name) < 0)
		return api_db_error(c, st, r);
	step = db_step(st);
	if (step == DB_ROW) {
		*id = db_col_int(st, 0);
		*has = 1;
	}
	conn_release(st);
	if (step == DB_DONE) {
		snprintf(msg, sizeof(msg), "no %s has this name", param);
		return api_error(r, 400, msg, param);
	}
	return step == DB_ROW ? 0 : api_db_error(c, NULL, r);
}

int api_resolve_names(struct conn *c, struct params *p, struct api_reply *r)
{
	if (api_resolve(c, CONN_KEY_ID, p->key, "key", &p->key_id, &p->has_key_id, r) < 0)
		return -1;
	return api_resolve(c, CONN_TEAM_ID, p->team, "team", &p->team_id, &p->has_team_id, r);
}

/* ---- summary ---- */

static int api_add_percentile(cJSON *o, const char *name, const uint64_t *lat, double q)
{
	double v = latency_percentile(lat, q);

	return v < 0 ? json_add_null(o, name) : json_add_int(o, name, (int64_t)floor(v + 0.5));
}

/* The latency bucket holding the q-quantile as [over, at most] in ms, at most null past
 * the last bound: what the buckets can say of it, where the estimate interpolates. */
static int api_add_quantile_bucket(cJSON *o, const char *name, const uint64_t *lat, double q)
{
	int b = latency_quantile_bucket(lat, q);
	cJSON *pair;

	if (b < 0)
		return json_add_null(o, name);
	pair = cJSON_CreateArray();
	if (!pair || json_add(o, name, pair) < 0)
		return -1;
	if (!cJSON_AddItemToArray(pair, json_int(b ? latency_bounds[b - 1] : 0)) ||
	    !cJSON_AddItemToArray(pair, b < LATENCY_BUCKETS - 1
	                                ? json_int(latency_bounds[b])
	                                : cJSON_CreateNull()))
		return -1;
	return 0;
}

/* The figures of one group (or the totals) into o. */
static int api_usage_json(cJSON *o, const struct sumrow_usage *u)
{
	cJSON *lat = cJSON_CreateObject();
	uint64_t timed = 0;
	int i, rc = 0;

	for (i = 0; i < LATENCY_BUCKETS; i++)
		timed += u->lat[i];
	for (i = 0; i < ROLLUP_NAMED; i++)
		if (i != ROLLUP_DURATION)   /* shown as latency_ms.avg */
			rc |= json_add_int(o, rollup_names[i], u->sum[i]);
	rc |= u->sum[ROLLUP_REQUESTS]
	      ? json_add_double(o, "error_rate",
	                        (double)u->sum[ROLLUP_ERRORS] / (double)u->sum[ROLLUP_REQUESTS])
	      : json_add_null(o, "error_rate");
	rc |= json_add_int(o, "total_tokens", u->sum[ROLLUP_PROMPT_TOKENS] + u->sum[ROLLUP_COMPLETION_TOKENS]);
	if (!lat || json_add(o, "latency_ms", lat) < 0)
		return -1;
	/* avg over the requests that have a duration (those in a bucket), to 0.1 ms */
	rc |= timed ? json_add_double(lat, "avg",
	                              floor((double)u->sum[ROLLUP_DURATION] * 10 / (double)timed + 0.5) / 10)
	            : json_add_null(lat, "avg");
	rc |= api_add_percentile(lat, "p50", u->lat, 0.50);
	rc |= api_add_percentile(lat, "p95", u->lat, 0.95);
	rc |= api_add_percentile(lat, "p99", u->lat, 0.99);
	rc |= api_add_quantile_bucket(lat, "p50_bucket", u->lat, 0.50);
	rc |= api_add_quantile_bucket(lat, "p95_bucket", u->lat, 0.95);
	rc |= api_add_quantile_bucket(lat, "p99_bucket", u->lat, 0.99);
	return rc ? -1 : 0;
}

static const char *const api_group_names[] = {
	[PARAMS_GROUP_MODEL] = "model", [PARAMS_GROUP_KEY] = "key",
	[PARAMS_GROUP_PROVIDER] = "provider", [PARAMS_GROUP_HOUR] = "hour",
	[PARAMS_GROUP_DAY] = "day", [PARAMS_GROUP_TEAM] = "team",
	[PARAMS_GROUP_END_USER] = "end_user", [PARAMS_GROUP_TAG] = "tag",
};

/* One group of a summary: a key or team id or period start (id), or a model, provider
 * or tag name (name, owned), or an end user (name) of a key (id). */
struct api_group {
	int64_t id;
	char *name;
	struct sumrow_usage u;
};

/* The groups of one summary, found through an open-addressing hash of their keys: a
 * range's rollup rows are many (a week by hour, ~80k) but their groups few. */
struct api_groups {
	struct api_group *v;
	size_t n, cap;
	uint32_t *slot;   /* index + 1 into v; 0: empty */
	size_t nslots;    /* a power of two, more than twice n */
};

static uint64_t api_hash(int64_t id, const char *name)
{
	uint64_t h = hash_fnv1a64(HASH_FNV64_BASIS, &id, sizeof(id));

	if (name)
		h = hash_fnv1a64(h, name, strlen(name));
	h ^= h >> 31;
	return h * 0x9e3779b97f4a7c15ull;
}

static int api_group_is(const struct api_group *g, int64_t id, const char *name)
{
	return g->id == id && (name ? g->name && strcmp(g->name, name) == 0 : !g->name);
}

static void api_groups_free(struct api_groups *gs)
{
	size_t i;

	for (i = 0; i < gs->n; i++)
		free(gs->v[i].name);
	free(gs->v);
	free(gs->slot);
}

/* Drops the groups without requests: every rollup row counts at least one, so these
 * are a ragged end day's rows read whole and then subtracted hour by hour, all outside
 * the range. The slot table is stale after this (no lookups follow). */
static void api_groups_drop_empty(struct api_groups *gs)
{
	size_t i, n = 0;

	for (i = 0; i < gs->n; i++) {
		if (gs->v[i].u.sum[ROLLUP_REQUESTS] == 0)
			free(gs->v[i].name);
		else
			gs->v[n++] = gs->v[i];
	}
	gs->n = n;
}

/* Places v[i] in the slot table. */
static void api_groups_index(struct api_groups *gs, size_t i)
{
	size_t at = api_hash(gs->v[i].id, gs->v[i].name) & (gs->nslots - 1);

	while (gs->slot[at])
		at = (at + 1) & (gs->nslots - 1);
	gs->slot[at] = (uint32_t)(i + 1);
}

/* The group (id, name), added empty if new. NULL when out of memory. */
static struct api_group *api_groups_get(struct api_groups *gs, int64_t id, const char *name)
{
	size_t at, i;

	if (gs->nslots) {
		for (at = api_hash(id, name) & (gs->nslots - 1); gs->slot[at];
		     at = (at + 1) & (gs->nslots - 1))
			if (api_group_is(&gs->v[gs->slot[at] - 1], id, name))
				return &gs->v[gs->slot[at] - 1];
	}
	if (gs->n == gs->cap) {
		size_t cap = gs->cap ? gs->cap * 2 : 64;
		struct api_group *v = cap < UINT32_MAX ? realloc(gs->v, cap * sizeof(*v)) : NULL;

		if (!v)
			return NULL;
		gs->v = v;
		gs->cap = cap;
	}
	if (2 * (gs->n + 1) > gs->nslots) {
		size_t nslots = gs->nslots ? gs->nslots * 2 : 128;
		uint32_t *slot = calloc(nslots, sizeof(*slot));

		if (!slot)
			return NULL;
		free(gs->slot);
		gs->slot = slot;
		gs->nslots = nslots;
		for (i = 0; i < gs->n; i++)
			api_groups_index(gs, i);
	}
	gs->v[gs->n] = (struct api_group){ .id = id };
	if (name && !(gs->v[gs->n].name = strdup(name)))
		return NULL;
	api_groups_index(gs, gs->n);
	return &gs->v[gs->n++];
}

/* The group for grp of a rollup row of period t (a day or hour), key or team key_id
 * and model, provider or end user name (NULL: none). NULL when out of memory. */
static struct api_group *api_groups_of(struct api_groups *gs, enum params_group grp,
                                       int64_t t, int64_t key_id, const char *name)
{
	int64_t id = 0;

	switch (grp) {
	case PARAMS_GROUP_KEY:
	case PARAMS_GROUP_TEAM:
		id = key_id;
		name = NULL;
		break;
	case PARAMS_GROUP_HOUR:
		id = t;
		name = NULL;
		break;
	case PARAMS_GROUP_DAY:
		id = period_start_ms(PERIOD_DAY, t * 1000) / 1000;
		name = NULL;
		break;
	case PARAMS_GROUP_END_USER:
	case PARAMS_GROUP_TAG:
	case PARAMS_GROUP_MODEL:
	case PARAMS_GROUP_PROVIDER:
		id = grp == PARAMS_GROUP_END_USER ? key_id : 0;
		if (!name)
			name = "";
		break;
	}
	return api_groups_get(gs, id, name);
}

/* Adds u, the sums of a rollup row, to its group (api_groups_of). 0, or -1 (out of
 * memory). */
static int api_groups_add(struct api_groups *gs, enum params_group grp, int64_t t,
                          int64_t key_id, const char *name, const struct sumrow_usage *u)
{
	struct api_group *g = api_groups_of(gs, grp, t, key_id, name);

	if (!g)
		return -1;
	sumrow_add(&g->u, u);
	return 0;
}

/* Adds the rollup row under st to its group. 0, or -1 (out of memory). */
static int api_groups_add_row(struct api_groups *gs, struct db_stmt *st,
                              enum params_group grp)
{
	struct sumrow_usage u;
	const char *name = NULL;

	if (grp == PARAMS_GROUP_MODEL || grp == PARAMS_GROUP_END_USER || grp == PARAMS_GROUP_TAG)
		name = db_col_text(st, SUMROW_COL_MODEL);
	else if (grp == PARAMS_GROUP_PROVIDER)
		name = db_col_text(st, SUMROW_COL_PROVIDER);
	sumrow_read(st, &u);
	return api_groups_add(gs, grp, db_col_int(st, SUMROW_COL_T),
	                      db_col_int(st, SUMROW_COL_KEY), name, &u);
}

/* Time groups by time; the others by cost, then requests, descending, then by name
 * and key (an end user's id under two keys is two groups). */
static int api_group_cmp_time(const void *pa, const void *pb)
{
	const struct api_group *a = pa, *b = pb;

	return (a->id > b->id) - (a->id < b->id);
}

static int api_group_cmp_cost(const void *pa, const void *pb)
{
	const struct api_group *a = pa, *b = pb;

	if (a->u.sum[ROLLUP_COST] != b->u.sum[ROLLUP_COST])
		return a->u.sum[ROLLUP_COST] < b->u.sum[ROLLUP_COST] ? 1 : -1;
	if (a->u.sum[ROLLUP_REQUESTS] != b->u.sum[ROLLUP_REQUESTS])
		return a->u.sum[ROLLUP_REQUESTS] < b->u.sum[ROLLUP_REQUESTS] ? 1 : -1;
	if (a->name && b->name && strcmp(a->name, b->name) != 0)
		return strcmp(a->name, b->name);
	return api_group_cmp_time(pa, pb);
}
/* The kept days' groups packed as the rows of e. 0, or -1 out of memory. */
static int api_kept_rows(const struct api_groups *days, struct daycache_entry *e)
{
	struct daycache_row *rows = malloc(days->n ? days->n * sizeof(*rows) : 1);
	size_t i;
	int rc;

	if (!rows)
		return -1;
	for (i = 0; i < days->n; i++) {
		rows[i].id = days->v[i].id;
		memcpy(rows[i].sum, days->v[i].u.sum, sizeof(rows[i].sum));
		memcpy(rows[i].lat, days->v[i].u.lat, sizeof(rows[i].lat));
	}
	rc = daycache_pack(e, rows, days->n);
	free(rows);
	return rc;
}

/* A summary_keys answer into gs, with the sums of its days before today's kept
 * (daycache.h). The statement returns those days' rows (part "days") only when their
 * fingerprint in its snapshot differs from the kept one, and the fingerprint itself,
 * so that the kept sums and the rest of the answer are always of one snapshot.
 * Why the fingerprint is exact: nothing deletes or rewrites a rollup row in place
 * (tallyctl prune deletes raw rows only, a backup copies, a migration builds a rollup
 * once), and each writer upsert adds at least one request to a row, so any change to
 * the kept days' key_daily rows, a late row from a node's journal or spill included,
 * raises their sum of requests (the count, free in the same scan, is a second check).
 * Only a restore replaces the table's rows: an older copy refilled since to the kept
 * count and sum would pass them, so on PostgreSQL the fingerprint also holds the
 * table's file, new after pg_restore --clean; SQLite is restored with queryd stopped
 * (docs/operations.md). */
static int api_summary_keys(struct conn *c, const struct params *p,
                            const struct plan_summary *pl, struct api_groups *gs,
                            struct api_reply *r)
{
	int64_t day_from = pl->day_from;
	struct daycache_entry kept, got = { .fp_rows = -1, .fp_requests = -1, .fp_file = -1 };
	struct api_groups days = { 0 };
	struct db_stmt *st = NULL;
	struct sumrow_usage u;
	int have = 0, step, rc = -1;
	size_t i;

	got.key = (struct daycache_key){ day_from, pl->cache_to, p->has_key_id,
	                                 p->has_key_id ? p->key_id : 0 };
	memset(&kept, 0, sizeof(kept));
	if (got.key.day_to > day_from && (have = daycache_get(&got.key, &kept)) < 0) {
		api_nomem(NULL, r);
		goto out;
	}
	st = conn_stmt(c, CONN_SUMMARY_KEYS);
	if (!st || conn_bind_all(st, pl->binds.v, pl->binds.n) < 0 ||
	    conn_bind_int(st, ":fp_rows", have ? kept.fp_rows : -1) < 0 ||
	    conn_bind_int(st, ":fp_requests", have ? kept.fp_requests : -1) < 0 ||
	    conn_bind_int(st, ":fp_file", have ? kept.fp_file : -1) < 0) {
		api_db_error(c, st, r);
		goto out;
	}
	while ((step = db_step(st)) == DB_ROW) {
		const char *part = db_col_text(st, SUMROW_COL_PART);
		int64_t t = db_col_int(st, SUMROW_COL_T), key_id = db_col_int(st, SUMROW_COL_KEY);

		if (part && strcmp(part, "fingerprint") == 0) {
			got.fp_rows = t;
			got.fp_requests = key_id;
			got.fp_file = db_col_int(st, SUMROW_COL_SUMS + ROLLUP_REQUESTS);
			continue;
		}
		/* a kept day's group: its key, or with a key filter its day */
		sumrow_read(st, &u);
		if (api_groups_add(gs, p->group, t, key_id, NULL, &u) < 0 ||
		    (part && api_groups_add(&days, PARAMS_GROUP_KEY, 0, p->has_key_id ? t : key_id,
		                            NULL, &u) < 0)) {
			api_nomem(st, r);
			goto out;
		}
	}
	if (step != DB_DONE) {
		api_db_error(c, st, r);
		goto out;
	}
	conn_release(st);
	if (have && got.fp_rows == kept.fp_rows && got.fp_requests == kept.fp_requests &&
	    got.fp_file == kept.fp_file) {
		for (i = 0; i < kept.n; i++) {
			struct daycache_row k;

			daycache_row_at(&kept, i, &k);
			memcpy(u.sum, k.sum, sizeof(u.sum));
			memcpy(u.lat, k.lat, sizeof(u.lat));
			if (api_groups_add(gs, p->group, p->has_key_id ? k.id : 0,
			                   p->has_key_id ? p->key_id : k.id, NULL, &u) < 0) {
				api_nomem(NULL, r);
				goto out;
			}
		}
	} else if (got.key.day_to > day_from) {
		if (api_kept_rows(&days, &got) < 0) {
			api_nomem(NULL, r);
			goto out;
		}
		daycache_put(&got);
	}
	rc = 0;
out:
	daycache_entry_free(&kept);
	daycache_entry_free(&got);
	api_groups_free(&days);
	return rc;
}

/* A summary_teams row into gs: a team's to its group, and for group=team without a
 * team filter (none) out of group 0, which the rows of part 'total' fill with every
 * row's sums: what is left there is the rows without a team, which no team rollup
 * holds. 0, or -1 (out of memory). */
static int api_groups_add_team_row(struct api_groups *gs, struct db_stmt *st,
                                   enum params_group grp, int none_group)
{
	const char *part = db_col_text(st, SUMROW_COL_PART);
	int64_t t = db_col_int(st, SUMROW_COL_T), team = db_col_int(st, SUMROW_COL_KEY);
	struct api_group *none;
	struct sumrow_usage u;

	sumrow_read(st, &u);
	if (part)
		return api_groups_add(gs, grp, t, 0, NULL, &u);
	if (api_groups_add(gs, grp, t, team, NULL, &u) < 0)
		return -1;
	if (!none_group)
		return 0;
	if (!(none = api_groups_of(gs, grp, t, 0, NULL)))
		return -1;
	sumrow_sub(&none->u, &u);
	return 0;
}

/* A summary_end_users or summary_tags row: a group's into gs (the statement lists the
 * first limit groups, summed), the row of part 'total', every group's sums, into
 * *total. 0, or -1 (out of memory). */
static int api_groups_add_ranked_row(struct api_groups *gs, struct db_stmt *st,
                                     enum params_group grp, struct sumrow_usage *total)
{
	if (!db_col_text(st, SUMROW_COL_RANKED_PART))
		return api_groups_add_row(gs, st, grp);
	sumrow_read(st, total);
	return 0;
}

/* The rows of the range into gs; *total set when the statement sums the range itself
 * (summary_end_users, summary_tags: gs then holds only the first groups), else left
 * alone. */
static int api_summary_groups(struct conn *c, const struct params *p, int64_t now,
                              struct api_groups *gs, struct sumrow_usage *total,
                              int *has_total, struct api_reply *r)
{
	struct plan_summary pl;
	struct db_stmt *st;
	int step, rc;

	plan_summary(p, now, &pl);
	if (pl.query == CONN_SUMMARY_KEYS)
		return api_summary_keys(c, p, &pl, gs, r);
	st = conn_stmt(c, pl.query);
	if (!st || conn_bind_all(st, pl.binds.v, pl.binds.n) < 0)
		return api_db_error(c, st, r);
	*has_total = pl.query == CONN_SUMMARY_END_USERS || pl.query == CONN_SUMMARY_TAGS;
	while ((step = db_step(st)) == DB_ROW) {
		if (*has_total)
			rc = api_groups_add_ranked_row(gs, st, p->group, total);
		else if (pl.query == CONN_SUMMARY_TEAMS)
			rc = api_groups_add_team_row(gs, st, p->group,
			                             p->group == PARAMS_GROUP_TEAM && !p->has_team_id);
		else
			rc = api_groups_add_row(gs, st, p->group);
		if (rc < 0)
			return api_nomem(st, r);
	}
	if (step != DB_DONE)
		return api_db_error(c, st, r);
	conn_release(st);
	return 0;
}

/* The names of the keys or teams listed by a group=key, end_user or team summary,
 * sorted by id (NULL: no name, for key or team 0 or one since deleted). */
struct api_name {
	int64_t id;
	char *name;
};

static void api_names_free(struct api_name *v, size_t n)
{
	size_t i;

	for (i = 0; v && i < n; i++)
		free(v[i].name);
	free(v);
}

/* The (id, name) rows of st into *names (*got of them, room for *cap, grown as
 * needed), at most max. 0, -1 out of memory, -2 the database failed. */
static int api_names_step(struct db_stmt *st, size_t max, struct api_name **names,
                          size_t *got, size_t *cap)
{
	enum db_status step = DB_DONE;

	while (*got < max && (step = db_step(st)) == DB_ROW) {
		const char *name = db_col_text(st, 1);

		if (*got == *cap) {
			struct api_name *v = realloc(*names, 2 * *cap * sizeof(*v));

			if (!v)
				return -1;
			*names = v;
			*cap *= 2;
		}
		(*names)[*got] = (struct api_name){ .id = db_col_int(st, 0) };
		if (name && !((*names)[*got].name = json_utf8_dup(name, db_col_bytes(st, 1))))
			return -1;
		(*got)++;
	}
	return step == DB_ROW || step == DB_DONE ? 0 : -2;
}

/* The names of the keys of groups v[0..n) in *out (*nout of them, in id order), read
 * with one query: a query per key cost a round trip each on PostgreSQL (100 of them
 * for a default summary by key); for group=team, every team's (they are few). 0, -1
 * out of memory, -2 the database failed. */
static int api_names(struct conn *c, enum params_group grp, const struct api_group *v,
                     size_t n, struct api_name **out, size_t *nout)
{
	size_t cap = n * 21 + 3, len = 0, i, got = 0, room = n ? n : 1;
	struct api_name *names = calloc(room, sizeof(*names));
	char *ids = malloc(cap);   /* "[", n int64s and commas, "]" */
	struct db_stmt *st = NULL;
	int rc = -1;

	if (!names || !ids)
		goto out;
	if (grp == PARAMS_GROUP_TEAM) {
		st = conn_stmt(c, CONN_TEAM_NAMES);
		rc = st ? api_names_step(st, SIZE_MAX, &names, &got, &room) : -2;
		goto out;
	}
	ids[len++] = '[';
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(ids + len, cap - len, "%s%lld", i ? "," : "",
		                        (long long)v[i].id);
	memcpy(ids + len, "]", 2);
	st = conn_stmt(c, CONN_KEY_NAMES);
	if (!st || conn_bind_text(st, ":ids", ids) < 0) {
		rc = -2;
		goto out;
	}
	/* at most one row per id, and ids are n at most (end users of one key repeat it) */
	rc = api_names_step(st, n, &names, &got, &room);
out:
	conn_release(st);
	free(ids);
	if (rc < 0) {
		api_names_free(names, got);
		names = NULL;
		got = 0;
	}
	*out = names;
	*nout = got;
	return rc;
}

static int api_name_cmp(const void *pa, const void *pb)
{
	const struct api_name *a = pa, *b = pb;

	return (a->id > b->id) - (a->id < b->id);
}

/* Whether a summary's groups are named by the keys' or teams' names (api_names). */
static int api_group_named(enum params_group grp)
{
	return grp == PARAMS_GROUP_KEY || grp == PARAMS_GROUP_TEAM || grp == PARAMS_GROUP_END_USER;
}

/* One group as a row of the answer, added to rows; names: the listed keys' or teams'
 * names, for group=key, end_user or team. 0, or -1 out of memory. */
static int api_summary_row(const struct params *p, const struct api_group *g,
                           const struct api_name *names, size_t nnames, cJSON *rows)
{
	cJSON *row = cJSON_CreateObject();
	int rc;

	if (!row)
		return -1;
	rc = g->name ? json_add_str(row, "group", g->name) : json_add_int(row, "group", g->id);
	if (p->group == PARAMS_GROUP_END_USER)
		rc |= json_add_int(row, "key_id", g->id);
	if (api_group_named(p->group)) {
		struct api_name want = { .id = g->id }, *found;

		found = nnames ? bsearch(&want, names, nnames, sizeof(*names), api_name_cmp)
		               : NULL;
		rc |= json_add_str(row, p->group == PARAMS_GROUP_TEAM ? "team_name" : "key_name",
		                   found ? found->name : NULL);
	}
	rc |= api_usage_json(row, &g->u);
	if (rc || !cJSON_AddItemToArray(rows, row)) {
		cJSON_Delete(row);
		return -1;
	}
	return 0;
}

int api_summary(struct conn *c, const struct params *p, int64_t now, struct api_reply *r)
{
	struct sumrow_usage total = { { 0 }, { 0 } };
	struct api_groups gs = { 0 };
	int time = p->group == PARAMS_GROUP_HOUR || p->group == PARAMS_GROUP_DAY;
	struct api_name *names = NULL;
	cJSON *rows, *tot;
	size_t i, listed, nnames = 0;
	int rc = -1, err, has_total = 0;

	if (api_summary_groups(c, p, now, &gs, &total, &has_total, r) < 0)
		goto out;
	api_groups_drop_empty(&gs);
	if (gs.n)
		qsort(gs.v, gs.n, sizeof(*gs.v), time ? api_group_cmp_time : api_group_cmp_cost);
	if (api_ok(r) < 0 || json_add_int(r->body, "from", p->from) < 0 ||
	    json_add_int(r->body, "to", p->to) < 0 ||
	    json_add_str(r->body, "group", api_group_names[p->group]) < 0 ||
	    !(rows = cJSON_AddArrayToObject(r->body, "rows"))) {
		api_nomem(NULL, r);
		goto out;
	}
	/* every group counts in the totals; only the first limit are listed */
	listed = time || gs.n < (size_t)p->limit ? gs.n : (size_t)p->limit;
	err = api_group_named(p->group) ? api_names(c, p->group, gs.v, listed, &names, &nnames)
	                                : 0;
	if (err == -2) {
		api_db_error(c, NULL, r);
		goto out;
	}
	for (i = 0; i < gs.n; i++) {
		if (!has_total)
			sumrow_add(&total, &gs.v[i].u);
		if (err == 0 && i < listed)
			err = api_summary_row(p, &gs.v[i], names, nnames, rows);
	}
	if (err < 0) {
		api_nomem(NULL, r);
		goto out;
	}
	tot = cJSON_CreateObject();
	if (!tot || json_add(r->body, "totals", tot) < 0 || api_usage_json(tot, &total) < 0) {
		api_nomem(NULL, r);
		goto out;
	}
	rc = 0;
out:
	api_names_free(names, nnames);
	api_groups_free(&gs);
	return rc;
}

/* ---- request rows ---- */

/* Where a key's page filtered by p->tag starts (tag_until.sql) into *until_ms;
 * INT64_MAX for any other page. Only a key's: tag_total_daily counts the rows with a
 * key alone, so its last day bounds no page that may hold a row without one (rows
 * without a key, an end user's), and a tag's own page starts at the tag's newest row
 * by itself. 0, or -1 with r answered. */
static int api_tag_until(struct conn *c, const struct params *p, enum conn_query q,
                         int64_t *until_ms, struct api_reply *r)
{
	struct db_stmt *st;

	*until_ms = INT64_MAX;
	if (!p->tag || q != CONN_REQUESTS_PAGE_KEY)
		return 0;
	st = conn_stmt(c, CONN_TAG_UNTIL);
	if (!st || conn_bind_text(st, ":tag", p->tag) < 0 ||
	    conn_bind_int(st, ":from_ms", p->from * 1000) < 0 || db_step(st) != DB_ROW)
		return api_db_error(c, st, r);
	*until_ms = db_col_int(st, 0);
	conn_release(st);
	return 0;
}

int api_requests(struct conn *c, const struct params *p, struct api_reply *r)
{
	struct plan_requests pl;
	struct db_stmt *st;
	int64_t ms = 0, id = 0, until_ms;
	char cursor[PARAMS_CURSOR_MAX];
	cJSON *rows, *row;
	int step, n = 0;

	if (api_tag_until(c, p, plan_requests_walk(p), &until_ms, r) < 0)
		return -1;
	plan_requests(p, until_ms, &pl);
	st = conn_stmt(c, pl.query);
	if (!st || conn_bind_all(st, pl.binds.v, pl.binds.n) < 0)
		return api_db_error(c, st, r);
	if (api_ok(r) < 0 || !(rows = cJSON_AddArrayToObject(r->body, "requests")))
		return api_nomem(st, r);
	/* a row beyond the limit only says that there is a next page */
	while ((step = db_step(st)) == DB_ROW && n < p->limit) {
		row = row_json(st);
		if (!row || !cJSON_AddItemToArray(rows, row)) {
			cJSON_Delete(row);
			return api_nomem(st, r);
		}
		row_cursor(st, &ms, &id);
		n++;
	}
	if (step != DB_ROW && step != DB_DONE)
		return api_db_error(c, st, r);
	conn_release(st);
	if (step == DB_ROW) {
		params_cursor_format(cursor, sizeof(cursor), ms, id);
		if (json_add_str(r->body, "next", cursor) < 0)
			return api_nomem(NULL, r);
	} else if (json_add_null(r->body, "next") < 0) {
		return api_nomem(NULL, r);
	}
	return 0;
}

int api_request_one(struct conn *c, const char *request_id, struct api_reply *r)
{
	struct db_stmt *st = conn_stmt(c, CONN_REQUEST_ONE);
	int step;

	if (!st || conn_bind_text(st, ":request_id", request_id) < 0)
		return api_db_error(c, st, r);
	step = db_step(st);
	if (step == DB_DONE) {
		conn_release(st);
		return api_error(r, 404, "no request has this id", NULL);
	}
	if (step != DB_ROW)
		return api_db_error(c, st, r);
	if (api_ok(r) < 0 || json_add(r->body, "request", row_json(st)) < 0)
		return api_nomem(st, r);
	conn_release(st);
	return 0;
}

/* ---- keys and models ---- */

/* Binds :day_start, :week_start and :month_start, unix seconds of the current UTC
 * periods' starts (the agent's budget periods), where a budget's spend so far begins. */
static int api_bind_periods(struct db_stmt *st, int64_t now)
{
	return conn_bind_int(st, ":day_start", period_start_ms(PERIOD_DAY, now * 1000) / 1000) < 0 ||
	       conn_bind_int(st, ":week_start", period_start_ms(PERIOD_WEEK, now * 1000) / 1000) < 0 ||
	       conn_bind_int(st, ":month_start",
	                     period_start_ms(PERIOD_MONTH, now * 1000) / 1000) < 0 ? -1 : 0;
}

/* Columns of sql/queries/keys.sql. */
enum { K_ID, K_NAME, K_PREFIX, K_DEFAULT_MODEL, K_CREATED, K_REVOKED, K_TEAM_ID, K_TEAM_NAME,
       K_END_USERS, K_RPM, K_TPM, K_MAX_CONCURRENT, K_BUDGET, K_PERIOD, K_PERIOD_START,
       K_MODELS, K_COST, K_EST_COST, K_REQUESTS, K_TOKENS, K_TZ };

/* Columns of sql/queries/teams.sql: the team, then one model of its allow-list (NULL:
 * none). Limits and spend are in the keys' order (api_limits_spend). */
enum { T_ID, T_NAME, T_CREATED, T_RPM, T_TPM, T_MAX_CONCURRENT, T_BUDGET, T_PERIOD,
       T_PERIOD_START, T_COST, T_EST_COST, T_REQUESTS, T_TOKENS, T_KEYS, T_MEMBERS_SEE_USAGE,
       T_MODEL, T_TZ };

/* The "limits" and "spend" objects of a key or team into o, from the columns rpm, tpm,
 * max_concurrent, budget_micros, budget_period, period_start at lim, cost_micros,
 * estimated_cost_micros, requests, total_tokens at cost and budget_tz at tz (NULL:
 * UTC). 0, or -1 out of memory. */
static int api_limits_spend(cJSON *o, struct db_stmt *st, int lim, int cost, int tz)
{
	const char *zone = db_col_text(st, tz);
	cJSON *limits = cJSON_AddObjectToObject(o, "limits");
	cJSON *spend = cJSON_AddObjectToObject(o, "spend");
	int64_t charged = db_col_int(st, cost);
	int rc = 0;

	if (!limits || !spend)
		return -1;
	rc |= row_add_col_int(limits, "rpm", st, lim);
	rc |= row_add_col_int(limits, "tpm", st, lim + 1);
	rc |= row_add_col_int(limits, "max_concurrent", st, lim + 2);
	rc |= row_add_col_int(limits, "budget_micros", st, lim + 3);
	rc |= row_add_col_text(limits, "budget_period", st, lim + 4);
	rc |= json_add_str(limits, "time_zone", zone ? zone : "UTC");
	rc |= row_add_col_text(spend, "period", st, lim + 4);
	rc |= row_add_col_int(spend, "period_start", st, lim + 5);
	rc |= row_add_col_int(spend, "cost_micros", st, cost);
	rc |= row_add_col_int(spend, "estimated_cost_micros", st, cost + 1);
	/* what the budget is charged, as the agent counts it */
	charged = satadd(charged, db_col_int(st, cost + 1));
	rc |= json_add_int(spend, "charged_micros", charged);
	rc |= row_add_col_int(spend, "requests", st, cost + 2);
	rc |= row_add_col_int(spend, "total_tokens", st, cost + 3);
	return rc ? -1 : 0;
}

static cJSON *api_key_json(struct db_stmt *st)
{
	cJSON *o = cJSON_CreateObject();
	const char *models = db_col_text(st, K_MODELS);
	int rc = 0;

	if (!o)
		return NULL;
	rc |= row_add_col_int(o, "id", st, K_ID);
	rc |= row_add_col_text(o, "name", st, K_NAME);
	rc |= row_add_col_text(o, "prefix", st, K_PREFIX);
	rc |= row_add_col_text(o, "default_model", st, K_DEFAULT_MODEL);
	rc |= json_add(o, "models", cJSON_Parse(models ? models : "[]"));
	rc |= row_add_col_int(o, "created_at", st, K_CREATED);
	rc |= row_add_col_int(o, "revoked_at", st, K_REVOKED);
	rc |= row_add_col_int(o, "team_id", st, K_TEAM_ID);
	rc |= row_add_col_text(o, "team_name", st, K_TEAM_NAME);
	rc |= row_add_col_text(o, "end_users", st, K_END_USERS);
	if (rc || api_limits_spend(o, st, K_RPM, K_COST, K_TZ) < 0) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* The team of the current row, with an empty list of models. */
static cJSON *api_team_json(struct db_stmt *st)
{
	cJSON *o = cJSON_CreateObject();
	int rc = 0;

	if (!o)
		return NULL;
	rc |= row_add_col_int(o, "id", st, T_ID);
	rc |= row_add_col_text(o, "name", st, T_NAME);
	rc |= row_add_col_int(o, "created_at", st, T_CREATED);
	rc |= row_add_col_int(o, "keys", st, T_KEYS);
	rc |= row_add_col_bool(o, "members_see_usage", st, T_MEMBERS_SEE_USAGE);
	if (rc || !cJSON_AddArrayToObject(o, "models") ||
	    api_limits_spend(o, st, T_RPM, T_COST, T_TZ) < 0) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* Columns of sql/queries/models.sql: the model, then one of its cards (M_TIER NULL:
 * none), whose prices follow in pricecard_columns' order. */
enum { M_ID, M_NAME, M_PROVIDER, M_API, M_REQUESTS, M_TOKENS, M_COST, M_EST_COST, M_TIER,
       M_ABOVE, M_PRICES };

/* The model of the current row, with an empty list of cards. */
static cJSON *api_model_json(struct db_stmt *st, int64_t month)
{
	cJSON *o = cJSON_CreateObject(), *use;
	int rc = 0;

	if (!o)
		return NULL;
	rc |= row_add_col_int(o, "id", st, M_ID);
	rc |= row_add_col_text(o, "name", st, M_NAME);
	rc |= row_add_col_text(o, "provider", st, M_PROVIDER);
	rc |= row_add_col_text(o, "api", st, M_API);
	if (rc || !cJSON_AddArrayToObject(o, "prices") || !(use = cJSON_AddObjectToObject(o, "month"))) {
		cJSON_Delete(o);
		return NULL;
	}
	rc |= json_add_int(use, "period_start", month);
	rc |= row_add_col_int(use, "requests", st, M_REQUESTS);
	rc |= row_add_col_int(use, "total_tokens", st, M_TOKENS);
	rc |= row_add_col_int(use, "cost_micros", st, M_COST);
	rc |= row_add_col_int(use, "estimated_cost_micros", st, M_EST_COST);
	if (rc) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* The card of the current row, added to cards. 0, or -1 out of memory. */
static int api_card_add(struct db_stmt *st, cJSON *cards)
{
	cJSON *o = cJSON_CreateObject();
	size_t i;
	int rc = 0;

	if (!o)
		return -1;
	rc |= row_add_col_text(o, "tier", st, M_TIER);
	rc |= row_add_col_int(o, "above_tokens", st, M_ABOVE);
	for (i = 0; i < PRICE_CLASSES; i++)
		rc |= row_add_col_int(o, pricecard_columns[i], st, M_PRICES + (int)i);
	if (rc || !cJSON_AddItemToArray(cards, o)) {
		cJSON_Delete(o);
		return -1;
	}
	return 0;
}

/* Lists every row of a configuration query under name, one object each. */
static int api_list(struct conn *c, struct db_stmt *st, const char *name,
                    cJSON *(*item)(struct db_stmt *st), struct api_reply *r)
{
	cJSON *arr, *o;
	int step;

	if (api_ok(r) < 0 || !(arr = cJSON_AddArrayToObject(r->body, name)))
		return api_nomem(st, r);
	while ((step = db_step(st)) == DB_ROW) {
		o = item(st);
		if (!o || !cJSON_AddItemToArray(arr, o)) {
			cJSON_Delete(o);
			return api_nomem(st, r);
		}
	}
	if (step != DB_DONE)
		return api_db_error(c, st, r);
	conn_release(st);
	return 0;
}

/* o's "spend" made again from q (key_spend or team_spend, o's id) where o's budget
 * period begins at a zone's midnight: the list query counted UTC days. A zone this
 * machine's tzdata lacks leaves the period and spend null (logged). 0, or -1 with the
 * error reply made. */
static int api_zoned_spend(struct conn *c, cJSON *o, enum conn_query q, int64_t now,
                           struct api_reply *r)
{
	static const char *const sums[] = { "cost_micros", "estimated_cost_micros", "requests",
	                                    "total_tokens" };
	cJSON *limits = cJSON_GetObjectItemCaseSensitive(o, "limits");
	cJSON *spend = cJSON_GetObjectItemCaseSensitive(o, "spend");
	const char *zone = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(limits, "time_zone"));
	const char *period = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(limits,
	                                                                           "budget_period"));
	const cJSON *idj = cJSON_GetObjectItemCaseSensitive(o, "id");   /* json_int's raw */
	enum period_kind kind;
	const struct tz *z;
	struct db_stmt *st;
	char err[256];
	int64_t id, start, v[4];
	size_t i;
	int rc = 0;

	if (!zone || strcmp(zone, "UTC") == 0 || period_kind_parse(period, &kind) < 0 ||
	    kind == PERIOD_TOTAL || !cJSON_IsRaw(idj))
		return 0;
	id = strtoll(idj->valuestring, NULL, 10);
	for (i = 0; i < sizeof(sums) / sizeof(sums[0]); i++)
		cJSON_DeleteItemFromObjectCaseSensitive(spend, sums[i]);
	cJSON_DeleteItemFromObjectCaseSensitive(spend, "charged_micros");
	cJSON_DeleteItemFromObjectCaseSensitive(spend, "period_start");
	if (!(z = tz_get(zone, err, sizeof(err)))) {
		log_warn("%s: the spend of %s %lld is not shown", err,
		         q == CONN_KEY_SPEND ? "key" : "team", (long long)id);
		rc |= json_add_null(spend, "period_start") | json_add_null(spend, "charged_micros");
		for (i = 0; i < sizeof(sums) / sizeof(sums[0]); i++)
			rc |= json_add_null(spend, sums[i]);
		return rc ? api_nomem(NULL, r) : 0;
	}
	start = tz_period_start_ms(z, kind, now * 1000) / 1000;
	st = conn_stmt(c, q);
	if (!st || conn_bind_int(st, ":id", id) < 0 ||
	    conn_bind_int(st, ":start", start) < 0 || db_step(st) != DB_ROW)
		return api_db_error(c, st, r);
	rc |= json_add_int(spend, "period_start", start);
	for (i = 0; i < sizeof(sums) / sizeof(sums[0]); i++) {
		v[i] = db_col_int(st, (int)i);
		rc |= json_add_int(spend, sums[i], v[i]);
	}
	/* what the budget is charged, as the agent counts it */
	rc |= json_add_int(spend, "charged_micros", satadd(v[0], v[1]));
	conn_release(st);
	return rc ? api_nomem(NULL, r) : 0;
}

/* api_zoned_spend for every key or team of the reply's list name. */
static int api_zoned_spends(struct conn *c, const char *name, enum conn_query q, int64_t now,
                            struct api_reply *r)
{
	cJSON *o;

	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r->body, name))
		if (api_zoned_spend(c, o, q, now, r) != 0)
			return -1;
	return 0;
}

int api_keys(struct conn *c, int64_t now, struct api_reply *r)
{
	struct db_stmt *st = conn_stmt(c, CONN_KEYS);

	if (!st || api_bind_periods(st, now) < 0)
		return api_db_error(c, st, r);
	if (api_list(c, st, "keys", api_key_json, r) != 0)
		return -1;
	return api_zoned_spends(c, "keys", CONN_KEY_SPEND, now, r);
}

int api_teams(struct conn *c, int64_t now, struct api_reply *r)
{
	struct db_stmt *st = conn_stmt(c, CONN_TEAMS);
	cJSON *arr, *team = NULL, *model;
	int64_t id = 0;
	int step;

	if (!st || api_bind_periods(st, now) < 0)
		return api_db_error(c, st, r);
	if (api_ok(r) < 0 || !(arr = cJSON_AddArrayToObject(r->body, "teams")))
		return api_nomem(st, r);
	/* a team's models are on consecutive rows */
	while ((step = db_step(st)) == DB_ROW) {
		if (!team || db_col_int(st, T_ID) != id) {
			id = db_col_int(st, T_ID);
			team = api_team_json(st);
			if (!team || !cJSON_AddItemToArray(arr, team)) {
				cJSON_Delete(team);
				return api_nomem(st, r);
			}
		}
		if (db_col_type(st, T_MODEL) == DB_NULL)
			continue;
		model = json_string(db_col_text(st, T_MODEL), db_col_bytes(st, T_MODEL));
		if (!model || !cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(team, "models"),
		                                    model)) {
			cJSON_Delete(model);
			return api_nomem(st, r);
		}
	}
	if (step != DB_DONE)
		return api_db_error(c, st, r);
	conn_release(st);
	return api_zoned_spends(c, "teams", CONN_TEAM_SPEND, now, r);
}

int api_models(struct conn *c, int64_t now, struct api_reply *r)
{
	struct db_stmt *st = conn_stmt(c, CONN_MODELS);
	cJSON *arr, *model = NULL;
	int64_t month = period_start_ms(PERIOD_MONTH, now * 1000) / 1000, id = 0;
	int step;

	if (!st || conn_bind_int(st, ":month_start", month) < 0)
		return api_db_error(c, st, r);
	if (api_ok(r) < 0 || !(arr = cJSON_AddArrayToObject(r->body, "models")))
		return api_nomem(st, r);
	/* a model's cards are on consecutive rows */
	while ((step = db_step(st)) == DB_ROW) {
		if (!model || db_col_int(st, M_ID) != id) {
			id = db_col_int(st, M_ID);
			model = api_model_json(st, month);
			if (!model || !cJSON_AddItemToArray(arr, model)) {
				cJSON_Delete(model);
				return api_nomem(st, r);
			}
		}
		if (db_col_type(st, M_TIER) != DB_NULL &&
		    api_card_add(st, cJSON_GetObjectItemCaseSensitive(model, "prices")) < 0)
			return api_nomem(st, r);
	}
	if (step != DB_DONE)
		return api_db_error(c, st, r);
	conn_release(st);
	return 0;
}

/* ---- live ---- */

/* The accounting row, or NULL (logged) when it cannot be read. */
static cJSON *api_stored(struct conn *c)
{
	static const char *const names[] = { "received", "written", "dropped", "duplicates",
	                                     "timed_out", "unpriced", "updated_at",
	                                     "unauthenticated", "pending_overflow" };
	struct db_stmt *st = conn_stmt(c, CONN_ACCOUNTING);
	cJSON *o = NULL;
	size_t i;
	int rc = 0;

	if (!st || db_step(st) != DB_ROW) {
		log_warn("cannot read the accounting row: %s", db_errmsg(c->db));
		goto out;
	}
	o = cJSON_CreateObject();
	for (i = 0; o && i < sizeof(names) / sizeof(names[0]); i++)
		rc |= row_add_col_int(o, names[i], st, (int)i);
	if (rc) {
		cJSON_Delete(o);
		o = NULL;
	}
out:
	conn_release(st);
	return o;
}

int api_live(struct conn *c, const char *control_path, struct api_reply *r)
{
	char err[256] = "no agent control socket given (--control): a PostgreSQL store has "
	                "no agent of its own";
	cJSON *live = control_path ? live_status(control_path, LIVE_TIMEOUT_MS, err, sizeof(err))
	                           : NULL, *item;

	if (api_ok(r) < 0) {
		cJSON_Delete(live);
		return api_nomem(NULL, r);
	}
	if (!live) {
		cJSON *stored = api_stored(c);

		if (json_add_str(r->body, "agent", "down") < 0 || json_add_str(r->body, "error", err) < 0 ||
		    json_add(r->body, "stored", stored ? stored : cJSON_CreateNull()) < 0)
			return api_nomem(NULL, r);
		return 0;
	}
	/* "agent" first, then the agent's own fields as it sent them */
	if (json_add_str(r->body, "agent", "up") < 0) {
		cJSON_Delete(live);
		return api_nomem(NULL, r);
	}
	while ((item = live->child)) {
		cJSON_DetachItemViaPointer(live, item);
		if (!cJSON_AddItemToObject(r->body, item->string, item)) {
			cJSON_Delete(item);
			cJSON_Delete(live);
			return api_nomem(NULL, r);
		}
	}
	cJSON_Delete(live);
	return 0;
}
