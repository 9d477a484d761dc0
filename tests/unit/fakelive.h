/* A live view with fixed figures, for the metrics and control tests: queue 7 of 4096,
 * 3 in flight, two keys, and fakelive_ntxns generated in-flight requests. Called on
 * the module's loop thread. Header-only so that each test binary stays one file. */
#ifndef TALLY_TEST_FAKELIVE_H
#define TALLY_TEST_FAKELIVE_H

#include <stdatomic.h>
#include <stdio.h>

#include "live-t.h"

#define FAKELIVE_DEPTH    7
#define FAKELIVE_CAPACITY 4096
#define FAKELIVE_INFLIGHT 3

static atomic_size_t fakelive_ntxns = 3;

static const struct live_key fakelive_keys_[] = {
	{ .key_id = 1, .inflight = 2, .requests = 30, .errors = 4, .prompt_tokens = 500,
	  .completion_tokens = 600, .cost_micros = 7000 },
	{ .key_id = 9, .inflight = 0, .requests = 1, .errors = 0, .prompt_tokens = 10,
	  .completion_tokens = 20, .cost_micros = -1 },
};

static size_t fakelive_depth(void *arg)
{
	(void)arg;
	return FAKELIVE_DEPTH;
}

static size_t fakelive_capacity(void *arg)
{
	(void)arg;
	return FAKELIVE_CAPACITY;
}

static size_t fakelive_inflight(void *arg)
{
	(void)arg;
	return FAKELIVE_INFLIGHT;
}

static void fakelive_keys(void *arg, void (*cb)(void *cbarg, const struct live_key *k),
                          void *cbarg)
{
	(void)arg;
	cb(cbarg, &fakelive_keys_[0]);
	cb(cbarg, &fakelive_keys_[1]);
}

/* Request i: id "req-i", key_id i (or -1 when i % 3 == 0), model "m-i" (NULL when
 * i % 4 == 3), stream i % 3 - 1, age_ms 10 * i. */
static void fakelive_txns(void *arg, size_t max, void (*cb)(void *cbarg, const struct live_txn *t),
                          void *cbarg)
{
	size_t i, n = atomic_load(&fakelive_ntxns);

	(void)arg;
	for (i = 0; i < n && i < max; i++) {
		char id[32], model[32];
		struct live_txn t = {
			.request_id = id,
			.key_id = i % 3 == 0 ? -1 : (int64_t)i,
			.model = i % 4 == 3 ? NULL : model,
			.stream = (int)(i % 3) - 1,
			.age_ms = 10 * (int64_t)i,
		};

		snprintf(id, sizeof(id), "req-%zu", i);
		snprintf(model, sizeof(model), "m-%zu", i);
		cb(cbarg, &t);
	}
}

static size_t fakelive_stored(void *arg)
{
	(void)arg;
	return 9;
}

static const struct live_view fakelive = {
	.queue_depth = fakelive_depth,
	.queue_capacity = fakelive_capacity,
	.inflight = fakelive_inflight,
	.stored_responses = fakelive_stored,
	.keys = fakelive_keys,
	.txns = fakelive_txns,
};

#endif
