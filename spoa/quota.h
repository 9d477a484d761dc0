/* quota: per-key request and token rates, concurrency and spend budgets, enforced at
 * decision time with reservations and settled when the transaction's row is built.
 * Shared by the I/O threads (quota_admit) and the intake thread (quota_settle); the
 * main thread seeds spend at start (quota_set_spent). Thread-safe.
 *
 * Two modes. Local (one node, SQLite): the limits are counted here alone. Shared
 * (quota_share_enable; several nodes on PostgreSQL): a key admits against grants the
 * share thread (share.c) leases from the cluster's pools, through quota_share_*; while
 * the store is lost, each node counts locally its fallback share of every limit. */
#ifndef TALLY_QUOTA_H
#define TALLY_QUOTA_H

#include <stddef.h>
#include <stdint.h>

#include "enduser.h"
#include "lease.h"

struct tz;

/* Budget periods, calendar: a day starts at 00:00, a week on Monday, a month on its
 * 1st, in UTC or the limits' zone (quota_cfg.tz). The values are stored (limit_pool.budget_period): a new one goes last. */
enum quota_period { QUOTA_PERIOD_DAY, QUOTA_PERIOD_MONTH, QUOTA_PERIOD_TOTAL, QUOTA_PERIOD_WEEK };

/* A key's limits as configured (keys table); 0 in a field: no such limit. */
struct quota_cfg {
	int64_t rpm;                  /* requests per minute */
	int64_t tpm;                  /* tokens (prompt + completion) per minute */
	int64_t max_concurrent;       /* requests in flight */
	int64_t budget_micros;        /* spend per period, micro-dollars */
	enum quota_period period;
	/* The zone its periods begin in (tz.h; NULL: UTC), tz_get's: it outlives every
	 * snapshot and copy of the limits. */
	const struct tz *tz;
	/* Which snapshot the limits come from, numbered by load (keytable_load; 0: none):
	 * limits of an older one than a quota state has seen are an I/O thread yet to
	 * switch, and count in the period kind and zone the newer one set. */
	int64_t generation;
};

/* Which limit refused; QUOTA_OK admits. QUOTA_BUDGET_PENDING (shared mode): this node's
 * grant of a budget did not cover the request and no round brought more within the
 * wait, while the pool was not found dry: a refusal for now, not a spent budget. */
enum quota_verdict {
	QUOTA_OK, QUOTA_RPM, QUOTA_TPM, QUOTA_CONCURRENCY, QUOTA_BUDGET, QUOTA_BUDGET_PENDING
};

/* What an admitted request holds until it is settled. Plain data: it travels inside the
 * pending row (by value) and is settled exactly once. */
struct quota_hold {
	int64_t key_id;               /* 0: nothing held (no key, or no limit) */
	int64_t tokens;               /* reserved from the token window */
	int64_t cost_micros;          /* reserved from the budget */
	int64_t period_start_ms;      /* the budget period the cost was reserved in */
	int concurrent;               /* 1: holds a concurrency slot */
	int shared;                   /* 1: admitted against grants (shared mode) */
	int request;                  /* 1: took a request from the rpm window */
};

/* Where the key stands after a decision, for the x-ratelimit-* headers and Retry-After.
 * A field is -1 when the key has no such limit. */
struct quota_status {
	int64_t limit_requests, remaining_requests, reset_requests_ms;
	int64_t limit_tokens, remaining_tokens, reset_tokens_ms;
	int64_t retry_after_s;        /* refused: seconds until the refusing limit can admit
	                               * this request (rounded up, >= 1); -1: never within the
	                               * period (a total budget) */
};

/* 1 if cfg has any limit: a key without one holds nothing and takes no lock. */
static inline int quota_limited(const struct quota_cfg *cfg)
{
	return cfg->rpm > 0 || cfg->tpm > 0 || cfg->max_concurrent > 0 || cfg->budget_micros > 0;
}

struct quota;

struct quota *quota_new(void);
void quota_free(struct quota *q);      /* after every other thread stopped */

/* Decides whether a request of key_id under cfg fits at now_ms (unix ms), estimating
 * est_tokens tokens and est_cost_micros of spend. If every limit has room, reserves one
 * request, the tokens, the cost and a concurrency slot, fills *hold and returns QUOTA_OK;
 * otherwise reserves nothing and returns the first limit that refused, in the order
 * concurrency, rpm, tpm, budget. *st is filled either way. */
enum quota_verdict quota_admit(struct quota *q, int64_t key_id, const struct quota_cfg *cfg,
                                 int64_t est_tokens, int64_t est_cost_micros, int64_t now_ms,
                                 struct quota_hold *hold, struct quota_status *st);

/* Teams' limits are counted as keys' are, under ids of their own: a team's is its
 * teams.id negated (keys' ids are positive). */
static inline int64_t quota_team_subject(int64_t team_id)
{
	return -team_id;
}

/* Tags' budgets likewise, below every team's: tag_budgets.id past QUOTA_TAG_SUBJECTS,
 * negated. Teams' ids stay under QUOTA_TAG_SUBJECTS (the keytable refuses others). */
