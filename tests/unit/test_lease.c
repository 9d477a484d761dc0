/* Unit tests for spoa/lease.c: bucket refill across intervals and limit changes, lease
 * sizes, the fallback share, what a node gives back and asks for, what a pool grants
 * (rates, slots against other nodes' leases, budgets across periods), dry marks and
 * their waits, overflow clamps, the cluster bound over simulated nodes, and the
 * store lost: fallback allowances, what a node admitted alone charged at its next
 * round, streams in flight kept in the lease, nodes counted after an outage. */
#include <stdint.h>

#include "lease.h"
#include "unit.h"

#define T0  1700000000000LL
#define BIG 1000000000000000LL      /* 1e15 */

static struct lease_limits lim_of(int64_t rpm, int64_t tpm, int64_t conc, int64_t budget)
{
	struct lease_limits l = { rpm, tpm, conc, budget, 0, T0 };

	return l;
}

static void test_bucket_refill(void)
{
	struct lease_bucket a = { 0 }, b = { 0 };
	int i;

	lease_bucket_sync(&a, 60, T0);
	CHECK_EQ_INT(a.room, 60);                 /* starts full */
	lease_bucket_take(&a, 60);
	lease_bucket_refill(&a, T0 + 999);
	CHECK_EQ_INT(a.room, 0);
	lease_bucket_refill(&a, T0 + 1000);
	CHECK_EQ_INT(a.room, 1);
	lease_bucket_refill(&a, T0 + 500);        /* time never runs back */
	CHECK_EQ_INT(a.room, 1);
	lease_bucket_refill(&a, T0 + 31000);
	CHECK_EQ_INT(a.room, 31);
	lease_bucket_refill(&a, T0 + 200000);
	CHECK_EQ_INT(a.room, 60);                 /* capped */
	/* Many small refills add up to one large one: no drift. */
	lease_bucket_sync(&b, 7, T0);
	lease_bucket_take(&b, 7);
	for (i = 1; i <= 1000; i++)
		lease_bucket_refill(&b, T0 + i * 37);
	CHECK_EQ_INT(b.room, 7 * 37000 / 60000);
}

static void test_bucket_limit_change(void)
{
	struct lease_bucket b = { 0 };

	lease_bucket_sync(&b, 60, T0);
	lease_bucket_take(&b, 50);
	lease_bucket_sync(&b, 100, T0);           /* raised: the extra room at once */
	CHECK_EQ_INT(b.room, 50);
	lease_bucket_sync(&b, 20, T0);            /* lowered: used stays used, debt */
	CHECK_EQ_INT(b.room, -30);
	CHECK_EQ_INT(lease_bucket_wait_ms(&b, 1), 93000);
	lease_bucket_sync(&b, 0, T0);             /* off, then on: full */
	lease_bucket_sync(&b, 20, T0 + 1);
	CHECK_EQ_INT(b.room, 20);
}

static void test_sizes_and_fallback(void)
{
	CHECK_EQ_INT(lease_size(60, 100), 1);
	CHECK_EQ_INT(lease_size(6000, 100), 20);
	CHECK_EQ_INT(lease_size(601, 100), 3);    /* rounded up */
	CHECK_EQ_INT(lease_size(10, 60000), 10);  /* never above the limit */
	CHECK_EQ_INT(lease_size(0, 100), 0);
	CHECK_EQ_INT(lease_size(BIG * 10, 1000), (BIG + 29) / 30);   /* ceil(BIG / 30) */
	CHECK_EQ_INT(lease_fallback(60, 3), 20);
	CHECK_EQ_INT(lease_fallback(61, 3), 21);
	CHECK_EQ_INT(lease_fallback(1, 3), 1);
	CHECK_EQ_INT(lease_fallback(0, 3), 0);
	CHECK_EQ_INT(lease_fallback(60, 0), 60);
	CHECK(3 * lease_fallback(61, 3) <= 61 + 3 - 1);
	CHECK_EQ_INT(lease_fallback(-5, 2), 0);
	CHECK_EQ_INT(lease_retry_s(1), 1);
	CHECK_EQ_INT(lease_retry_s(1001), 2);
	CHECK_EQ_INT(lease_retry_s(-5), 1);
}

