/* quota: per-key rate, concurrency and budget state (see quota.h). I/O threads
 * call quota_admit, the intake thread quota_settle, the main thread quota_set_spent
 * at start; quota_new/quota_free belong to the main thread.
 *
 * Design. A key's state lives in one of 64 shards chosen by a hash of its id, each a
 * chained hash table under its own mutex, so admit and settle take one lock that other
 * keys rarely share. States exist only for subjects (keys, teams, tags' budgets, end
 * users) admitted under some limit or seeded with spend, and are never freed while the
 * agent runs: memory grows with the end users seen under a limit (docs/limits.md,
 * "End users' limits"), the others are configured rows. An all-zero
 * cfg takes no lock and holds nothing. If a state cannot be allocated the request is
 * admitted without a hold: a full heap must not turn into refused traffic.
 *
 * Windows. rpm and tpm are token buckets of capacity = limit that refill limit per
 * 60000 ms, kept in integers (whole units plus a remainder in 1/60000 units) so there
 * is no float drift and no overflow up to limits of 1e15. A bucket starts full. Bound:
 * over any T ms a bucket admits at most limit + ceil(limit * T / 60000) units, i.e. at
 * most 2 x limit in any 60 s window (a full bucket spent at once, then its refill) and
 * limit per minute on long-run average. For tpm the bound is on reservations, plus the
 * excess of one oversized request (below); a request that used more than it reserved
 * drives the bucket into debt at settlement (down to -1e15), and the debt is paid back
 * by refusing later requests until the bucket refills.
 * A request needs room for max(est, 1) tokens, so a zero estimate cannot slip through
 * an exhausted window; a request larger than the whole tpm limit is admitted only when
 * the bucket is full (entirely unused), since it could never pass otherwise.
 *
 * Limits arrive with every call: a changed limit keeps what was used (room moves by the
 * change, so a raised limit gives its extra room at once and a lowered one may leave
 * debt) and refills at the new rate; a limit switched off and on again restarts full.
 * Negative limits count as none, larger than 1e15 as 1e15; estimates and actual usage
 * are clamped to [0, 1e15]. In-flight requests are counted for every held key (so a
 * concurrency limit set live sees the true count); tokens and cost are reserved only
 * while tpm, respectively the budget, is set, which bounds the reserved sums by the
 * limits. A budget needs room for max(est_cost, 1) micro-dollars: an exhausted budget
 * refuses even requests of unknown cost. Spend resets when now enters a later period
 * than the one counted; a hold from an earlier period releases its reservation without
 * charging the new one. A changed period kind only resets once its start is later than
 * the counted one (the main thread may reseed with quota_set_spent).
 *
 * Shared mode (quota_share_enable, several nodes on PostgreSQL). A key admits against
 * its grants (struct quota_grant) under the same shard lock: one unit, its tokens, its
 * cost, a slot while in flight; it settles into them as above (a grant may go into
 * debt). What the grants miss is recorded for the share thread, which collects it with
 * the returns (quota_share_collect), asks the pools and hands the grants back
 * (quota_share_apply). A request the grants do not cover waits once, up to wait_ms,
 * for a round that started after it asked, unless its key is dry. While the store is
 * lost (quota_share_fallback) the local buckets count rpm and tpm at their share, and
 * slots and budget at what the key held plus its share of what its last round left in
 * the pool; what is admitted so is reported at the next round (local_*), which charges
 * the pools with it. The policy and the bound: lease.c and docs/limits.md. */
#include "quota.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lease.h"
#include "period.h"
#include "tz.h"

#define QUOTA_SHARDS        64
#define QUOTA_SLOTS_INIT    8
#define QUOTA_SPENT_MAX     1000000000000000000LL       /* 1e18: spent saturates here */

/* Shared mode: what this node holds of a key's pools and did since the last sync
 * (lease.h's lease_held), and until when the pools are dry. */
struct quota_grant {
	int64_t req, tok, slots, budget;
	int64_t budget_start_ms;      /* the period (store's clock) budget belongs to */
	int64_t peak, admitted, spent, want_req, want_slots, need_tok, need_budget;
	int64_t dry_req_until, dry_tok_until;   /* this node's unix ms */
	int dry_slots, dry_budget;    /* until the next round */
	int64_t local_req, local_tok, local_spent;   /* admitted alone, not yet reported */
	/* What the requests waiting for a round now lack, kept until they decide again: a
	 * round between their grant and their wake-up must not give it back. */
	int64_t wait_req, wait_slots, wait_tok, wait_budget;
	int64_t fb_used;              /* budget spent alone since the store was lost */
	int64_t free_slots, pool_budget;   /* what the pool had left at the last round */
	int synced;                   /* a round has granted this key */
};

/* A key's allowances while the store is lost (lease_fallback_allow). */
struct quota_fallback {
	int64_t slots;
	int64_t budget;               /* -1: counted on the node's own spend (never synced) */
};

struct quota_key {
	struct quota_key *next;
	int64_t key_id;
	int64_t owner;                /* an end user's or a model budget's (quota_subject) */
	char *name;                   /* owned; NULL for every other subject */
	struct lease_bucket req, tok; /* local mode and fallback */
	struct quota_grant g;         /* shared mode */
	struct quota_cfg cfg;         /* the limits of its last shared admission, of the
	                               * newest snapshot seen (quota_keep_cfg) */
	int shared;                   /* admitted in shared mode: the share thread syncs it */
	int64_t in_flight;
	enum quota_period period;     /* the kind of period spent is counted in */
	const struct tz *tz;          /* and its zone (the newest tz_get entry of its name) */
	int64_t generation;           /* of the newest limits or seed that set them */
	int64_t period_start_ms;      /* the budget period spent belongs to */
	int64_t spent;                /* settled cost in that period */
	int64_t reserved;             /* cost held by admitted, unsettled requests */
};

