/* lease: the arithmetic of limits, pure (no locks, no clock, no store): token buckets
 * (quota.c's per-node windows and the cluster's pools in limit_pool), and the lease
 * policy of limits shared across nodes: what a node asks for and gives back at a sync,
 * what a pool grants, when a key runs dry, a node's fallback share while the store is
 * lost. quota.c (I/O and intake threads) and share.c (the share thread) call it. */
#ifndef TALLY_LEASE_H
#define TALLY_LEASE_H

#include <stdint.h>

#define LEASE_WINDOW_MS   60000
#define LEASE_AMOUNT_MAX  1000000000000000LL    /* 1e15: limits, estimates, usage */

/* A token bucket of capacity cap refilling cap per LEASE_WINDOW_MS, in whole units
 * plus a remainder in 1/LEASE_WINDOW_MS units. cap 0: not in use. room < 0: debt. */
struct lease_bucket {
	int64_t cap;
	int64_t room;
	int64_t frac;                 /* [0, LEASE_WINDOW_MS) */
	int64_t at_ms;                /* refilled up to here */
};

/* Limits and amounts: negative counts as 0, above LEASE_AMOUNT_MAX as that. */
int64_t lease_clamp(int64_t v);

/* Refills b up to now_ms (time never runs back) and clamps room to cap. */
void lease_bucket_refill(struct lease_bucket *b, int64_t now_ms);
/* Brings b to now_ms under limit (0: none): a bucket newly in use starts full; a
 * changed limit moves room by the change (what was used stays used). */
void lease_bucket_sync(struct lease_bucket *b, int64_t limit, int64_t now_ms);
/* Room a request of amount needs: max(amount, 1), at most cap (a request larger than
 * the bucket needs it full, or it could never pass). */
int64_t lease_bucket_need(const struct lease_bucket *b, int64_t amount);
/* Removes amount from room (negative: gives back), floored at -LEASE_AMOUNT_MAX,
 * capped at cap. */
void lease_bucket_take(struct lease_bucket *b, int64_t amount);
/* Takes up to want units of the room there is; returns how many. */
int64_t lease_bucket_grant(struct lease_bucket *b, int64_t want);
/* ms until room reaches target (<= cap) at the refill rate; 0 if it has. */
int64_t lease_bucket_wait_ms(const struct lease_bucket *b, int64_t target);

/* Whole seconds for a wait of ms, rounded up, at least 1 (Retry-After). */
int64_t lease_retry_s(int64_t ms);

/* Units of a per-minute limit a node holds at once: about two sync intervals at the
 * full rate, at least 1, at most the limit; 0 for no limit. */
int64_t lease_size(int64_t limit, int64_t interval_ms);
/* A node's share of limit while the store is lost: ceil(limit / nodes) (nodes < 1
 * counts as 1); 0 stays 0. */
int64_t lease_fallback(int64_t limit, int64_t nodes);
/* A node's allowance of slots or budget while the store is lost, from what its last
 * round saw: what it held then plus its share of what the pool had left (free: the
 * limit less every node's slots, or the pool's budget room), so that the nodes'
 * allowances sum to at most the limit plus nodes - 1 and streams in flight stay
 * counted. */
int64_t lease_fallback_allow(int64_t held, int64_t free, int64_t nodes);
/* The nodes a round counts: counted (presence leases unexpired), but after a failed
 * round the others' presence may have expired while the store was lost, so until
 * ttl_ms of committed rounds (ok_ms) the count of before the outage (prev) stays if
 * larger. */
int64_t lease_nodes(int64_t prev, int64_t counted, int64_t ok_ms, int64_t ttl_ms);

/* A key's limits as the pool computes them (0: none); period kind as quota.h's enum
 * quota_period stores it (0 day, 1 month, 2 total, 3 week), starting at period_start_ms
 * on the store's clock. */
struct lease_limits {
	int64_t rpm, tpm, conc, budget;
	int period;
	int64_t period_start_ms;
};

/* What a node holds of a key and did since its last sync, read at the sync. */
struct lease_held {
	int64_t req, tok, slots, budget;   /* grants held (tok and budget may be debt) */
	int64_t in_flight;                 /* requests admitted and not settled */
	int64_t peak;                      /* most in flight at once since the last sync */
	int64_t admitted;                  /* requests admitted since the last sync */
	int64_t spent;                     /* budget spent (reserved) since the last sync */
	int64_t want_req, want_slots;      /* requests refused or waiting for want of them */
	int64_t need_tok, need_budget;     /* the largest such request's need, 0: none */
	int64_t budget_start_ms;           /* the period budget was granted in */
	/* Admitted while counting locally (the store lost) and not yet reported: requests,
	 * tokens and cost (their settlement's corrections too: may be negative). */
	int64_t local_req, local_tok, local_spent;
};

/* What a node gives back at once and asks the pool for. */
struct lease_ask {
	int64_t ret_req, ret_tok, ret_slots, ret_budget;
	int64_t want_req, want_tok, want_slots, want_budget;
};

/* The policy: an idle key (nothing admitted or asked for since the last sync) gives
 * back every unit, token (or its debt), free slot and its budget (or its overspend).
 * An active key keeps about two intervals of its rates (lease_size, or the largest
 * request waiting), the slots in flight or used at once since the last sync (reused
 * without the network), and a budget of max(1/32 of the budget, twice what it spent
 * since the last sync, the largest waiting request); it gives back what is above that
 * and asks for what is below. */
void lease_plan(const struct lease_held *h, const struct lease_limits *lim,
                int64_t interval_ms, struct lease_ask *ask);

/* A key's row of limit_pool. */
struct lease_pool {
	struct lease_bucket rpm, tpm;
	int64_t budget_cap, budget_start_ms, budget_room;
	int budget_period;
};

/* What a round gives a node for a key. dry_*: the pool could not cover what it needs
 * (req: 1 unit, tok: need_tok): ms until its bucket can (rpm, tpm), or 1 until the
 * next sync (slots, budget); 0: not dry. */
struct lease_grant {
	int64_t req, tok, slots, budget;
	int64_t budget_start_ms;           /* the period the budget belongs to */
	int64_t dry_req_ms, dry_tok_ms;
	int dry_slots, dry_budget;
	int64_t lease_slots;               /* the lease's slots: held, or in flight if more */
	int64_t others_slots;              /* the other nodes' (their fallback's free) */
	int64_t pool_budget;               /* the pool's budget room left, >= 0 */
};

/* 1 if the pool's budget is for another period, period kind or has never been
 * seeded: the round must be given the spend so far (spent_seed). */
int lease_budget_stale(const struct lease_pool *p, const struct lease_limits *lim);

/* One key's round under the pool row's lock at the store's now_ms: refills the
 * buckets under the limits, takes back what the node returns, charges what it
 * admitted locally (h->local_*), grants what it asks for as far as the pool has room,
 * slots as far as limit - others_slots (slots of other nodes' leases, unexpired or in
 * their hold) - the node's own (held, or in flight if more). held is the node's state
 * before ask's returns; spent_seed: the key's spend so far in the period (used if
 * lease_budget_stale). */
void lease_round(struct lease_pool *p, const struct lease_limits *lim, const struct lease_held *h,
                 const struct lease_ask *ask, int64_t others_slots, int64_t spent_seed,
                 int64_t now_ms, struct lease_grant *g);

#endif
