/* Unit tests for quota.c's shared mode: admission against grants (rates, slots,
 * tokens settled into debt, budgets of a period), what a sync collects and gives back,
 * a failed round's restore, dry keys refused without waiting, the wait for an urgent
 * round served by a thread standing in for share.c, the fallback's allowances (slots
 * held kept, budget from the pool's room), what was admitted alone reported once, dry
 * marks cleared by the next round, and a team's refusal giving its key's grants back. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "quota.h"
#include "unit.h"

#define T0 1700000000000LL

static struct quota_cfg cfg_of(int64_t rpm, int64_t tpm, int64_t conc, int64_t budget)
{
	struct quota_cfg c = { rpm, tpm, conc, budget, QUOTA_PERIOD_DAY, NULL, 0 };

	return c;
}

static enum quota_verdict admit(struct quota *q, const struct quota_cfg *c, int64_t tokens,
                                 int64_t cost, struct quota_hold *h)
{
	struct quota_status st;

	return quota_admit(q, 7, c, tokens, cost, T0, h, &st);
}

/* One sync's collect for key 7; returns the number of keys. */
static long collect(struct quota *q, struct quota_share_key **keys, size_t *cap)
{
	return quota_share_collect(q, 100, keys, cap);
}

/* A node with no limited key yet: a round collects nothing, from a NULL array (the share
 * thread's first rounds), without handing qsort a NULL pointer (UBSan). */
static void test_collect_nothing(void)
{
	struct quota *q = quota_new();
	struct quota_share_key *keys = NULL;
	size_t cap = 0;

	quota_share_enable(q, 0);
	CHECK_EQ_INT(collect(q, &keys, &cap), 0);
	free(keys);
	quota_free(q);
}

static void test_rates(void)
{
	struct quota *q = quota_new();
	struct quota_cfg c = cfg_of(60, 0, 0, 0);
	struct lease_grant g = { .req = 2 };
	struct quota_share_key *keys = NULL;
	struct quota_hold h;
	size_t cap = 0;

	quota_share_enable(q, 0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_RPM);     /* no grant yet */
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);
	CHECK_EQ_INT(keys[0].key_id, 7);
	CHECK_EQ_INT(keys[0].held.want_req, 1);
	CHECK_EQ_INT(keys[0].ask.want_req, 1);
	quota_share_apply(q, 7, &g, T0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_OK);
	CHECK(h.shared);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_OK);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_RPM);
	/* Dry: refused with the pool's wait, and no round is asked for. */
	g = (struct lease_grant){ .dry_req_ms = 2500 };
	collect(q, &keys, &cap);
	quota_share_apply(q, 7, &g, T0);
	{
		struct quota_status st;

		CHECK_EQ_INT(quota_admit(q, 7, &c, 0, 0, T0 + 100, &h, &st), QUOTA_RPM);
		CHECK_EQ_INT(st.retry_after_s, 3);
	}
	/* An active key keeps its lease (1 at 60 rpm), an idle one gives back all. */
	g = (struct lease_grant){ .req = 5 };
	quota_share_apply(q, 7, &g, T0);
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);               /* the refusal above */
	CHECK_EQ_INT(keys[0].ask.ret_req, 4);
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);
	CHECK_EQ_INT(keys[0].ask.ret_req, 1);
	CHECK_EQ_INT(collect(q, &keys, &cap), 0);
	/* A failed round gives the returns back. */
	quota_share_restore(q, &keys[0]);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_OK);
	/* A look at the key says its limit, not what this node's lease holds: what the
	 * cluster has left is no node's to say. */
	{
		struct quota_status st;
		int64_t in_flight;

		quota_peek(q, 7, &c, T0, &st, &in_flight);
		CHECK_EQ_INT(st.limit_requests, 60);
		CHECK_EQ_INT(st.remaining_requests, -1);
		CHECK_EQ_INT(st.reset_requests_ms, -1);
		CHECK_EQ_INT(st.limit_tokens, -1);
		CHECK(in_flight > 0);
	}
	free(keys);
	quota_free(q);
}

