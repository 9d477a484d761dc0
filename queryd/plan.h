/* plan: which named query answers an API request and what it is bound to, from the
 * validated parameters (params.h): the smallest rollups a summary reads and the days it
 * reads from the daily ones, the index a page of request rows walks and its upper
 * bound, the filters the row queries share. Pure (no database, no HTTP): any thread
 * (queryd's request threads), unit-tested by tests/unit/test_plan.c. */
#ifndef QUERYD_PLAN_H
#define QUERYD_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "params.h"

#define PLAN_BINDS_MAX 18   /* a page of request rows makes 18 at most */

/* The bindings of one statement, in the order they are made. Text points into the
 * params planned from: it must outlive the statement's run. */
struct plan_binds {
	size_t n;
	struct conn_bind v[PLAN_BINDS_MAX];
};

/* A summary's query. Its days [day_from, day_to) come from the daily rollups, the
 * range's hours outside them from the hourly ones (day_from == day_to == p->to: no
 * days). For CONN_SUMMARY_KEYS, cache_to ends the days whose sums queryd keeps
 * (daycache.h); the statement's fingerprint bindings are the caller's.
 * CONN_SUMMARY_TEAMS answers group=team and a team filter (p->has_team_id);
 * CONN_SUMMARY_END_USERS group=end_user and an end_user filter, CONN_SUMMARY_TAGS
 * group=tag and a tag filter, over whole days (params.c widens them), summed per group
 * by the statement, which returns the first p->limit groups by cost and a row of the
 * totals. */
struct plan_summary {
	enum conn_query query;
	int64_t day_from, day_to;
	int64_t cache_to;
	struct plan_binds binds;
};

/* The summary of p (p->from and p->to hour-aligned) at now (unix seconds). */
void plan_summary(const struct params *p, int64_t now, struct plan_summary *out);

/* Adds to b the filters every row query shares (:from_ms, :model, ...; :to_ms,
 * :has_key, :key_id, :has_team, :team_id, :end_user and :tag only where the query names
 * them). */
void plan_filters(const struct params *p, struct plan_binds *b);

/* The export's query: an end user's walks that end user's index, else a tag's the tag's
 * (request_tags), any other the time's. */
enum conn_query plan_export(const struct params *p);

/* The index a page of p's rows walks: an end user's (its rows are a part of a key's, or
 * of a few keys': end users are named by the keys' holders, each within its key), the
 * key's (rows without a key are its NULL key_id), a tag's (request_tags: a tag is most
 * often the rarer of it and a team or model), a team's (the index holds no row without
 * a team: those walk the model's or the time's), the model's, or the time's. */
enum conn_query plan_requests_walk(const struct params *p);

/* A page of request rows: the index to walk (plan_requests_walk), the filters, then
 * the page's upper bound and its limit (one row more than p->limit, which says there is
 * a next page). */
struct plan_requests {
	enum conn_query query;
	struct plan_binds binds;
};

/* until_ms: no row the page could hold started at or after it (a tag's, tag_until.sql;
 * INT64_MAX: no such bound). The walk starts at the lowest of it, the cursor and the
 * range's end. */
void plan_requests(const struct params *p, int64_t until_ms, struct plan_requests *out);

#endif
