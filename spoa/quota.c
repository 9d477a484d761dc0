/* quota: per-key rate, concurrency and budget state (see quota.h). I/O threads
 * call quota_admit, the intake thread quota_settle, the main thread quota_set_spent
 * at start; quota_new/quota_free belong to the main thread.
 *
 * Design. A key's state lives in one of 64 shards chosen by a hash of its id, each a
 * chained hash table under its own mutex, so admit and settle take one lock that other
 * keys rarely share. States exist only for keys that were admitted under some limit or
 * seeded with spend, so memory is bounded by the number of limited keys. An all-zero
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
 * the counted one (the main thread may reseed with quota_set_spent). */
#include "quota.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"
#include "period.h"

#define QUOTA_SHARDS        64
#define QUOTA_SLOTS_INIT    8
#define QUOTA_SPENT_MAX     1000000000000000000LL       /* 1e18: spent saturates here */

struct quota_key {
	struct quota_key *next;
	int64_t key_id;
	struct lease_bucket req, tok;
	int64_t in_flight;
	enum quota_period period;     /* the kind of period spent is counted in */
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

struct quota *quota_new(void)
{
	struct quota *q = aligned_alloc(alignof(struct quota), sizeof(struct quota));
	int i;

	if (!q)
		return NULL;
	memset(q, 0, sizeof(*q));
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
				free(k);
			}
		}
		free(q->shards[i].slots);
		pthread_mutex_destroy(&q->shards[i].lock);
	}
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

enum quota_verdict quota_admit(struct quota *q, int64_t key_id, const struct quota_cfg *cfg,
                                 int64_t est_tokens, int64_t est_cost_micros, int64_t now_ms,
                                 struct quota_hold *hold, struct quota_status *st)
{
	int64_t rpm = quota_clamp_amount(cfg->rpm), tpm = quota_clamp_amount(cfg->tpm);
	int64_t conc = quota_clamp_amount(cfg->max_concurrent);
	int64_t budget = quota_clamp_amount(cfg->budget_micros);
	int64_t tokens = quota_clamp_amount(est_tokens), cost = quota_clamp_amount(est_cost_micros);
	int64_t period_start = quota_period_start(cfg->period, now_ms);
	enum quota_verdict v = QUOTA_OK;
	struct lease_bucket req, tok;
	struct quota_key *k;
	struct quota_shard *s;
	uint64_t h;

	memset(hold, 0, sizeof(*hold));
	quota_status_none(st);
	if (key_id == 0 || !quota_limited(cfg))
		return QUOTA_OK;
	h = quota_hash_key(key_id);
	s = quota_shard_of(q, h);
	pthread_mutex_lock(&s->lock);
	k = quota_shard_find(s, h, key_id, 1);
	if (!k) {
		pthread_mutex_unlock(&s->lock);
		return QUOTA_OK;
	}
	lease_bucket_sync(&k->req, rpm, now_ms);
	lease_bucket_sync(&k->tok, tpm, now_ms);
	/* A new period of the same kind starts from nothing; a changed kind was reseeded
	 * by the main thread before the new limits reached any I/O thread. */
	if (budget && (period_start > k->period_start_ms || cfg->period != k->period)) {
		if (cfg->period != k->period)
			k->period = cfg->period;
		else
			k->spent = 0;
		k->period_start_ms = period_start;
	}
	if (conc && k->in_flight >= conc)
		v = QUOTA_CONCURRENCY;
	else if (rpm && k->req.room < lease_bucket_need(&k->req, 1))
		v = QUOTA_RPM;
	else if (tpm && k->tok.room < lease_bucket_need(&k->tok, tokens))
		v = QUOTA_TPM;
	else if (budget && k->spent + k->reserved + quota_max64(cost, 1) > budget)
		v = QUOTA_BUDGET;
	if (v == QUOTA_OK) {
		hold->key_id = key_id;
		hold->tokens = tpm ? tokens : 0;
		hold->cost_micros = budget ? cost : 0;
		hold->period_start_ms = k->period_start_ms;
		hold->concurrent = 1;
		if (rpm)
			lease_bucket_take(&k->req, 1);
		if (tpm)
			lease_bucket_take(&k->tok, tokens);
		k->reserved += hold->cost_micros;
		k->in_flight++;
	}
	req = k->req;
	tok = k->tok;
	pthread_mutex_unlock(&s->lock);