/* Cache-line aligned so that threads locking neighbouring shards do not share a line. */
struct quota_shard {
	alignas(64) pthread_mutex_t lock;
	struct quota_key **slots;     /* chains, nslots a power of two */
	size_t nslots, count;
};

struct quota {
	struct quota_shard shards[QUOTA_SHARDS];
	int shared;                   /* set before any admission, then read only */
	int64_t wait_ms;
	_Atomic int64_t fallback_nodes;          /* > 0: the store is lost */
	_Atomic uint64_t waits, wait_timeouts;
	pthread_mutex_t sync_lock;    /* the rounds: guards what follows */
	pthread_cond_t wake;          /* the share thread's */
	pthread_cond_t done;          /* the waiting I/O threads' */
	uint64_t started, finished;   /* rounds */
	int urgent, woken;
};

/* Limits, estimates and usage: negative counts as 0 (for a limit: none), absurd values
 * are capped so that every sum stays in range. */
static int64_t quota_clamp_amount(int64_t v)
{
	return lease_clamp(v);
}

static int64_t quota_clamp_spent(int64_t v)
{
	return v < 0 ? 0 : v > QUOTA_SPENT_MAX ? QUOTA_SPENT_MAX : v;
}

static int64_t quota_max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static int64_t quota_min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static uint64_t quota_hash_key(int64_t key_id)
{
	uint64_t h = (uint64_t)key_id;

	/* splitmix64 finaliser: sequential ids spread over shards and slots. */
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
	h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
	return h ^ (h >> 31);
}

static struct quota_shard *quota_shard_of(struct quota *q, uint64_t h)
{
	return &q->shards[h % QUOTA_SHARDS];
}

static size_t quota_slot_of(const struct quota_shard *s, uint64_t h)
{
	return (size_t)(h / QUOTA_SHARDS) & (s->nslots - 1);
}

static void quota_sync_destroy(struct quota *q)
{
	pthread_cond_destroy(&q->wake);
	pthread_cond_destroy(&q->done);
	pthread_mutex_destroy(&q->sync_lock);
}

struct quota *quota_new(void)
{
	struct quota *q = aligned_alloc(alignof(struct quota), sizeof(struct quota));
	int i;

	pthread_condattr_t ca;

	if (!q)
		return NULL;
	memset(q, 0, sizeof(*q));
	pthread_mutex_init(&q->sync_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->wake, &ca);
	pthread_cond_init(&q->done, &ca);
	pthread_condattr_destroy(&ca);
	for (i = 0; i < QUOTA_SHARDS; i++) {
		if (pthread_mutex_init(&q->shards[i].lock, NULL) != 0)
			goto fail;
		q->shards[i].slots = calloc(QUOTA_SLOTS_INIT, sizeof(*q->shards[i].slots));
		q->shards[i].nslots = QUOTA_SLOTS_INIT;
		if (!q->shards[i].slots) {
			pthread_mutex_destroy(&q->shards[i].lock);
			goto fail;
		}
	}
	return q;
fail:
	while (i-- > 0) {
		pthread_mutex_destroy(&q->shards[i].lock);
		free(q->shards[i].slots);
	}
	quota_sync_destroy(q);
	free(q);
	return NULL;
}

void quota_free(struct quota *q)
{
	struct quota_key *k, *next;
	size_t j;
	int i;

	if (!q)
		return;
	for (i = 0; i < QUOTA_SHARDS; i++) {
		for (j = 0; j < q->shards[i].nslots; j++) {
			for (k = q->shards[i].slots[j]; k; k = next) {
				next = k->next;
				free(k->name);
				free(k);
			}
		}
		free(q->shards[i].slots);
		pthread_mutex_destroy(&q->shards[i].lock);
	}
	quota_sync_destroy(q);
	free(q);
}

/* Doubles the chain array; on allocation failure the chains just grow longer. */
static void quota_shard_grow(struct quota_shard *s)
{
	size_t n = s->nslots * 2, j;
	struct quota_key **slots = calloc(n, sizeof(*slots)), *k, *next;

	if (!slots)
		return;
	for (j = 0; j < s->nslots; j++) {
		for (k = s->slots[j]; k; k = next) {
			uint64_t idx = (quota_hash_key(k->key_id) / QUOTA_SHARDS) & (n - 1);

			next = k->next;
			k->next = slots[idx];
			slots[idx] = k;
		}
	}
	free(s->slots);
	s->slots = slots;
	s->nslots = n;
}

/* Under s->lock: key_id's state, created if create is set; NULL if absent or out of
 * memory. */
static struct quota_key *quota_shard_find(struct quota_shard *s, uint64_t h, int64_t key_id,
                                          int create)
{
	struct quota_key *k;
	size_t idx = quota_slot_of(s, h);

	for (k = s->slots[idx]; k; k = k->next)
		if (k->key_id == key_id)
			return k;
	if (!create)
		return NULL;
	k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->key_id = key_id;
	k->period_start_ms = INT64_MIN;
	k->next = s->slots[idx];
	s->slots[idx] = k;
	if (++s->count > s->nslots)
		quota_shard_grow(s);
	return k;
}

/* The x-ratelimit figures of one bucket: limit, whole units left, ms until full. */
static void quota_bucket_status(const struct lease_bucket *b, int64_t *limit, int64_t *remaining,
                                int64_t *reset_ms)
{
	if (b->cap == 0) {
		*limit = *remaining = *reset_ms = -1;
		return;
	}
	*limit = b->cap;
	*remaining = quota_max64(b->room, 0);
	*reset_ms = lease_bucket_wait_ms(b, b->cap);
}

static void quota_status_none(struct quota_status *st)
{
	st->limit_requests = st->remaining_requests = st->reset_requests_ms = -1;
	st->limit_tokens = st->remaining_tokens = st->reset_tokens_ms = -1;
	st->retry_after_s = 0;
}