static void test_slots(void)
{
	struct quota *q = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 2, 0);
	struct lease_grant g = { .slots = 1 };
	struct quota_share_key *keys = NULL;
	struct quota_hold h1, h2;
	size_t cap = 0;

	quota_share_enable(q, 0);
	quota_share_apply(q, 7, &g, T0);   /* no state yet: ignored */
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h1), QUOTA_CONCURRENCY);
	quota_share_apply(q, 7, &g, T0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h1), QUOTA_OK);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h2), QUOTA_CONCURRENCY);
	quota_settle(q, &h1, -1, -1, T0);
	/* The freed slot is reused without the network until the next sync. */
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h1), QUOTA_OK);
	quota_settle(q, &h1, -1, -1, T0);
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);
	CHECK_EQ_INT(keys[0].held.peak, 1);
	CHECK_EQ_INT(keys[0].ask.ret_slots, 0);                 /* used: kept */
	CHECK_EQ_INT(keys[0].ask.want_slots, 1);                /* one was refused */
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);
	CHECK_EQ_INT(keys[0].ask.ret_slots, 1);                 /* idle: released */
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h1), QUOTA_CONCURRENCY);
	free(keys);
	quota_free(q);
}

/* While the store is lost a key counts its slots locally: the ones it held stay held
 * (their streams run on), plus its share of what the pool had free at its last round;
 * a key no round granted counts ceil(limit / nodes). Back on the grants, what it holds
 * is still held. */
static void test_fallback_slots(void)
{
	struct quota *q = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 4, 0);
	struct quota_share_key *keys = NULL;
	struct quota_hold h[6];
	struct quota_status st;
	size_t cap = 0;
	int i;

	quota_share_enable(q, 0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h[0]), QUOTA_CONCURRENCY);
	quota_share_apply(q, 7, &(struct lease_grant){ .slots = 2, .lease_slots = 2,
	                                              .others_slots = 1 }, T0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h[0]), QUOTA_OK);
	quota_share_fallback(q, 2);
	CHECK_EQ_INT(quota_share_fallback_nodes(q), 2);
	/* 2 held + ceil((4 - 1 - 2) / 2) = 3, the one in flight counted. */
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h[1]), QUOTA_OK);
	CHECK(!h[1].shared);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h[2]), QUOTA_OK);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h[3]), QUOTA_CONCURRENCY);
	/* A key no round granted: ceil(4 / 2); one whose last round saw every slot taken
	 * by the others: none. */
	CHECK_EQ_INT(quota_admit(q, 8, &c, 0, 0, T0, &h[4], &st), QUOTA_OK);
	CHECK_EQ_INT(quota_admit(q, 8, &c, 0, 0, T0, &h[5], &st), QUOTA_OK);
	CHECK_EQ_INT(quota_admit(q, 8, &c, 0, 0, T0, &h[3], &st), QUOTA_CONCURRENCY);
	quota_settle(q, &h[4], -1, -1, T0);
	quota_settle(q, &h[5], -1, -1, T0);
	quota_share_fallback(q, 0);
	quota_share_apply(q, 8, &(struct lease_grant){ .others_slots = 4 }, T0);
	quota_share_fallback(q, 2);
	CHECK_EQ_INT(quota_admit(q, 8, &c, 0, 0, T0, &h[4], &st), QUOTA_CONCURRENCY);
	quota_share_fallback(q, 0);
	/* Back on the grants: 3 in flight on 2 slots; the next round is told. */
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h[3]), QUOTA_CONCURRENCY);
	collect(q, &keys, &cap);
	CHECK_EQ_INT(keys[0].key_id, 7);
	CHECK_EQ_INT(keys[0].held.slots, 2);
	CHECK_EQ_INT(keys[0].held.in_flight, 3);
	CHECK_EQ_INT(keys[0].ask.ret_slots, 0);
	for (i = 0; i < 3; i++)
		quota_settle(q, &h[i], -1, -1, T0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h[0]), QUOTA_OK);
	free(keys);
	quota_free(q);
}