	/* The figures come from the snapshot, outside the lock. */
	quota_bucket_status(&req, &st->limit_requests, &st->remaining_requests, &st->reset_requests_ms);
	quota_bucket_status(&tok, &st->limit_tokens, &st->remaining_tokens, &st->reset_tokens_ms);
	switch (v) {
	case QUOTA_OK:
		break;
	case QUOTA_CONCURRENCY:
		/* Slots free when other requests end, which nothing here can predict. */
		st->retry_after_s = 1;
		break;
	case QUOTA_RPM:
		st->retry_after_s = lease_retry_s(lease_bucket_wait_ms(&req, lease_bucket_need(&req, 1)));
		break;
	case QUOTA_TPM:
		st->retry_after_s = lease_retry_s(lease_bucket_wait_ms(&tok, lease_bucket_need(&tok, tokens)));
		break;
	case QUOTA_BUDGET:
		st->retry_after_s = cfg->period == QUOTA_PERIOD_TOTAL ? -1 :
		        lease_retry_s(quota_period_end(cfg->period, now_ms) - now_ms);
		break;
	}
	return v;
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
	if (k) {
		/* Only a bucket still in use is adjusted; an unknown count keeps the
		 * reservation. Debt is taken after the refill up to now, as it is spent now. */
		if (k->tok.cap && tokens >= 0) {
			lease_bucket_refill(&k->tok, now_ms);
			lease_bucket_take(&k->tok, quota_clamp_amount(tokens) - hold->tokens);
		}
		k->reserved = quota_max64(k->reserved - hold->cost_micros, 0);
		/* A hold from an earlier period must not charge the current one. */
		if (hold->period_start_ms == k->period_start_ms)
			k->spent = quota_clamp_spent(k->spent + quota_clamp_amount(cost_micros));
		if (hold->concurrent && k->in_flight > 0)
			k->in_flight--;
	}
	pthread_mutex_unlock(&s->lock);
}

void quota_set_spent(struct quota *q, int64_t key_id, enum quota_period period,
                     int64_t period_start_ms, int64_t spent_micros)
{
	uint64_t h = quota_hash_key(key_id);
	struct quota_shard *s = quota_shard_of(q, h);
	struct quota_key *k;

	spent_micros = quota_clamp_spent(spent_micros);
	pthread_mutex_lock(&s->lock);
	k = quota_shard_find(s, h, key_id, 1);
	if (!k) {
		/* Out of memory: the key is counted from its next admission on. */
	} else if (period != k->period || period_start_ms > k->period_start_ms) {
		k->period = period;
		k->period_start_ms = period_start_ms;
		k->spent = spent_micros;
	} else if (period_start_ms == k->period_start_ms && spent_micros > k->spent) {
		/* The database lags what was settled here (rows still queued): a seed never
		 * lowers the spend of the period being counted. */
		k->spent = spent_micros;
	}
	pthread_mutex_unlock(&s->lock);
}

/* The calendar's kind of period for a budget's. */
static enum period_kind quota_period_kind(enum quota_period p)
{
	return p == QUOTA_PERIOD_DAY ? PERIOD_DAY : p == QUOTA_PERIOD_MONTH ? PERIOD_MONTH
	                                                                 : PERIOD_TOTAL;
}

int64_t quota_period_start(enum quota_period p, int64_t now_ms)
{
	return period_start_ms(quota_period_kind(p), now_ms);
}

int64_t quota_period_end(enum quota_period p, int64_t now_ms)
{
	return period_end_ms(quota_period_kind(p), now_ms);
}

const char *quota_verdict_name(enum quota_verdict v)
{
	switch (v) {
	case QUOTA_OK:          return "ok";
	case QUOTA_RPM:         return "rpm";
	case QUOTA_TPM:         return "tpm";
	case QUOTA_CONCURRENCY: return "concurrency";
	case QUOTA_BUDGET:      return "budget";
	}
	return "unknown";
}