#define QUOTA_TAG_SUBJECTS ((int64_t)1 << 48)
static inline int64_t quota_tag_subject(int64_t tag_budget_id)
{
	return -(QUOTA_TAG_SUBJECTS + tag_budget_id);
}

/* Budgets per model likewise, below every tag budget's: a key's model_budgets.id past
 * QUOTA_KEY_MODEL_SUBJECTS, a team's past QUOTA_TEAM_MODEL_SUBJECTS, negated. Tag
 * budgets' ids stay under QUOTA_KEY_MODEL_SUBJECTS - QUOTA_TAG_SUBJECTS, model budgets'
 * under QUOTA_MODEL_SUBJECT_IDS (the keytable refuses others). */
#define QUOTA_KEY_MODEL_SUBJECTS ((int64_t)1 << 61)
#define QUOTA_MODEL_SUBJECT_IDS ((int64_t)1 << 60)
#define QUOTA_TEAM_MODEL_SUBJECTS (QUOTA_KEY_MODEL_SUBJECTS + QUOTA_MODEL_SUBJECT_IDS)
static inline int64_t quota_key_model_subject(int64_t model_budget_id)
{
	return -(QUOTA_KEY_MODEL_SUBJECTS + model_budget_id);
}
static inline int64_t quota_team_model_subject(int64_t model_budget_id)
{
	return -(QUOTA_TEAM_MODEL_SUBJECTS + model_budget_id);
}

/* End users' limits likewise, below every model budget's: one subject per key and end
 * user, from h, a keyed hash of the pair (keytable_end_user_subject) that nobody
 * without the installation's secret can aim at another pair's. */
#define QUOTA_END_USER_SUBJECTS ((int64_t)1 << 62)
static inline int64_t quota_end_user_subject(uint64_t h)
{
	return -(QUOTA_END_USER_SUBJECTS + (int64_t)(h & (uint64_t)(QUOTA_END_USER_SUBJECTS - 1)));
}

/* What a subject id counts, and its own id (keys.id, teams.id, tag_budgets.id,
 * model_budgets.id; an end user's hash): the inverse of the quota_*_subject above. */
enum quota_level { QUOTA_LEVEL_KEY, QUOTA_LEVEL_TEAM, QUOTA_LEVEL_TAG, QUOTA_LEVEL_END_USER,
                   QUOTA_LEVEL_KEY_MODEL, QUOTA_LEVEL_TEAM_MODEL };
static inline enum quota_level quota_subject_level(int64_t subject, int64_t *id)
{
	if (subject <= -QUOTA_END_USER_SUBJECTS) {
		*id = -subject - QUOTA_END_USER_SUBJECTS;
		return QUOTA_LEVEL_END_USER;
	}
	if (subject <= -QUOTA_TEAM_MODEL_SUBJECTS) {
		*id = -subject - QUOTA_TEAM_MODEL_SUBJECTS;
		return QUOTA_LEVEL_TEAM_MODEL;
	}
	if (subject <= -QUOTA_KEY_MODEL_SUBJECTS) {
		*id = -subject - QUOTA_KEY_MODEL_SUBJECTS;
		return QUOTA_LEVEL_KEY_MODEL;
	}
	if (subject <= -QUOTA_TAG_SUBJECTS) {
		*id = -subject - QUOTA_TAG_SUBJECTS;
		return QUOTA_LEVEL_TAG;
	}
	*id = subject < 0 ? -subject : subject;
	return subject < 0 ? QUOTA_LEVEL_TEAM : QUOTA_LEVEL_KEY;
}

/* One level a request is admitted at: its key, its team, its end user, its key's or
 * team's budget for its model, one of its tags' budgets. */
struct quota_subject {
	int64_t id;                      /* a key's id, quota_team_subject, quota_tag_subject,
	                                  * quota_end_user_subject */
	const struct quota_cfg *cfg;
	struct quota_hold *hold;         /* filled when admitted at every level, else zeroed */
	/* An end user's: its key and its id (enduser.h, NUL-terminated); a model budget's:
	 * 0 and its model's name; kept with the subject so that the share thread reads what
	 * it spent; else 0 and NULL. */
	int64_t owner;
	const char *name;
};

/* A request admitted at every one of subjects[0..n) or at none: quota_admit on each in
 * order (key, team, end user, tags); one that refuses gives back the holds taken before it whole
 * (quota_cancel), so that a refused request holds nothing at any level. Returns
 * QUOTA_OK with *st the first subject's that has an rpm or tpm limit (the figures a
 * client is shown; else the first's), or the refusing verdict with *refused its index
 * and *st its status. */
enum quota_verdict quota_admit_all(struct quota *q, const struct quota_subject *subjects,
                                   size_t n, int64_t est_tokens, int64_t est_cost_micros,
                                   int64_t now_ms, struct quota_status *st, size_t *refused);

/* Undoes an admission that was never used: the request, its tokens, its cost and its
 * slot go back as if it had not been admitted (the rpm and tpm windows too, unlike a
 * settlement). A hold with key_id 0 is ignored. */
