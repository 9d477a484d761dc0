/* share: the share thread of limits shared across nodes (PostgreSQL only). Every
 * interval, or at once when a decision asks (quota.h), one transaction on its own
 * connection leases this node's grants from the keys' pools in limit_pool, takes back
 * what it does not use, renews its leases in limit_lease, and learns how many nodes
 * share the store; when the store is lost for ttl_ms it turns quota to its fallback
 * share. The main thread starts and stops it; metrics reads share_stats. */
#ifndef TALLY_SHARE_H
#define TALLY_SHARE_H

#include <stddef.h>
#include <stdint.h>

struct quota;

struct share_config {
	const char *db_path;          /* a postgresql:// URL */
	const char *node;
	struct quota *quota;
	int64_t interval_ms;          /* --lease-interval-ms */
	int64_t ttl_ms;               /* --lease-ttl-ms */
	int64_t hold_ms;              /* --lease-hold-ms */
};

struct share_stats {
	uint64_t syncs, failures;     /* rounds committed, rounds failed */
	uint64_t sync_us_sum;         /* their durations, summed */
	int64_t last_sync_us;
	uint64_t waits, wait_timeouts;  /* decisions that waited for a round; in vain */
	int64_t fallback_nodes;       /* > 0: the store is lost, limits are counted locally */
	int64_t nodes;                /* nodes holding leases at the last sync */
};

/* Opens its connection, hands this node's previous leases with slots over to a
 * node/restarted-MS name (their streams may still run), and starts the thread (quota
 * must be in shared mode); NULL with err set. */
struct share *share_start(const struct share_config *c, char *err, size_t errlen);
/* Stops and frees it (NULL: no-op). Grants held are left to expire at the store. */
void share_stop(struct share *s);
/* Any thread. */
void share_stats(struct share *s, struct share_stats *out);

#endif