/* Retry-After of a refusal by v; req and tok: the buckets the request was judged on. */
static int64_t quota_retry_after(enum quota_verdict v, const struct quota_cfg *cfg,
                                 const struct lease_bucket *req, const struct lease_bucket *tok,
                                 int64_t tokens, int64_t now_ms)
{
	switch (v) {
	case QUOTA_OK:
		return 0;
	case QUOTA_CONCURRENCY:    /* slots free as requests end: nothing here can predict it */
	case QUOTA_BUDGET_PENDING: /* the next round, an interval away, asks the pool again */
		return 1;
	case QUOTA_RPM:
		return lease_retry_s(lease_bucket_wait_ms(req, lease_bucket_need(req, 1)));
	case QUOTA_TPM:
		return lease_retry_s(lease_bucket_wait_ms(tok, lease_bucket_need(tok, tokens)));
	case QUOTA_BUDGET:
		break;
	}
	return cfg->period == QUOTA_PERIOD_TOTAL ? -1 :
	       lease_retry_s(quota_period_end(cfg->period, cfg->tz, now_ms) - now_ms);
}

/* 1 if a and b are the same zone (NULL: UTC). By name: a tzdata upgrade gives the same
 * zone a new tz_get entry, and must not look like a change of zone. */
static int quota_same_zone(const struct tz *a, const struct tz *b)
{
	return a == b || (a && b && strcmp(tz_name(a), tz_name(b)) == 0);
}

/* Under the key's lock: a new period of the same kind and zone starts from nothing.
 * Limits of an older generation than the state's (an I/O thread yet to take the new
 * snapshot) count in the state's kind and zone. Newer limits naming another kind or
 * zone (their seed failed, or never ran) are taken as they are, keeping what was
 * spent: a changed kind or zone is normally reseeded by the main thread
 * (quota_set_spent) before the new limits reach any I/O thread. */
static void quota_roll_period(struct quota_key *k, const struct quota_cfg *cfg, int64_t now_ms)
{
	int64_t period_start;

	if (!cfg->budget_micros)
		return;
	if (cfg->generation >= k->generation) {
		k->generation = cfg->generation;
		if (cfg->period != k->period || !quota_same_zone(cfg->tz, k->tz)) {
			k->period = cfg->period;
			k->tz = cfg->tz;
			k->period_start_ms = quota_period_start(k->period, k->tz, now_ms);
			return;
		}
		k->tz = cfg->tz;
	}
	period_start = quota_period_start(k->period, k->tz, now_ms);
	if (period_start > k->period_start_ms) {
		k->spent = 0;
		k->period_start_ms = period_start;
	}
}

/* Under the key's lock, shared mode: keeps cfg as the limits the share thread asks the
 * pools for, unless an older snapshot's (with or without a budget) than those kept. */
static void quota_keep_cfg(struct quota_key *k, const struct quota_cfg *cfg)
{
	if (cfg->generation >= k->cfg.generation)
		k->cfg = *cfg;
}

/* What an admitted request holds: tokens and cost only while their limit is set. */
static void quota_hold_fill(struct quota_hold *hold, int64_t key_id, const struct quota_cfg *cfg,
                            int64_t tokens, int64_t cost, int64_t period_start_ms)
{
	hold->key_id = key_id;
	hold->tokens = cfg->tpm ? tokens : 0;
	hold->cost_micros = cfg->budget_micros ? cost : 0;
	hold->period_start_ms = period_start_ms;
	hold->concurrent = 1;
	hold->request = cfg->rpm ? 1 : 0;
}

/* One node's own count (local mode, or a fallback share with fb's allowances). Under
 * the key's lock. */
static enum quota_verdict quota_admit_local(struct quota_key *k, const struct quota_cfg *cfg,
                                            const struct quota_fallback *fb,
                                            int64_t tokens, int64_t cost, int64_t now_ms,
                                            struct quota_hold *hold, struct quota_status *st)
{
	enum quota_verdict v = QUOTA_OK;
	int64_t conc = fb ? fb->slots : cfg->max_concurrent;

	lease_bucket_sync(&k->req, cfg->rpm, now_ms);
	lease_bucket_sync(&k->tok, cfg->tpm, now_ms);
	quota_roll_period(k, cfg, now_ms);
	if (cfg->max_concurrent && k->in_flight >= conc)
		v = QUOTA_CONCURRENCY;
	else if (cfg->rpm && k->req.room < lease_bucket_need(&k->req, 1))
		v = QUOTA_RPM;
	else if (cfg->tpm && k->tok.room < lease_bucket_need(&k->tok, tokens))
		v = QUOTA_TPM;
	else if (cfg->budget_micros && fb && fb->budget >= 0 &&
	         k->g.fb_used + quota_max64(cost, 1) > fb->budget)
		v = QUOTA_BUDGET;
	else if (cfg->budget_micros && !(fb && fb->budget >= 0) &&
	         k->spent + k->reserved + quota_max64(cost, 1) > cfg->budget_micros)
		v = QUOTA_BUDGET;
	if (v == QUOTA_OK) {
		quota_hold_fill(hold, k->key_id, cfg, tokens, cost, k->period_start_ms);
		if (cfg->rpm)
			lease_bucket_take(&k->req, 1);
		if (cfg->tpm)
			lease_bucket_take(&k->tok, tokens);
		k->reserved += hold->cost_micros;
		k->in_flight++;
		if (fb) {
			/* Reported at the next committed round, which charges the pools. */
			k->g.local_req += cfg->rpm ? 1 : 0;
			k->g.local_tok += hold->tokens;
			k->g.local_spent += hold->cost_micros;
			k->g.fb_used += hold->cost_micros;
		}
	}
	quota_bucket_status(&k->req, &st->limit_requests, &st->remaining_requests,
	                    &st->reset_requests_ms);
	quota_bucket_status(&k->tok, &st->limit_tokens, &st->remaining_tokens, &st->reset_tokens_ms);
	st->retry_after_s = quota_retry_after(v, cfg, &k->req, &k->tok, tokens, now_ms);
	return v;
}