void quota_cancel(struct quota *q, const struct quota_hold *hold);

/* Replaces a hold by what the transaction used: tokens (prompt + completion) and cost
 * in micro-dollars, each -1 when unknown (an unknown token count keeps the reserved
 * tokens counted; an unknown cost counts as 0, as it does in the database's sums).
 * Releases the concurrency slot. A hold with key_id 0 is ignored. */
void quota_settle(struct quota *q, const struct quota_hold *hold, int64_t tokens,
                   int64_t cost_micros, int64_t now_ms);

/* Seeds key_id's spend in its period of kind period in zone tz starting at
 * period_start_ms, for limits of configuration generation gen, from the database: at
 * start, so that a restart keeps the budget spent, and when keys change, so that a new
 * budget, period kind or zone counts what was spent before. For the period already
 * being counted it only raises the spend (the database lags settled rows). A seed of
 * an older generation than the state has seen is ignored. */
void quota_set_spent(struct quota *q, int64_t key_id, enum quota_period period,
                     const struct tz *tz, int64_t gen, int64_t period_start_ms,
                     int64_t spent_micros);

/* The start of the period containing now_ms in zone tz (NULL: UTC; QUOTA_PERIOD_TOTAL:
 * 0), and its end (INT64_MAX for total). */
int64_t quota_period_start(enum quota_period p, const struct tz *tz, int64_t now_ms);
int64_t quota_period_end(enum quota_period p, const struct tz *tz, int64_t now_ms);

const char *quota_verdict_name(enum quota_verdict v);   /* "rpm", "tpm", ... */
const char *quota_period_name(enum quota_period p);  /* "day", "week", "month", "total" */
/* The period a key's or team's spend is reported in: its budget's, or without a budget
 * the calendar month. */
static inline enum quota_period quota_report_period(const struct quota_cfg *cfg)
{
	return cfg->budget_micros > 0 ? cfg->period : QUOTA_PERIOD_MONTH;
}

/* Where subject (a key's id, or quota_team_subject's) stands under cfg at now_ms, as
 * the x-ratelimit figures of its next admission would say, and its requests in flight
 * here. Takes nothing; a subject never admitted here has its windows full. In shared
 * mode only the limits are filled (remaining and reset -1): a node holds a lease of
 * each window, not what the cluster has left. */
void quota_peek(struct quota *q, int64_t subject, const struct quota_cfg *cfg, int64_t now_ms,
                struct quota_status *st, int64_t *in_flight);

/* ---- shared mode (share.c's thread; the main thread enables it before any admission) ---- */

/* From now on keys admit against grants; a request whose grants do not cover it asks
 * for an urgent round and waits up to wait_ms for it (never while its key is dry). */
void quota_share_enable(struct quota *q, int64_t wait_ms);

/* One key at a sync: its limits, what it held and did (lease.h), and what it gives
 * back and asks for. */
struct quota_share_key {
	int64_t key_id;
	int64_t owner;                   /* an end user's subject: its key and its id, a */
	char name[ENDUSER_ID_MAX];       /* model budget's: 0 and its model (quota_subject's);
	                                  * else 0 and "" */
	struct quota_cfg cfg;
	struct lease_held held;
	struct lease_ask ask;
};

/* Waits up to ms for an urgent request (or quota_share_wake), then starts a round:
 * returns 1 if a request asked for it. */
int quota_share_sleep(struct quota *q, int64_t ms);
void quota_share_wake(struct quota *q);

/* The keys that hold grants or were used since the last sync, in key order, with
 * lease_plan's ask; their returns leave the node's grants at once, and their activity
 * counts start again. *out (capacity *cap) grows as needed. Returns the number, or
 * -1 out of memory (nothing taken). */
long quota_share_collect(struct quota *q, int64_t interval_ms, struct quota_share_key **out,
                         size_t *cap);
/* Adds a round's grant to key_id's (a budget of another period replaces the held one)
 * and sets its dry marks from now_ms (this node's clock). */
void quota_share_apply(struct quota *q, int64_t key_id, const struct lease_grant *g,
                       int64_t now_ms);
/* The round failed: k's returns, and what it reported of its admissions alone, come
 * back to it. */
void quota_share_restore(struct quota *q, const struct quota_share_key *k);
/* The round ended: requests waiting for it decide again. */
void quota_share_done(struct quota *q);
/* nodes > 0: the store is lost, count locally ceil(limit / nodes) of rpm and tpm, and
 * of slots and budget what the key held plus its share of what its last round left
 * in the pool (lease_fallback_allow); what is admitted alone is reported at the next
 * committed round (lease_held's local_*). 0: back to the grants. */
void quota_share_fallback(struct quota *q, int64_t nodes);
int64_t quota_share_fallback_nodes(struct quota *q);
/* Requests that waited for a round, and those whose wait ended without it. */
void quota_share_waits(struct quota *q, uint64_t *waits, uint64_t *timeouts);

#endif