/* A budget while the store is lost: the grant held plus a share of the pool's room at
 * the last round, each outage from nothing; what was admitted alone (and its
 * settlement's correction) is handed to the next round, given back if that round
 * fails, and reported once. */
static void test_fallback_budget_reported(void)
{
	struct quota *q = quota_new();
	struct quota_cfg c = cfg_of(60, 1000, 0, 100000);
	int64_t day = quota_period_start(QUOTA_PERIOD_DAY, NULL, T0);
	struct lease_grant g = { .req = 1, .tok = 100, .budget = 100, .budget_start_ms = day,
	                         .pool_budget = 1000 };
	struct quota_share_key *keys = NULL;
	struct quota_hold h1, h2, h3;
	size_t cap = 0;

	quota_share_enable(q, 0);
	CHECK_EQ_INT(admit(q, &c, 10, 100, &h1), QUOTA_RPM);
	quota_share_apply(q, 7, &g, T0);
	collect(q, &keys, &cap);
	quota_share_restore(q, &keys[0]);
	quota_share_fallback(q, 2);
	/* 100 held + 1000 / 2 = 600. */
	CHECK_EQ_INT(admit(q, &c, 10, 400, &h1), QUOTA_OK);
	CHECK_EQ_INT(admit(q, &c, 10, 300, &h2), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(q, &c, 10, 200, &h2), QUOTA_OK);
	quota_settle(q, &h1, 30, 500, T0);
	CHECK_EQ_INT(admit(q, &c, 10, 1, &h3), QUOTA_BUDGET);   /* 700 used of 600 */
	/* The store answers again: the round takes the report; a failed one gives it back. */
	quota_share_fallback(q, 0);
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);
	CHECK_EQ_INT(keys[0].held.local_req, 2);
	CHECK_EQ_INT(keys[0].held.local_tok, 20 + 20);
	CHECK_EQ_INT(keys[0].held.local_spent, 400 + 200 + 100);
	quota_share_restore(q, &keys[0]);
	quota_settle(q, &h2, 10, 100, T0);      /* settled after the store came back */
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);
	CHECK_EQ_INT(keys[0].held.local_spent, 700 - 100);
	CHECK_EQ_INT(keys[0].held.local_req, 2);
	quota_share_apply(q, 7, &(struct lease_grant){ .budget_start_ms = day,
	                                              .pool_budget = 1000 }, T0);
	CHECK_EQ_INT(collect(q, &keys, &cap), 0);       /* reported once: nothing left */
	/* A second outage counts from nothing: 100 + 500 again. */
	quota_share_apply(q, 7, &(struct lease_grant){ .budget = 100, .budget_start_ms = day,
	                                              .pool_budget = 1000 }, T0);
	quota_share_fallback(q, 2);
	CHECK_EQ_INT(admit(q, &c, 10, 600, &h1), QUOTA_OK);
	CHECK_EQ_INT(admit(q, &c, 10, 1, &h2), QUOTA_BUDGET);
	free(keys);
	quota_free(q);
}

/* A dry mark is only as good as its round: an idle dry key is taken by the next round,
 * which clears it, and its next request waits for a round instead of a refusal. */
static void test_dry_mark_cleared(void)
{
	struct quota *q = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 2, 0);
	struct quota_share_key *keys = NULL;
	struct quota_hold h;
	size_t cap = 0;

	quota_share_enable(q, 0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_CONCURRENCY);
	collect(q, &keys, &cap);
	quota_share_apply(q, 7, &(struct lease_grant){ .dry_slots = 1 }, T0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_CONCURRENCY);
	collect(q, &keys, &cap);
	quota_share_apply(q, 7, &(struct lease_grant){ .dry_slots = 1 }, T0);
	/* Idle since: the next round still takes the key, and clears its mark. */
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);
	CHECK_EQ_INT(keys[0].ask.want_slots, 0);
	quota_share_apply(q, 7, &(struct lease_grant){ 0 }, T0);
	CHECK_EQ_INT(collect(q, &keys, &cap), 0);
	free(keys);
	quota_free(q);
}