/* Under the key's lock: whether the grants cover the request; a refusal records what
 * was missing for the next round, and *can_wait says whether a round may still find
 * it (the key is not dry). */
static enum quota_verdict quota_check_grants(struct quota_key *k, const struct quota_cfg *cfg,
                                             int64_t tokens, int64_t cost, int64_t now_ms,
                                             int *can_wait)
{
	struct quota_grant *g = &k->g;
	/* the period quota_roll_period left the key in, whatever snapshot cfg is from */
	int64_t start = quota_period_start(k->period, k->tz, now_ms);

	*can_wait = 0;
	if (cfg->max_concurrent && k->in_flight >= g->slots) {
		g->want_slots++;
		*can_wait = !g->dry_slots;
		return QUOTA_CONCURRENCY;
	}
	if (cfg->rpm && g->req < 1) {
		g->want_req++;
		*can_wait = now_ms >= g->dry_req_until;
		return QUOTA_RPM;
	}
	if (cfg->tpm && g->tok < quota_max64(quota_min64(tokens, cfg->tpm), 1)) {
		g->need_tok = quota_max64(g->need_tok, quota_max64(tokens, 1));
		*can_wait = now_ms >= g->dry_tok_until;
		return QUOTA_TPM;
	}
	if (cfg->budget_micros && (g->budget_start_ms != start || g->budget < quota_max64(cost, 1))) {
		/* A pool found spent in an earlier period says nothing of this one's. */
		if (g->budget_start_ms != start)
			g->dry_budget = 0;
		g->need_budget = quota_max64(g->need_budget, quota_max64(cost, 1));
		*can_wait = !g->dry_budget;
		return QUOTA_BUDGET;
	}
	return QUOTA_OK;
}

/* The x-ratelimit figures of a grant: what this node holds, and how long it is dry. */
static void quota_grant_status(int64_t limit, int64_t held, int64_t dry_until, int64_t now_ms,
                               int64_t *lim, int64_t *remaining, int64_t *reset_ms)
{
	if (!limit) {
		*lim = *remaining = *reset_ms = -1;
		return;
	}
	*lim = limit;
	*remaining = quota_max64(held, 0);
	*reset_ms = quota_max64(dry_until - now_ms, 0);
}

/* at = CLOCK_MONOTONIC now + ms (the rounds' condition variables use that clock). */
static void quota_deadline(struct timespec *at, int64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, at);
	at->tv_sec += ms / 1000;
	at->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (at->tv_nsec >= 1000000000L) {
		at->tv_sec++;
		at->tv_nsec -= 1000000000L;
	}
}

/* Waits for a round that starts after now (quota_share_sleep), or wait_ms. */
static void quota_wait_round(struct quota *q)
{
	struct timespec at;
	uint64_t s0;
	int rc = 0, timed_out;

	quota_deadline(&at, q->wait_ms);
	pthread_mutex_lock(&q->sync_lock);
	s0 = q->started;
	q->urgent = 1;
	pthread_cond_signal(&q->wake);
	while (q->finished <= s0 && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&q->done, &q->sync_lock, &at);
	timed_out = q->finished <= s0;
	pthread_mutex_unlock(&q->sync_lock);
	atomic_fetch_add(&q->waits, 1);
	if (timed_out)
		atomic_fetch_add(&q->wait_timeouts, 1);
}

/* Under the key's lock: counts (d = 1) or uncounts (d = -1) a waiting request's need. */
static void quota_wait_mark(struct quota_grant *g, enum quota_verdict v, int64_t tokens,
                            int64_t cost, int64_t d)
{
	if (v == QUOTA_CONCURRENCY)
		g->wait_slots += d;
	else if (v == QUOTA_RPM)
		g->wait_req += d;
	else if (v == QUOTA_TPM)
		g->wait_tok += d * quota_max64(tokens, 1);
	else if (v == QUOTA_BUDGET)
		g->wait_budget += d * quota_max64(cost, 1);
}

/* Shared mode: admits against the grants, after at most one wait for a round. */
static enum quota_verdict quota_admit_shared(struct quota *q, struct quota_shard *s,
                                             struct quota_key *k, const struct quota_cfg *cfg,
                                             int64_t tokens, int64_t cost, int64_t now_ms,
                                             struct quota_hold *hold, struct quota_status *st)
{
	struct quota_grant *g = &k->g;
	enum quota_verdict v;
	int can_wait, waited = 0;

	k->shared = 1;
	quota_roll_period(k, cfg, now_ms);
	quota_keep_cfg(k, cfg);
	while ((v = quota_check_grants(k, cfg, tokens, cost, now_ms, &can_wait)) != QUOTA_OK &&
	       can_wait && !waited && q->wait_ms > 0) {
		/* Keys are never freed: k stays valid while the lock is away. */
		quota_wait_mark(g, v, tokens, cost, 1);
		pthread_mutex_unlock(&s->lock);
		quota_wait_round(q);
		pthread_mutex_lock(&s->lock);
		quota_wait_mark(g, v, tokens, cost, -1);
		waited = 1;
	}
	if (v == QUOTA_OK) {
		quota_hold_fill(hold, k->key_id, cfg, tokens, cost, g->budget_start_ms);
		hold->shared = 1;
		g->req -= cfg->rpm ? 1 : 0;
		g->tok -= hold->tokens;
		g->budget -= hold->cost_micros;
		g->spent += hold->cost_micros;
		g->admitted++;
		k->in_flight++;
		g->peak = quota_max64(g->peak, k->in_flight);
	}
	quota_grant_status(cfg->rpm, g->req, g->dry_req_until, now_ms, &st->limit_requests,
	                   &st->remaining_requests, &st->reset_requests_ms);
	quota_grant_status(cfg->tpm, g->tok, g->dry_tok_until, now_ms, &st->limit_tokens,
	                   &st->remaining_tokens, &st->reset_tokens_ms);
	if (v == QUOTA_BUDGET && !g->dry_budget)
		v = QUOTA_BUDGET_PENDING;
	/* A dry bucket's wait is the pool's, measured at the last round. */
	if (v == QUOTA_RPM || v == QUOTA_TPM) {
		int64_t until = v == QUOTA_RPM ? g->dry_req_until : g->dry_tok_until;

		st->retry_after_s = lease_retry_s(until - now_ms);
	} else {
		st->retry_after_s = quota_retry_after(v, cfg, NULL, NULL, tokens, now_ms);
	}
	return v;
}

