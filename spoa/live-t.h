/* Types of the agent's live view: what metrics.c and control.c read from the modules
 * that own in-flight state (queue, pending table, per-key figures) without knowing
 * them. The callbacks are safe to call from the thread that runs metrics and control
 * (the main thread) while other threads work. */
#ifndef TALLY_LIVE_T_H
#define TALLY_LIVE_T_H

#include <stddef.h>
#include <stdint.h>

/* One key's figures since the agent started. */
struct live_key {
	int64_t key_id;
	int64_t inflight;             /* admitted, row not yet built */
	int64_t requests;             /* rows built for this key */
	int64_t errors;               /* rows whose outcome is not complete */
	int64_t prompt_tokens;
	int64_t completion_tokens;
	int64_t cost_micros;
};

/* One admitted request still waiting for its record. Strings live for the callback. */
struct live_txn {
	const char *request_id;
	int64_t key_id;               /* -1: none */
	const char *model;
	int stream;                   /* 1, 0, -1 unknown */
	int64_t age_ms;
};

struct live_view {
	void *arg;
	size_t (*queue_depth)(void *arg);
	size_t (*queue_capacity)(void *arg);
	size_t (*inflight)(void *arg);
	size_t (*stored_responses)(void *arg);   /* ids whose key is kept (owner.h) */
	/* Calls cb for every key with figures, then returns. */
	void (*keys)(void *arg, void (*cb)(void *cbarg, const struct live_key *k), void *cbarg);
	/* Calls cb for at most max in-flight requests, oldest first not guaranteed. */
	void (*txns)(void *arg, size_t max, void (*cb)(void *cbarg, const struct live_txn *t),
	             void *cbarg);
};

#endif