static void test_plan(void)
{
	struct lease_limits l = lim_of(6000, 6000, 4, 3200);
	struct lease_held idle = { .req = 5, .tok = -40, .slots = 3, .in_flight = 1, .budget = 70 };
	struct lease_held busy = { .req = 5, .tok = 50, .slots = 1, .in_flight = 1, .peak = 3,
	                           .admitted = 9, .budget = 50, .spent = 80 };
	struct lease_ask a;

	/* Idle: everything back, a debt too; the slot in flight stays. */
	lease_plan(&idle, &l, 100, &a);
	CHECK_EQ_INT(a.ret_req, 5);
	CHECK_EQ_INT(a.ret_tok, -40);
	CHECK_EQ_INT(a.ret_slots, 2);
	CHECK_EQ_INT(a.ret_budget, 70);
	CHECK_EQ_INT(a.want_req + a.want_tok + a.want_slots + a.want_budget, 0);
	/* Active: two intervals of the rates (20), the peak of slots, 2x the spend. */
	lease_plan(&busy, &l, 100, &a);
	CHECK_EQ_INT(a.want_req, 15);
	CHECK_EQ_INT(a.ret_req, 0);
	CHECK_EQ_INT(a.want_tok, 0);
	CHECK_EQ_INT(a.ret_tok, 30);
	CHECK_EQ_INT(a.want_slots, 2);
	CHECK_EQ_INT(a.want_budget, 110);
	/* A waiting request larger than the lease: asked for whole. */
	busy.need_tok = 500;
	lease_plan(&busy, &l, 100, &a);
	CHECK_EQ_INT(a.want_tok, 450);
	/* A limit switched off: its grants go back. */
	l = lim_of(0, 0, 0, 0);
	lease_plan(&busy, &l, 100, &a);
	CHECK_EQ_INT(a.ret_req, 5);
	CHECK_EQ_INT(a.ret_tok, 50);
	CHECK_EQ_INT(a.ret_slots, 0);
	CHECK_EQ_INT(a.want_slots, 0);
	CHECK_EQ_INT(a.ret_budget, 50);
}

static void test_round_rates(void)
{
	struct lease_pool p = { 0 };
	struct lease_limits l = lim_of(60, 0, 0, 0);
	struct lease_held h = { .want_req = 1 };
	struct lease_ask a = { .want_req = 1 };
	struct lease_grant g;
	int i;

	/* A new pool starts full: 60 requests are granted, one at a time. */
	for (i = 0; i < 60; i++) {
		lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
		CHECK_EQ_INT(g.req, 1);
		CHECK_EQ_INT(g.dry_req_ms, 0);
	}
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(g.req, 0);
	CHECK_EQ_INT(g.dry_req_ms, 1000);         /* one unit per second at 60 rpm */
	lease_round(&p, &l, &h, &a, 0, 0, T0 + 400, &g);
	CHECK_EQ_INT(g.dry_req_ms, 600);
	lease_round(&p, &l, &h, &a, 0, 0, T0 + 1000, &g);
	CHECK_EQ_INT(g.req, 1);
	/* Units given back return to the room, never above the cap. */
	h = (struct lease_held){ .req = 30 };
	a = (struct lease_ask){ .ret_req = 30 };
	lease_round(&p, &l, &h, &a, 0, 0, T0 + 1000, &g);
	CHECK_EQ_INT(p.rpm.room, 30);
	lease_round(&p, &l, &h, &a, 0, 0, T0 + 1000, &g);
	lease_round(&p, &l, &h, &a, 0, 0, T0 + 1000, &g);
	CHECK_EQ_INT(p.rpm.room, 60);
	/* Tokens: a returned debt is the pool's; a request needs its whole estimate. */
	l = lim_of(0, 1000, 0, 0);
	h = (struct lease_held){ .tok = -300, .need_tok = 900, .want_req = 1 };
	a = (struct lease_ask){ .ret_tok = -300 };
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(p.tpm.room, 700);
	CHECK_EQ_INT(g.tok, 0);
	CHECK(g.dry_tok_ms > 0);
	CHECK_EQ_INT(g.dry_tok_ms, lease_bucket_wait_ms(&p.tpm, 900));
}