/* Under the key's lock: its allowances while the store is lost, from its last round
 * (a key no round granted yet: its plain share of each limit, its own spend). */
static void quota_fallback_of(const struct quota_key *k, const struct quota_cfg *cfg,
                              int64_t nodes, struct quota_fallback *fb)
{
	const struct quota_grant *g = &k->g;

	if (!g->synced) {
		fb->slots = lease_fallback(cfg->max_concurrent, nodes);
		fb->budget = -1;
		return;
	}
	fb->slots = lease_fallback_allow(g->slots, g->free_slots, nodes);
	fb->budget = lease_fallback_allow(g->budget, g->pool_budget, nodes);
}

/* quota_admit of one subject, which keeps owner and name (quota_subject's) with its
 * state the first time it has them. */
static enum quota_verdict quota_admit_named(struct quota *q, int64_t key_id, int64_t owner,
                                            const char *name, const struct quota_cfg *cfg,
                                            int64_t est_tokens, int64_t est_cost_micros,
                                            int64_t now_ms, struct quota_hold *hold,
                                            struct quota_status *st)
{
	int64_t nodes = atomic_load(&q->fallback_nodes);
	int64_t tokens = quota_clamp_amount(est_tokens), cost = quota_clamp_amount(est_cost_micros);
	struct quota_cfg c;
	enum quota_verdict v;
	struct quota_key *k;
	struct quota_shard *s;
	uint64_t h;

	memset(hold, 0, sizeof(*hold));
	quota_status_none(st);
	if (key_id == 0 || !quota_limited(cfg))
		return QUOTA_OK;
	c = *cfg;
	c.rpm = quota_clamp_amount(c.rpm);
	c.tpm = quota_clamp_amount(c.tpm);
	c.max_concurrent = quota_clamp_amount(c.max_concurrent);
	c.budget_micros = quota_clamp_amount(c.budget_micros);
	h = quota_hash_key(key_id);
	s = quota_shard_of(q, h);
	pthread_mutex_lock(&s->lock);
	k = quota_shard_find(s, h, key_id, 1);
	if (k && name && !k->name) {
		k->owner = owner;
		k->name = strdup(name);
	}
	if (!k || (name && !k->name)) {
		pthread_mutex_unlock(&s->lock);
		return QUOTA_OK;
	}
	if (q->shared && nodes == 0) {
		v = quota_admit_shared(q, s, k, &c, tokens, cost, now_ms, hold, st);
	} else if (q->shared) {
		struct quota_fallback fb;

		quota_keep_cfg(k, &c);   /* a key first used alone is reported at the next round */
		k->shared = 1;
		quota_fallback_of(k, &c, nodes, &fb);
		c.rpm = lease_fallback(c.rpm, nodes);
		c.tpm = lease_fallback(c.tpm, nodes);
		c.budget_micros = lease_fallback(c.budget_micros, nodes);
		v = quota_admit_local(k, &c, &fb, tokens, cost, now_ms, hold, st);
	} else {
		v = quota_admit_local(k, &c, NULL, tokens, cost, now_ms, hold, st);
	}
	pthread_mutex_unlock(&s->lock);
	return v;
}

enum quota_verdict quota_admit(struct quota *q, int64_t key_id, const struct quota_cfg *cfg,
                                 int64_t est_tokens, int64_t est_cost_micros, int64_t now_ms,
                                 struct quota_hold *hold, struct quota_status *st)
{
	return quota_admit_named(q, key_id, 0, NULL, cfg, est_tokens, est_cost_micros, now_ms,
	                         hold, st);
}

/* A settled amount moved into a grant, which stays above the debt floor. */
static int64_t quota_grant_add(int64_t held, int64_t delta)
{
	held += delta;
	return held < -LEASE_AMOUNT_MAX ? -LEASE_AMOUNT_MAX : held > LEASE_AMOUNT_MAX ?
	       LEASE_AMOUNT_MAX : held;
}

/* Calls fn on key_id's state under its lock, if it exists. */
static void quota_with_key(struct quota *q, int64_t key_id,
                           void (*fn)(struct quota_key *k, const void *arg, int64_t now_ms),
                           const void *arg, int64_t now_ms)
{
	uint64_t h = quota_hash_key(key_id);
	struct quota_shard *s = quota_shard_of(q, h);
	struct quota_key *k;

	pthread_mutex_lock(&s->lock);
	if ((k = quota_shard_find(s, h, key_id, 0)))
		fn(k, arg, now_ms);
	pthread_mutex_unlock(&s->lock);
}

enum quota_verdict quota_admit_all(struct quota *q, const struct quota_subject *subjects,
                                   size_t n, int64_t est_tokens, int64_t est_cost_micros,
                                   int64_t now_ms, struct quota_status *st, size_t *refused)
{
	struct quota_status one;
	enum quota_verdict v;
	int rated = 0;
	size_t i, j;

	for (i = 0; i < n; i++)
		memset(subjects[i].hold, 0, sizeof(*subjects[i].hold));
	quota_status_none(st);
	for (i = 0; i < n; i++) {
		const struct quota_cfg *cfg = subjects[i].cfg;

		v = quota_admit_named(q, subjects[i].id, subjects[i].owner, subjects[i].name, cfg,
		                      est_tokens, est_cost_micros, now_ms, subjects[i].hold, &one);
		if (v != QUOTA_OK) {
			for (j = 0; j < i; j++) {
				quota_cancel(q, subjects[j].hold);
				memset(subjects[j].hold, 0, sizeof(*subjects[j].hold));
			}
			*st = one;
			*refused = i;
			return v;
		}
		if (i == 0 || (!rated && (cfg->rpm > 0 || cfg->tpm > 0)))
			*st = one;
		rated |= cfg->rpm > 0 || cfg->tpm > 0;
	}
	return QUOTA_OK;
}