static void test_tokens_and_budget(void)
{
	struct quota *q = quota_new();
	struct quota_cfg c = cfg_of(0, 1000, 0, 5000);
	int64_t day = quota_period_start(QUOTA_PERIOD_DAY, NULL, T0);
	struct lease_grant g = { .tok = 100, .budget = 300, .budget_start_ms = day };
	struct quota_share_key *keys = NULL;
	struct quota_status st;
	struct quota_hold h;
	size_t cap = 0;

	quota_share_enable(q, 0);
	CHECK_EQ_INT(admit(q, &c, 50, 100, &h), QUOTA_TPM);
	quota_share_apply(q, 7, &g, T0);
	CHECK_EQ_INT(admit(q, &c, 50, 100, &h), QUOTA_OK);
	CHECK_EQ_INT(h.period_start_ms, day);
	/* Used more than reserved: debt, paid from the next grant. */
	quota_settle(q, &h, 200, 400, T0);
	CHECK_EQ_INT(admit(q, &c, 1, 1, &h), QUOTA_TPM);
	collect(q, &keys, &cap);
	CHECK_EQ_INT(keys[0].held.tok, -100);
	CHECK_EQ_INT(keys[0].held.budget, 300 - 100 + 100 - 400);
	/* The largest waiting request (50) and the debt. */
	CHECK_EQ_INT(keys[0].ask.want_tok, 50 + 100);
	/* A budget granted for another period does not count: refused for now, the pool
	 * not found spent (Retry-After 1: the next round asks it), ... */
	g = (struct lease_grant){ .tok = 200, .budget = 300, .budget_start_ms = day - 86400000 };
	quota_share_apply(q, 7, &g, T0);
	CHECK_EQ_INT(quota_admit(q, 7, &c, 1, 1, T0, &h, &st), QUOTA_BUDGET_PENDING);
	CHECK_EQ_INT(st.retry_after_s, 1);
	/* ... until a round finds it spent: then refused until the period ends. */
	g = (struct lease_grant){ .tok = 200, .budget_start_ms = day, .dry_budget = 1 };
	quota_share_apply(q, 7, &g, T0);
	CHECK_EQ_INT(quota_admit(q, 7, &c, 1, 1, T0, &h, &st), QUOTA_BUDGET);
	CHECK_EQ_INT(st.retry_after_s, (day + 86400000 - T0 + 999) / 1000);
	/* A pool found spent yesterday refuses nothing today until a round says so. */
	g = (struct lease_grant){ .tok = 200, .budget_start_ms = day - 86400000, .dry_budget = 1 };
	quota_share_apply(q, 7, &g, T0);
	CHECK_EQ_INT(quota_admit(q, 7, &c, 1, 1, T0, &h, &st), QUOTA_BUDGET_PENDING);
	CHECK_EQ_INT(st.retry_after_s, 1);
	g = (struct lease_grant){ .budget = 300, .budget_start_ms = day };
	quota_share_apply(q, 7, &g, T0);
	CHECK_EQ_INT(admit(q, &c, 1, 1, &h), QUOTA_OK);
	free(keys);
	quota_free(q);
}

/* Stands in for share.c: every round grants what is asked for. */
static void *fake_share(void *arg)
{
	struct quota *q = arg;
	struct quota_share_key *keys = NULL;
	size_t cap = 0;
	int rounds;

	for (rounds = 0; rounds < 3; rounds++) {
		long n, i;

		quota_share_sleep(q, 5000);
		n = quota_share_collect(q, 100, &keys, &cap);
		for (i = 0; i < n; i++) {
			struct lease_grant g = { .req = keys[i].ask.want_req };

			quota_share_apply(q, keys[i].key_id, &g, T0);
		}
		quota_share_done(q);
	}
	free(keys);
	return NULL;
}