static void test_round_slots(void)
{
	struct lease_pool p = { 0 };
	struct lease_limits l = lim_of(0, 0, 4, 0);
	struct lease_held h = { .want_slots = 2 };
	struct lease_ask a = { .want_slots = 2 };
	struct lease_grant g;

	lease_round(&p, &l, &h, &a, 3, 0, T0, &g);   /* others hold 3 of 4 */
	CHECK_EQ_INT(g.slots, 1);
	CHECK_EQ_INT(g.dry_slots, 0);
	lease_round(&p, &l, &h, &a, 4, 0, T0, &g);
	CHECK_EQ_INT(g.slots, 0);
	CHECK_EQ_INT(g.dry_slots, 1);
	/* An expired lease counts for no one (share.c sums only unexpired ones). */
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(g.slots, 2);
	/* Never above the limit with what this node holds itself, even lowered. */
	h = (struct lease_held){ .slots = 3, .in_flight = 3, .want_slots = 1 };
	a = (struct lease_ask){ .want_slots = 1 };
	lease_round(&p, &l, &h, &a, 1, 0, T0, &g);
	CHECK_EQ_INT(g.slots, 0);
	l.conc = 2;
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(g.slots, 0);
}

static void test_round_budget(void)
{
	struct lease_pool p = { 0 };
	struct lease_limits l = lim_of(0, 0, 0, 1000);
	struct lease_held h = { .need_budget = 100 };
	struct lease_ask a = { .want_budget = 100 };
	struct lease_grant g;

	/* First use: budget less what the rollups hold. */
	CHECK(lease_budget_stale(&p, &l));
	lease_round(&p, &l, &h, &a, 0, 250, T0, &g);
	CHECK_EQ_INT(g.budget, 100);
	CHECK_EQ_INT(g.budget_start_ms, T0);
	CHECK_EQ_INT(p.budget_room, 650);
	CHECK(!lease_budget_stale(&p, &l));
	/* Returned in the same period: back in the pool; an overspend is taken. */
	h = (struct lease_held){ .budget = -50, .budget_start_ms = T0 };
	a = (struct lease_ask){ .ret_budget = -50 };
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(p.budget_room, 600);
	/* A raised budget moves the room by the change. */
	l.budget = 1500;
	lease_round(&p, &l, &h, &(struct lease_ask){ 0 }, 0, 0, T0, &g);
	CHECK_EQ_INT(p.budget_room, 1100);
	/* A new period starts from the seed; the old period's grant is not returned. */
	l.period_start_ms = T0 + 86400000;
	h = (struct lease_held){ .budget = 80, .budget_start_ms = T0, .need_budget = 2000 };
	a = (struct lease_ask){ .ret_budget = 80, .want_budget = 2000 };
	lease_round(&p, &l, &h, &a, 0, 100, T0 + 86400000, &g);
	CHECK_EQ_INT(g.budget, 1400);
	CHECK_EQ_INT(p.budget_room, 0);
	CHECK_EQ_INT(g.budget_start_ms, T0 + 86400000);
	CHECK_EQ_INT(g.dry_budget, 1);
	/* Another period kind is another pool. */
	l.period = 1;
	CHECK(lease_budget_stale(&p, &l));
}

static void test_clamps(void)
{
	struct lease_bucket b = { 0 };
	struct lease_pool p = { 0 };
	struct lease_limits l = lim_of(BIG * 100, BIG * 100, BIG * 100, BIG * 100);
	struct lease_held h = { .want_req = 1, .need_tok = BIG * 100 };
	struct lease_ask a;
	struct lease_grant g;

	lease_bucket_sync(&b, BIG * 100, T0);
	CHECK_EQ_INT(b.cap, BIG);
	lease_bucket_take(&b, BIG);
	lease_bucket_take(&b, BIG);
	lease_bucket_take(&b, BIG);
	CHECK_EQ_INT(b.room, -BIG);               /* the debt floor */
	CHECK(lease_bucket_wait_ms(&b, BIG) > 0);
	lease_bucket_refill(&b, T0 + 3 * 60000);
	CHECK_EQ_INT(b.room, BIG);
	CHECK_EQ_INT(lease_bucket_grant(&b, -5), 0);
	lease_plan(&h, &l, 100, &a);
	CHECK(a.want_tok <= BIG);
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK(g.req >= 1 && g.tok <= BIG && p.rpm.room >= 0);
}