/* Under k's lock: quota_cancel's undoing of an admission. */
static void quota_cancel_key(struct quota_key *k, const void *arg, int64_t now_ms)
{
	const struct quota_hold *hold = arg;

	(void)now_ms;
	if (hold->shared) {
		k->g.req = quota_grant_add(k->g.req, hold->request);
		k->g.tok = quota_grant_add(k->g.tok, hold->tokens);
		if (hold->period_start_ms == k->g.budget_start_ms)
			k->g.budget = quota_grant_add(k->g.budget, hold->cost_micros);
		k->g.spent -= hold->cost_micros;
		k->g.admitted -= k->g.admitted > 0;
	} else {
		lease_bucket_take(&k->req, -hold->request);
		lease_bucket_take(&k->tok, -hold->tokens);
		k->reserved = quota_max64(k->reserved - hold->cost_micros, 0);
		if (k->shared) {
			/* Admitted alone while the store was lost: not to be reported. */
			k->g.local_req -= hold->request;
			k->g.local_tok -= hold->tokens;
			k->g.local_spent -= hold->cost_micros;
			k->g.fb_used -= hold->cost_micros;
		}
	}
	if (hold->concurrent && k->in_flight > 0)
		k->in_flight--;
}

void quota_cancel(struct quota *q, const struct quota_hold *hold)
{
	if (hold->key_id)
		quota_with_key(q, hold->key_id, quota_cancel_key, hold, 0);
}

/* Shared mode, a request admitted while the store was lost: what it used beyond its
 * reservation (or less) is reported with the rest of what the node admitted alone. */
static void quota_settle_alone(struct quota_key *k, const struct quota_hold *hold,
                               int64_t tokens, int64_t cost_micros)
{
	int64_t d;

	if (k->cfg.tpm && tokens >= 0)
		k->g.local_tok = quota_grant_add(k->g.local_tok, quota_clamp_amount(tokens) - hold->tokens);
	if (k->cfg.budget_micros && cost_micros >= 0) {
		d = quota_clamp_amount(cost_micros) - hold->cost_micros;
		k->g.local_spent = quota_grant_add(k->g.local_spent, d);
		k->g.fb_used = quota_grant_add(k->g.fb_used, d);
	}
}

void quota_settle(struct quota *q, const struct quota_hold *hold, int64_t tokens,
                   int64_t cost_micros, int64_t now_ms)
{
	struct quota_key *k;
	struct quota_shard *s;
	uint64_t h;

	if (hold->key_id == 0)
		return;
	h = quota_hash_key(hold->key_id);
	s = quota_shard_of(q, h);
	pthread_mutex_lock(&s->lock);
	k = quota_shard_find(s, h, hold->key_id, 0);
	if (k && hold->shared) {
		/* The same settlement against the grants: debt is paid from later grants. */
		if (k->cfg.tpm && tokens >= 0)
			k->g.tok = quota_grant_add(k->g.tok, hold->tokens - quota_clamp_amount(tokens));
		if (k->cfg.budget_micros && hold->period_start_ms == k->g.budget_start_ms)
			k->g.budget = quota_grant_add(k->g.budget, hold->cost_micros -
			                                           quota_clamp_amount(cost_micros));
	} else if (k) {
		/* Only a bucket still in use is adjusted; an unknown count keeps the
		 * reservation. Debt is taken after the refill up to now, as it is spent now. */
		if (k->tok.cap && tokens >= 0) {
			lease_bucket_refill(&k->tok, now_ms);
			lease_bucket_take(&k->tok, quota_clamp_amount(tokens) - hold->tokens);
		}
		k->reserved = quota_max64(k->reserved - hold->cost_micros, 0);
		if (q->shared)
			quota_settle_alone(k, hold, tokens, cost_micros);
	}
	if (k) {
		/* A hold from an earlier period must not charge the current one; one admitted
		 * in a period that starts later than the counted one (a zone or kind changed
		 * while it was in flight, the new period reseeded from rows it has none of
		 * yet) was admitted inside it, and is charged. */
		if (hold->period_start_ms >= k->period_start_ms)
			k->spent = quota_clamp_spent(k->spent + quota_clamp_amount(cost_micros));
		if (hold->concurrent && k->in_flight > 0)
			k->in_flight--;
	}
	pthread_mutex_unlock(&s->lock);
}

void quota_set_spent(struct quota *q, int64_t key_id, enum quota_period period,
                     const struct tz *tz, int64_t gen, int64_t period_start_ms,
                     int64_t spent_micros)
{
	uint64_t h = quota_hash_key(key_id);
	struct quota_shard *s = quota_shard_of(q, h);
	struct quota_key *k;

	spent_micros = quota_clamp_spent(spent_micros);
	pthread_mutex_lock(&s->lock);
	k = quota_shard_find(s, h, key_id, 1);
	if (!k || gen < k->generation) {
		/* Out of memory: the key is counted from its next admission on. Older limits
		 * than some the state has seen: not what it counts by. */
	} else if (period == k->period && quota_same_zone(tz, k->tz)) {
		k->tz = tz;
		k->generation = gen;
		if (period_start_ms > k->period_start_ms) {
			k->period_start_ms = period_start_ms;
			k->spent = spent_micros;
		} else if (period_start_ms == k->period_start_ms && spent_micros > k->spent) {
			/* The database lags what was settled here (rows still queued): a seed
			 * never lowers the spend of the period being counted. An earlier start:
			 * the state rolled on since the seed was read. */
			k->spent = spent_micros;
		}
	} else {
		/* Another kind or zone: its period, the seed its spend; where that period
		 * starts where the counted one did, what was settled here and is not in the
		 * store yet stays counted. */
		if (period_start_ms == k->period_start_ms && k->spent > spent_micros)
			spent_micros = k->spent;
		k->period = period;
		k->tz = tz;
		k->generation = gen;
		k->period_start_ms = period_start_ms;
		k->spent = spent_micros;
	}
	pthread_mutex_unlock(&s->lock);
}