static void test_wait_for_a_round(void)
{
	struct quota *q = quota_new();
	struct quota_cfg c = cfg_of(600, 0, 0, 0), none = cfg_of(0, 0, 0, 0);
	struct quota_hold h;
	uint64_t waits, timeouts;
	pthread_t t;

	quota_share_enable(q, 2000);
	CHECK_EQ_INT(admit(q, &none, 0, 0, &h), QUOTA_OK);      /* no limit: no wait */
	quota_share_waits(q, &waits, &timeouts);
	CHECK_EQ_INT(waits, 0);
	CHECK_EQ_INT(pthread_create(&t, NULL, fake_share, q), 0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_OK);         /* after one urgent round */
	quota_share_waits(q, &waits, &timeouts);
	CHECK_EQ_INT(waits, 1);
	CHECK_EQ_INT(timeouts, 0);
	quota_share_wake(q);
	quota_share_wake(q);
	pthread_join(t, NULL);
	quota_free(q);
}

struct waiter {
	struct quota *q;
	struct quota_cfg c;
	enum quota_verdict v;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	struct quota_hold h;

	w->v = admit(w->q, &w->c, 0, 0, &h);
	return NULL;
}

/* A slot granted to a waiting request is its own until it decides: a round between the
 * grant and its wake-up (another request's urgent round) does not give it back. */
static void test_a_waiter_keeps_its_grant(void)
{
	struct quota *q = quota_new();
	struct waiter w = { q, cfg_of(0, 0, 4, 0), QUOTA_OK };
	struct quota_share_key *keys = NULL;
	size_t cap = 0;
	pthread_t t;
	long n;

	quota_share_enable(q, 5000);
	CHECK_EQ_INT(pthread_create(&t, NULL, waiter_main, &w), 0);
	quota_share_sleep(q, 5000);                /* the waiter asked for an urgent round */
	n = collect(q, &keys, &cap);
	CHECK_EQ_INT(n, 1);
	CHECK_EQ_INT(keys[0].ask.want_slots, 1);
	quota_share_apply(q, 7, &(struct lease_grant){ .slots = 1 }, T0);
	quota_share_wake(q);                       /* the next round, before it wakes */
	quota_share_sleep(q, 5000);
	n = collect(q, &keys, &cap);
	CHECK_EQ_INT(n, 1);
	CHECK_EQ_INT(keys[0].ask.ret_slots, 0);
	quota_share_apply(q, 7, &(struct lease_grant){ 0 }, T0);
	quota_share_done(q);
	pthread_join(t, NULL);
	CHECK_EQ_INT(w.v, QUOTA_OK);
	free(keys);
	quota_free(q);
}

/* A team refusing in shared mode gives the key's grants back whole: the request, its
 * tokens and budget go back to the key's grants, its slot is free; the team's pool is
 * synced under its own id (quota_team_subject), before the keys'. */
static void test_team_refusal_gives_grants_back(void)
{
	struct quota *q = quota_new();
	struct quota_cfg c = cfg_of(60, 1000, 1, 500), team = cfg_of(60, 0, 0, 0);
	struct lease_grant g = { .req = 2, .tok = 200, .slots = 1, .budget = 50,
	                         .budget_start_ms = T0 - T0 % 86400000 };
	struct quota_share_key *keys = NULL;
	struct quota_hold h, th;
	struct quota_subject at[2] = { { 7, &c, &h, 0, NULL }, { quota_team_subject(3), &team, &th, 0, NULL } };
	struct quota_status st;
	size_t cap = 0, level = 0;

	quota_share_enable(q, 0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_CONCURRENCY);   /* no grant yet */
	quota_share_apply(q, 7, &g, T0);
	CHECK_EQ_INT(quota_admit_all(q, at, 2, 100, 50, T0, &st, &level), QUOTA_RPM);
	CHECK_EQ_INT(level, 1);
	/* Everything the key's grants covered is still there: 2 requests, 200 tokens, 50
	 * micro-dollars, its one slot. */
	CHECK_EQ_INT(admit(q, &c, 100, 50, &h), QUOTA_OK);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &th), QUOTA_CONCURRENCY);
	quota_settle(q, &h, 100, 0, T0);
	CHECK_EQ_INT(admit(q, &c, 0, 0, &h), QUOTA_OK);
	CHECK_EQ_INT(collect(q, &keys, &cap), 2);
	CHECK_EQ_INT(keys[0].key_id, quota_team_subject(3));
	CHECK_EQ_INT(keys[0].held.want_req, 1);
	CHECK_EQ_INT(keys[1].key_id, 7);
	CHECK_EQ_INT(keys[1].held.admitted, 2);
	free(keys);
	quota_free(q);
}