/* n nodes each admit as fast as they can through their grants, syncing every interval
 * as share.c does: in every 60 s span the cluster admits at most 2N + n * L, and in
 * the first second about N, not n * N. */
static void test_cluster_bound(void)
{
	enum { NODES = 3, INTERVAL = 100, RPM = 60, STEPS = 6000 };   /* 10 minutes */
	struct lease_pool p = { 0 };
	struct lease_limits l = lim_of(RPM, 0, 0, 0);
	struct lease_held held[NODES] = { { 0 } };
	static int admitted[STEPS];
	int64_t L = lease_size(RPM, INTERVAL), span = 0, first = 0;
	int t, n, i;

	for (t = 0; t < STEPS; t++) {
		admitted[t] = 0;
		for (n = 0; n < NODES; n++) {
			struct lease_held *h = &held[n];
			struct lease_ask a;
			struct lease_grant g;

			/* Between syncs: every unit held is spent (requests arrive constantly). */
			admitted[t] += (int)h->req;
			h->admitted = h->req;
			h->want_req = h->req == 0;
			h->req = 0;
			lease_plan(h, &l, INTERVAL, &a);
			lease_round(&p, &l, h, &a, 0, 0, T0 + (int64_t)t * INTERVAL, &g);
			h->req = h->req - a.ret_req + g.req;
		}
	}
	for (t = 0; t < STEPS; t++) {
		span += admitted[t];
		if (t >= 600)
			span -= admitted[t - 600];
		if (span > 2 * RPM + NODES * L)
			CHECK(span <= 2 * RPM + NODES * L);
	}
	for (t = 0; t < 10; t++)
		first += admitted[t];
	CHECK(first <= RPM + NODES * L);
	/* The long-run rate is the limit. */
	for (t = STEPS - 600, span = 0; t < STEPS; t++)
		span += admitted[t];
	CHECK(span >= RPM - NODES * L && span <= RPM + NODES * L);
	for (i = 0; i < NODES; i++)
		CHECK(held[i].req <= L);
}

/* Streams in flight beyond the slots held (admitted while the store was lost) count in
 * the lease and against the grant: no other node is given theirs. */
static void test_round_in_flight(void)
{
	struct lease_pool p = { 0 };
	struct lease_limits l = lim_of(0, 0, 4, 0);
	struct lease_held h = { .slots = 1, .in_flight = 4, .want_slots = 1 };
	struct lease_ask a = { .want_slots = 4 };
	struct lease_grant g;

	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(g.slots, 0);
	CHECK_EQ_INT(g.lease_slots, 4);
	CHECK_EQ_INT(g.dry_slots, 1);
	h = (struct lease_held){ .slots = 2, .in_flight = 1, .want_slots = 1 };
	a = (struct lease_ask){ .want_slots = 1 };
	lease_round(&p, &l, &h, &a, 1, 0, T0, &g);
	CHECK_EQ_INT(g.slots, 1);
	CHECK_EQ_INT(g.lease_slots, 3);
	CHECK_EQ_INT(g.others_slots, 1);
}

/* What a node admitted alone is charged to the pool at its next round: requests and
 * tokens into the buckets (debt if need be), spend out of the budget, a correction
 * below the reservation given back; a budget pool seeded from the rollups right then
 * is not charged twice. */
static void test_round_local(void)
{
	struct lease_pool p = { 0 };
	struct lease_limits l = lim_of(60, 1000, 0, 10000);
	struct lease_held h = { .local_req = 70, .local_tok = 300, .local_spent = 4000 };
	struct lease_ask a = { 0 };
	struct lease_grant g;

	lease_round(&p, &l, &h, &(struct lease_ask){ 0 }, 0, 2000, T0, &g);
	CHECK_EQ_INT(p.budget_room, 8000);               /* seeded: not charged again */
	CHECK_EQ_INT(p.rpm.room, -10);
	CHECK_EQ_INT(p.tpm.room, 700);
	h = (struct lease_held){ .local_spent = 4000 };
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(p.budget_room, 4000);
	CHECK_EQ_INT(g.pool_budget, 4000);
	h = (struct lease_held){ .local_spent = -500 };
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(p.budget_room, 4500);
	h = (struct lease_held){ .local_spent = 9000 };
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(p.budget_room, -4500);
	CHECK_EQ_INT(g.pool_budget, 0);
	h = (struct lease_held){ .want_req = 1, .need_budget = 1 };
	a = (struct lease_ask){ .want_req = 1, .want_budget = 1 };
	lease_round(&p, &l, &h, &a, 0, 0, T0, &g);
	CHECK_EQ_INT(g.req, 0);
	CHECK_EQ_INT(g.budget, 0);
	CHECK_EQ_INT(g.dry_budget, 1);
	CHECK(g.dry_req_ms > 10000);                     /* 11 units to refill at 1/s */
}

