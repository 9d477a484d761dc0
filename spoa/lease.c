/* lease: token buckets and the lease policy of shared limits (see lease.h). Pure: any
 * thread, no state of its own.
 *
 * Buckets are kept in integers, whole units plus a remainder in 1/LEASE_WINDOW_MS
 * units, so that there is no float drift and no overflow up to limits of 1e15. Over
 * any T ms a bucket grants at most cap + ceil(cap * T / 60000) units: 2 x cap in any
 * 60 s, cap per minute on long-run average. A pool in limit_pool is such a bucket on
 * the store's clock; a node's grants are units taken out of it, so the cluster admits
 * what the pool grants plus what nodes held when a span began (at most one lease each). */
#include "lease.h"

#define LEASE_WAIT_MAX_MS  (INT64_MAX / 4)
#define LEASE_BUDGET_SHARE 32          /* an active key holds >= 1/32 of its budget */

static int64_t lease_max(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static int64_t lease_min(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

int64_t lease_clamp(int64_t v)
{
	return v < 0 ? 0 : v > LEASE_AMOUNT_MAX ? LEASE_AMOUNT_MAX : v;
}

/* A full bucket holds no fraction: the refill stops at cap. */
static void lease_bucket_clamp(struct lease_bucket *b)
{
	if (b->room >= b->cap) {
		b->room = b->cap;
		b->frac = 0;
	}
}

void lease_bucket_refill(struct lease_bucket *b, int64_t now_ms)
{
	int64_t el = now_ms - b->at_ms, deficit = b->cap - b->room;

	/* A clock read earlier by another thread may arrive late: time never runs back. */
	if (el > 0) {
		b->at_ms = now_ms;
		if (deficit > 0 && el / LEASE_WINDOW_MS > deficit / b->cap) {
			b->room = b->cap;
		} else if (deficit > 0) {
			/* Whole minutes refill cap exactly; the rest splits cap into a whole part
			 * per ms and a remainder counted in 1/LEASE_WINDOW_MS units. */
			b->room += el / LEASE_WINDOW_MS * b->cap;
			el %= LEASE_WINDOW_MS;
			b->frac += el * (b->cap % LEASE_WINDOW_MS);
			b->room += el * (b->cap / LEASE_WINDOW_MS) + b->frac / LEASE_WINDOW_MS;
			b->frac %= LEASE_WINDOW_MS;
		}
	}
	lease_bucket_clamp(b);
}

void lease_bucket_sync(struct lease_bucket *b, int64_t limit, int64_t now_ms)
{
	limit = lease_clamp(limit);
	if (limit == 0) {
		b->cap = 0;
	} else if (b->cap == 0) {
		b->cap = b->room = limit;
		b->frac = 0;
		b->at_ms = now_ms;
	} else {
		lease_bucket_refill(b, now_ms);
		/* What was used stays used: a raised limit grants its extra room at once, a
		 * lowered one may leave the key in debt. */
		if (limit != b->cap) {
			b->room += limit - b->cap;
			b->cap = limit;
			lease_bucket_clamp(b);
		}
	}
}

int64_t lease_bucket_need(const struct lease_bucket *b, int64_t amount)
{
	int64_t need = lease_max(amount, 1);

	return need > b->cap ? b->cap : need;
}

void lease_bucket_take(struct lease_bucket *b, int64_t amount)
{
	b->room -= amount;
	if (b->room < -LEASE_AMOUNT_MAX)
		b->room = -LEASE_AMOUNT_MAX;
	lease_bucket_clamp(b);
}

int64_t lease_bucket_grant(struct lease_bucket *b, int64_t want)
{
	int64_t g = lease_min(lease_clamp(want), lease_max(b->room, 0));

	b->room -= g;
	return g;
}

/* The refill over t ms is floor((frac + t * cap) / LEASE_WINDOW_MS) units, so the wait
 * is the smallest t with t * cap >= (target - room) * LEASE_WINDOW_MS - frac: whole
 * minutes for all but the last unit's share, then a search over one minute, which
 * avoids the overflowing product. */
int64_t lease_bucket_wait_ms(const struct lease_bucket *b, int64_t target)
{
	int64_t d = target - b->room, q, r;
	int64_t mins, rest, lo = 1, hi = LEASE_WINDOW_MS;

	if (d <= 0 || b->cap <= 0)
		return 0;
	q = b->cap / LEASE_WINDOW_MS;
	r = b->cap % LEASE_WINDOW_MS;
	mins = (d - 1) / b->cap;
	rest = (d - 1) % b->cap + 1;
	if (mins > LEASE_WAIT_MAX_MS / LEASE_WINDOW_MS - 1)
		return LEASE_WAIT_MAX_MS;
	while (lo < hi) {
		int64_t t = lo + (hi - lo) / 2;

		if (t * q + (b->frac + t * r) / LEASE_WINDOW_MS >= rest)
			hi = t;
		else
			lo = t + 1;
	}
	return mins * LEASE_WINDOW_MS + lo;
}

int64_t lease_retry_s(int64_t ms)
{
	return ms < 1000 ? 1 : ms / 1000 + (ms % 1000 != 0);
}

int64_t lease_size(int64_t limit, int64_t interval_ms)
{
	int64_t span = 2 * lease_clamp(interval_ms), n;

	limit = lease_clamp(limit);
	if (limit == 0)
		return 0;
	if (span >= LEASE_WINDOW_MS)
		return limit;
	/* ceil(limit * span / 60000) without the overflowing product: span < 60000. */
	n = limit / LEASE_WINDOW_MS * span +
	    ((limit % LEASE_WINDOW_MS) * span + LEASE_WINDOW_MS - 1) / LEASE_WINDOW_MS;
	return lease_min(lease_max(n, 1), limit);
}

int64_t lease_fallback(int64_t limit, int64_t nodes)
{
	limit = lease_clamp(limit);
	if (nodes < 1)
		nodes = 1;
	return limit / nodes + (limit % nodes != 0);
}

int64_t lease_fallback_allow(int64_t held, int64_t free, int64_t nodes)
{
	return lease_clamp(held) + lease_fallback(free, nodes);
}

int64_t lease_nodes(int64_t prev, int64_t counted, int64_t ok_ms, int64_t ttl_ms)
{
	counted = lease_max(counted, 1);
	return ok_ms < ttl_ms ? lease_max(prev, counted) : counted;
}

/* Sets *ret to what is above target, *want to what is below it. */
static void lease_toward(int64_t held, int64_t target, int64_t *ret, int64_t *want)
{
	*ret = held > target ? held - target : 0;
	*want = held < target ? target - held : 0;
}

void lease_plan(const struct lease_held *h, const struct lease_limits *lim,
                int64_t interval_ms, struct lease_ask *ask)
{
	int idle = h->admitted == 0 && h->want_req == 0 && h->want_slots == 0 &&
	           h->need_tok == 0 && h->need_budget == 0;
	int64_t tpm = lease_clamp(lim->tpm), budget = lease_clamp(lim->budget), conc;
	int64_t free_slots = lease_max(h->slots - h->in_flight, 0), t;

	*ask = (struct lease_ask){ 0 };
	conc = lease_clamp(lim->conc);
	if (idle) {
		ask->ret_req = lease_max(h->req, 0);
		ask->ret_tok = h->tok;
		ask->ret_slots = free_slots;
		ask->ret_budget = h->budget;
		return;
	}
	lease_toward(lease_max(h->req, 0), lease_size(lim->rpm, interval_ms), &ask->ret_req,
	             &ask->want_req);
	t = tpm ? lease_max(lease_size(tpm, interval_ms), lease_min(h->need_tok, tpm)) : 0;
	if (tpm)
		lease_toward(h->tok, t, &ask->ret_tok, &ask->want_tok);
	else
		ask->ret_tok = h->tok;
	t = conc ? lease_min(lease_max(h->peak, h->in_flight + h->want_slots), conc) : 0;
	lease_toward(h->slots, lease_max(t, h->in_flight), &ask->ret_slots, &ask->want_slots);
	if (!conc)
		ask->want_slots = 0;
	t = budget ? lease_min(lease_max(lease_max((budget + LEASE_BUDGET_SHARE - 1) /
	                                           LEASE_BUDGET_SHARE, 2 * h->spent),
	                                 h->need_budget), budget) : 0;
	if (budget)
		lease_toward(h->budget, t, &ask->ret_budget, &ask->want_budget);
	else
		ask->ret_budget = h->budget;
}

int lease_budget_stale(const struct lease_pool *p, const struct lease_limits *lim)
{
	return lim->budget > 0 && (p->budget_cap == 0 || p->budget_period != lim->period ||
	                           p->budget_start_ms != lim->period_start_ms);
}

/* The pool's budget brought to lim: a new period (or kind, or a first use) starts
 * from the budget less the spend so far, a changed budget moves room by the change. */
static void lease_budget_sync(struct lease_pool *p, const struct lease_limits *lim,
                              int64_t spent_seed)
{
	int64_t budget = lease_clamp(lim->budget);

	if (budget == 0) {
		p->budget_cap = 0;
		return;
	}
	if (lease_budget_stale(p, lim)) {
		p->budget_period = lim->period;
		p->budget_start_ms = lim->period_start_ms;
		p->budget_room = budget - lease_clamp(spent_seed);
	} else {
		p->budget_room += budget - p->budget_cap;
	}
	p->budget_cap = budget;
}

void lease_round(struct lease_pool *p, const struct lease_limits *lim, const struct lease_held *h,
                 const struct lease_ask *ask, int64_t others_slots, int64_t spent_seed,
                 int64_t now_ms, struct lease_grant *g)
{
	int64_t after, need, mine, busy;
	int same_period, seeded;

	*g = (struct lease_grant){ 0 };
	lease_bucket_sync(&p->rpm, lim->rpm, now_ms);
	lease_bucket_sync(&p->tpm, lim->tpm, now_ms);
	if (p->rpm.cap) {
		lease_bucket_take(&p->rpm, h->local_req - ask->ret_req);
		g->req = lease_bucket_grant(&p->rpm, ask->want_req);
		after = h->req - ask->ret_req + g->req;
		if ((h->want_req || h->admitted) && after < 1)
			g->dry_req_ms = lease_max(lease_bucket_wait_ms(&p->rpm, 1), 1);
	}
	if (p->tpm.cap) {
		lease_bucket_take(&p->tpm, h->local_tok - ask->ret_tok);
		g->tok = lease_bucket_grant(&p->tpm, ask->want_tok);
		after = h->tok - ask->ret_tok + g->tok;
		need = h->need_tok ? lease_bucket_need(&p->tpm, h->need_tok) : 0;
		if (need && after < need)
			g->dry_tok_ms = lease_max(lease_bucket_wait_ms(&p->tpm,
			                                                lease_min(need - after, p->tpm.cap)), 1);
	}
	if (lim->conc > 0) {
		/* Streams admitted while counting locally may be more than the slots held: the
		 * lease counts them, so that no other node is granted theirs. */
		mine = h->slots - ask->ret_slots;
		busy = lease_max(mine, h->in_flight);
		g->slots = lease_max(lease_min(ask->want_slots, lim->conc - others_slots - busy), 0);
		g->dry_slots = h->want_slots > 0 && mine + g->slots <= h->in_flight;
		g->lease_slots = lease_max(mine + g->slots, h->in_flight);
		g->others_slots = others_slots;
	}
	/* A node's budget from another period is neither returned nor counted: the pool of
	 * a new period was seeded from what the rollups hold. */
	seeded = lease_budget_stale(p, lim);
	same_period = !seeded && h->budget_start_ms == p->budget_start_ms;
	lease_budget_sync(p, lim, spent_seed);
	if (p->budget_cap) {
		if (same_period)
			p->budget_room = lease_min(p->budget_room + ask->ret_budget, p->budget_cap);
		/* What the node spent alone is charged (a new seed holds it already, as far as
		 * its rows were written): an outage's spend is not granted again. */
		if (!seeded)
			p->budget_room = lease_min(p->budget_room - h->local_spent, p->budget_cap);
		if (p->budget_room < -LEASE_AMOUNT_MAX)
			p->budget_room = -LEASE_AMOUNT_MAX;
		g->budget = lease_min(ask->want_budget, lease_max(p->budget_room, 0));
		p->budget_room -= g->budget;
		g->budget_start_ms = p->budget_start_ms;
		after = (same_period ? h->budget - ask->ret_budget : 0) + g->budget;
		g->dry_budget = h->need_budget > 0 && after < h->need_budget;
		g->pool_budget = lease_max(p->budget_room, 0);
	}
}