/* An end user's subject asks the pools with its key and id, which the share thread
 * needs to read its spend (spend_end_user_sql); other subjects carry none. */
static void test_end_user_named(void)
{
	struct quota *q = quota_new();
	struct quota_cfg c = cfg_of(60, 0, 0, 0), eu = cfg_of(5, 0, 0, 0);
	struct quota_share_key *keys = NULL;
	struct quota_hold h, eh;
	int64_t user = quota_end_user_subject(0xabcdefULL);
	struct quota_subject at[2] = { { 7, &c, &h, 0, NULL }, { user, &eu, &eh, 7, "alice" } };
	struct quota_status st;
	size_t cap = 0, level = 0;

	quota_share_enable(q, 0);
	CHECK_EQ_INT(quota_admit_all(q, at, 2, 0, 0, T0, &st, &level), QUOTA_RPM);
	CHECK_EQ_INT(level, 0);
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);   /* refused at the key: the end user untouched */
	CHECK_EQ_INT(keys[0].key_id, 7);
	CHECK_EQ_INT(keys[0].owner, 0);
	CHECK_EQ_STR(keys[0].name, "");
	quota_share_apply(q, 7, &(struct lease_grant){ .req = 5 }, T0);
	CHECK_EQ_INT(quota_admit_all(q, at, 2, 0, 0, T0, &st, &level), QUOTA_RPM);
	CHECK_EQ_INT(level, 1);
	CHECK_EQ_INT(collect(q, &keys, &cap), 2);
	CHECK_EQ_INT(keys[0].key_id, user);          /* below every key's, team's and tag's */
	CHECK_EQ_INT(keys[0].owner, 7);
	CHECK_EQ_STR(keys[0].name, "alice");
	CHECK_EQ_INT(keys[0].held.want_req, 1);
	free(keys);
	quota_free(q);
}

/* Limits of an older snapshot than some the key was admitted under (an I/O thread yet
 * to switch) are not what a round asks the pools for: neither in a round nor while the
 * store is lost, with a budget or without. */
static void test_older_limits_are_not_reported(void)
{
	struct quota *q = quota_new();
	struct quota_cfg old = cfg_of(60, 0, 0, 0), new = cfg_of(120, 0, 0, 0);
	struct quota_share_key *keys = NULL;
	struct quota_hold h;
	size_t cap = 0;

	old.generation = 1;
	new.generation = 2;
	quota_share_enable(q, 0);
	admit(q, &new, 0, 0, &h);
	admit(q, &old, 0, 0, &h);
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);
	CHECK_EQ_INT(keys[0].cfg.rpm, 120);
	quota_share_fallback(q, 2);
	if (admit(q, &old, 0, 0, &h) == QUOTA_OK)
		quota_settle(q, &h, 0, 0, T0);
	quota_share_fallback(q, 0);
	CHECK_EQ_INT(collect(q, &keys, &cap), 1);
	CHECK_EQ_INT(keys[0].cfg.rpm, 120);
	free(keys);
	quota_free(q);
}

int main(void)
{
	RUN(test_collect_nothing);
	RUN(test_rates);
	RUN(test_slots);
	RUN(test_fallback_slots);
	RUN(test_fallback_budget_reported);
	RUN(test_dry_mark_cleared);
	RUN(test_tokens_and_budget);
	RUN(test_wait_for_a_round);
	RUN(test_a_waiter_keeps_its_grant);
	RUN(test_team_refusal_gives_grants_back);
	RUN(test_end_user_named);
	RUN(test_older_limits_are_not_reported);
	return UNIT_DONE();
}