static void test_fallback_allow_and_nodes(void)
{
	/* Held plus a share of what was free: 4 slots held by one node, none free, so the
	 * other gets none; nothing held, 3 free over 2 nodes: 2 each (limit + nodes - 1). */
	CHECK_EQ_INT(lease_fallback_allow(4, 0, 2), 4);
	CHECK_EQ_INT(lease_fallback_allow(0, 0, 2), 0);
	CHECK_EQ_INT(lease_fallback_allow(0, 3, 2), 2);
	CHECK_EQ_INT(lease_fallback_allow(-50, 100, 3), 34);   /* a debt holds nothing */
	/* After an outage the others' presence may have lapsed: the count before it holds
	 * for ttl of committed rounds. */
	CHECK_EQ_INT(lease_nodes(3, 1, 0, 3000), 3);
	CHECK_EQ_INT(lease_nodes(3, 1, 2999, 3000), 3);
	CHECK_EQ_INT(lease_nodes(3, 1, 3000, 3000), 1);
	CHECK_EQ_INT(lease_nodes(2, 3, 0, 3000), 3);
	CHECK_EQ_INT(lease_nodes(1, 0, 5000, 3000), 1);
}

/* A budget through 3 nodes and 5 store outages, each node spending all it may: in
 * shared rounds its grants, alone its allowance (lease_fallback_allow of what its
 * last round saw), reported at its first round after. The spend stays within the
 * budget plus one grant per node; without the report it reached about 2x. */
static void test_budget_across_outages(void)
{
	enum { NODES = 3, STEP = 20000, ROUNDS = 400 };
	const int64_t B = 3000000;
	struct lease_pool p = { 0 };
	struct lease_limits l = lim_of(0, 0, 0, B);
	struct lease_held held[NODES] = { { 0 } };
	int64_t pool_seen[NODES] = { 0 }, total = 0, most_grant = 0;
	int t, n, outage;

	for (t = 0; t < ROUNDS; t++) {
		outage = t % 80 >= 40 && t % 80 < 60;
		for (n = 0; n < NODES; n++) {
			struct lease_held *h = &held[n];
			struct lease_ask a;
			struct lease_grant g;

			if (outage) {
				int64_t allow = lease_fallback_allow(h->budget, pool_seen[n], NODES);

				if (t % 80 == 40)
					h->in_flight = 0;          /* stands for fb_used */
				if (h->in_flight + STEP <= allow) {
					h->in_flight += STEP;
					h->local_spent += STEP;
					total += STEP;
				}
				continue;
			}
			if (h->budget >= STEP) {
				h->budget -= STEP;
				h->spent = STEP;
				h->admitted = 1;
				total += STEP;
			} else {
				h->need_budget = STEP;
			}
			h->budget_start_ms = p.budget_start_ms;
			lease_plan(h, &l, 100, &a);
			lease_round(&p, &l, h, &a, 0, 0, T0, &g);
			h->budget = h->budget - a.ret_budget + g.budget;
			most_grant = g.budget > most_grant ? g.budget : most_grant;
			pool_seen[n] = g.pool_budget;
			h->local_spent = h->spent = h->admitted = h->need_budget = 0;
		}
	}
	CHECK(total >= B - NODES * STEP);
	CHECK(total <= B + NODES * most_grant);
}

int main(void)
{
	RUN(test_bucket_refill);
	RUN(test_bucket_limit_change);
	RUN(test_sizes_and_fallback);
	RUN(test_plan);
	RUN(test_round_rates);
	RUN(test_round_slots);
	RUN(test_round_budget);
	RUN(test_clamps);
	RUN(test_cluster_bound);
	RUN(test_round_in_flight);
	RUN(test_round_local);
	RUN(test_fallback_allow_and_nodes);
	RUN(test_budget_across_outages);
	return UNIT_DONE();
}