/* The calendar's kind of period for a budget's. */
static enum period_kind quota_period_kind(enum quota_period p)
{
	return p == QUOTA_PERIOD_DAY ? PERIOD_DAY : p == QUOTA_PERIOD_WEEK ? PERIOD_WEEK
	     : p == QUOTA_PERIOD_MONTH ? PERIOD_MONTH : PERIOD_TOTAL;
}

int64_t quota_period_start(enum quota_period p, const struct tz *tz, int64_t now_ms)
{
	return tz_period_start_ms(tz, quota_period_kind(p), now_ms);
}

int64_t quota_period_end(enum quota_period p, const struct tz *tz, int64_t now_ms)
{
	return tz_period_end_ms(tz, quota_period_kind(p), now_ms);
}

const char *quota_period_name(enum quota_period p)
{
	return p == QUOTA_PERIOD_DAY ? "day" : p == QUOTA_PERIOD_WEEK ? "week"
	     : p == QUOTA_PERIOD_TOTAL ? "total" : "month";
}

void quota_peek(struct quota *q, int64_t subject, const struct quota_cfg *cfg, int64_t now_ms,
                struct quota_status *st, int64_t *in_flight)
{
	uint64_t h = quota_hash_key(subject);
	struct quota_shard *s = quota_shard_of(q, h);
	struct lease_bucket req, tok;
	const struct quota_key *k;

	quota_status_none(st);
	*in_flight = 0;
	memset(&req, 0, sizeof(req));
	memset(&tok, 0, sizeof(tok));
	pthread_mutex_lock(&s->lock);
	if ((k = quota_shard_find(s, h, subject, 0))) {
		req = k->req;
		tok = k->tok;
		*in_flight = k->in_flight;
	}
	pthread_mutex_unlock(&s->lock);
	if (q->shared) {
		/* A node holds a lease of each window, not the window: what the cluster has
		 * left is nobody's to say here. */
		st->limit_requests = cfg->rpm > 0 ? quota_clamp_amount(cfg->rpm) : -1;
		st->limit_tokens = cfg->tpm > 0 ? quota_clamp_amount(cfg->tpm) : -1;
		return;
	}
	/* Copies: a look must not move the windows it reads. */
	lease_bucket_sync(&req, quota_clamp_amount(cfg->rpm), now_ms);
	lease_bucket_sync(&tok, quota_clamp_amount(cfg->tpm), now_ms);
	quota_bucket_status(&req, &st->limit_requests, &st->remaining_requests, &st->reset_requests_ms);
	quota_bucket_status(&tok, &st->limit_tokens, &st->remaining_tokens, &st->reset_tokens_ms);
}

const char *quota_verdict_name(enum quota_verdict v)
{
	switch (v) {
	case QUOTA_OK:          return "ok";
	case QUOTA_RPM:         return "rpm";
	case QUOTA_TPM:         return "tpm";
	case QUOTA_CONCURRENCY: return "concurrency";
	case QUOTA_BUDGET:      return "budget";
	case QUOTA_BUDGET_PENDING: return "budget_pending";
	}
	return "unknown";
}

/* ---- shared mode ---- */

void quota_share_enable(struct quota *q, int64_t wait_ms)
{
	q->shared = 1;
	q->wait_ms = wait_ms;
}

int quota_share_sleep(struct quota *q, int64_t ms)
{
	struct timespec at;
	int rc = 0, urgent;

	quota_deadline(&at, ms);
	pthread_mutex_lock(&q->sync_lock);
	while (!q->urgent && !q->woken && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&q->wake, &q->sync_lock, &at);
	urgent = q->urgent;
	q->urgent = q->woken = 0;
	q->started++;
	pthread_mutex_unlock(&q->sync_lock);
	return urgent;
}

void quota_share_wake(struct quota *q)
{
	pthread_mutex_lock(&q->sync_lock);
	q->woken = 1;
	pthread_cond_signal(&q->wake);
	pthread_mutex_unlock(&q->sync_lock);
}

void quota_share_done(struct quota *q)
{
	pthread_mutex_lock(&q->sync_lock);
	q->finished = q->started;
	pthread_cond_broadcast(&q->done);
	pthread_mutex_unlock(&q->sync_lock);
}

static int quota_share_key_cmp(const void *a, const void *b)
{
	int64_t x = ((const struct quota_share_key *)a)->key_id;
	int64_t y = ((const struct quota_share_key *)b)->key_id;

	return (x > y) - (x < y);
}

/* Under the key's lock: its lease_held, or 0 if it holds nothing and did nothing. */
static int quota_held_of(const struct quota_key *k, struct lease_held *h)
{
	const struct quota_grant *g = &k->g;

	*h = (struct lease_held){
		.req = g->req, .tok = g->tok, .slots = g->slots, .budget = g->budget,
		.in_flight = k->in_flight, .peak = g->peak, .admitted = g->admitted,
		.spent = g->spent, .want_req = quota_max64(g->want_req, g->wait_req),
		.want_slots = quota_max64(g->want_slots, g->wait_slots),
		.need_tok = quota_max64(g->need_tok, g->wait_tok),
		.need_budget = quota_max64(g->need_budget, g->wait_budget),
		.budget_start_ms = g->budget_start_ms,
		.local_req = g->local_req, .local_tok = g->local_tok, .local_spent = g->local_spent,
	};
	/* A dry mark is taken with the next round, which clears or renews it: an idle key
	 * must not keep refusing on an old round's word. */
	return k->shared && (g->req || g->tok || g->slots || g->budget || g->admitted ||
	                     h->want_req || h->want_slots || h->need_tok || h->need_budget ||
	                     g->local_req || g->local_tok || g->local_spent || g->dry_slots ||
	                     g->dry_budget);
}

long quota_share_collect(struct quota *q, int64_t interval_ms, struct quota_share_key **out,
                         size_t *cap)
{
	size_t n = 0, j;
	int i;

	for (i = 0; i < QUOTA_SHARDS; i++) {
		struct quota_shard *s = &q->shards[i];
		struct quota_key *k;

		pthread_mutex_lock(&s->lock);
		for (j = 0; j < s->nslots; j++) {
			for (k = s->slots[j]; k; k = k->next) {
				struct quota_share_key *e;
				struct lease_held held;
				struct lease_limits lim;

				if (!quota_held_of(k, &held))
					continue;
				if (n == *cap) {
					size_t c = *cap ? *cap * 2 : 64;
					struct quota_share_key *p = realloc(*out, c * sizeof(*p));

					if (!p) {
						pthread_mutex_unlock(&s->lock);
						goto fail;
					}
					*out = p;
					*cap = c;
				}
				e = &(*out)[n++];
				e->key_id = k->key_id;
				e->owner = k->owner;
				snprintf(e->name, sizeof(e->name), "%s", k->name ? k->name : "");
				e->cfg = k->cfg;
				e->held = held;
				lim = (struct lease_limits){ k->cfg.rpm, k->cfg.tpm, k->cfg.max_concurrent,
				                             k->cfg.budget_micros, (int)k->cfg.period, 0 };
				lease_plan(&held, &lim, interval_ms, &e->ask);
				/* Given back at once, so that nothing returned is spent meanwhile. */
				k->g.req -= e->ask.ret_req;
				k->g.tok -= e->ask.ret_tok;
				k->g.slots -= e->ask.ret_slots;
				k->g.budget -= e->ask.ret_budget;
				k->g.admitted = k->g.spent = k->g.want_req = k->g.want_slots = 0;
				k->g.need_tok = k->g.need_budget = 0;
				k->g.local_req = k->g.local_tok = k->g.local_spent = 0;
				k->g.peak = k->in_flight;
			}
		}
		pthread_mutex_unlock(&s->lock);
	}
	if (n > 1)   /* *out is NULL while no key was ever collected: qsort wants a pointer */
		qsort(*out, n, sizeof(**out), quota_share_key_cmp);
	return (long)n;
fail:
	/* Nothing may be lost: what the keys collected so far gave back comes back. */
	while (n-- > 0)
		quota_share_restore(q, &(*out)[n]);
	return -1;
}

static void quota_apply_grant(struct quota_key *k, const void *arg, int64_t now_ms)
{
	const struct lease_grant *gr = arg;
	struct quota_grant *g = &k->g;

	g->req += gr->req;
	g->tok = quota_grant_add(g->tok, gr->tok);
	g->slots += gr->slots;
	if (gr->budget_start_ms != g->budget_start_ms) {
		g->budget = gr->budget;
		g->budget_start_ms = gr->budget_start_ms;
	} else {
		g->budget = quota_grant_add(g->budget, gr->budget);
	}
	g->dry_req_until = gr->dry_req_ms ? now_ms + gr->dry_req_ms : 0;
	g->dry_tok_until = gr->dry_tok_ms ? now_ms + gr->dry_tok_ms : 0;
	g->dry_slots = gr->dry_slots;
	g->dry_budget = gr->dry_budget;
	g->free_slots = quota_max64(k->cfg.max_concurrent - gr->others_slots - gr->lease_slots, 0);
	g->pool_budget = gr->pool_budget;
	g->synced = 1;
}

void quota_share_apply(struct quota *q, int64_t key_id, const struct lease_grant *g,
                       int64_t now_ms)
{
	quota_with_key(q, key_id, quota_apply_grant, g, now_ms);
}

static void quota_restore_key(struct quota_key *k, const void *arg, int64_t now_ms)
{
	const struct quota_share_key *e = arg;
	const struct lease_ask *a = &e->ask;

	(void)now_ms;
	k->g.req += a->ret_req;
	k->g.tok = quota_grant_add(k->g.tok, a->ret_tok);
	k->g.slots += a->ret_slots;
	k->g.budget = quota_grant_add(k->g.budget, a->ret_budget);
	k->g.local_req += e->held.local_req;
	k->g.local_tok = quota_grant_add(k->g.local_tok, e->held.local_tok);
	k->g.local_spent = quota_grant_add(k->g.local_spent, e->held.local_spent);
}

void quota_share_restore(struct quota *q, const struct quota_share_key *k)
{
	quota_with_key(q, k->key_id, quota_restore_key, k, 0);
}

void quota_share_fallback(struct quota *q, int64_t nodes)
{
	struct quota_key *k;
	size_t j;
	int i;

	if (nodes == 0 || atomic_load(&q->fallback_nodes) != 0) {
		atomic_store(&q->fallback_nodes, nodes);
		return;
	}
	/* The slots and budget held stay counted (their streams still run, the pool
	 * counted them as granted); each outage's own spend starts from nothing. */
	for (i = 0; i < QUOTA_SHARDS; i++) {
		pthread_mutex_lock(&q->shards[i].lock);
		for (j = 0; j < q->shards[i].nslots; j++)
			for (k = q->shards[i].slots[j]; k; k = k->next)
				k->g.fb_used = 0;
		pthread_mutex_unlock(&q->shards[i].lock);
	}
	atomic_store(&q->fallback_nodes, nodes);
}

int64_t quota_share_fallback_nodes(struct quota *q)
{
	return atomic_load(&q->fallback_nodes);
}

void quota_share_waits(struct quota *q, uint64_t *waits, uint64_t *timeouts)
{
	*waits = atomic_load(&q->waits);
	*timeouts = atomic_load(&q->wait_timeouts);
}
