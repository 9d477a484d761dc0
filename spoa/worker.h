/* worker: an agent I/O thread. It owns one libev loop, the SPOP connections the main
 * thread hands it, and a reference to the current keytable snapshot. Other threads talk
 * to it only through its inbox (a locked list) plus an ev_async wake-up. */
#ifndef TALLY_WORKER_H
#define TALLY_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "gwsecret.h"
#include "keytable-t.h"

struct worker;
struct pending;
struct keylive;
struct journal;
struct longbody;
struct owner;
struct usageview;

/* Bounds on each SPOP connection of the thread. */
struct worker_conn_cfg {
	uint32_t max_frame_size;      /* largest frame accepted and announced */
	int max_connections;          /* connections that showed the gateway secret; beyond
	                               * this, one that shows it is closed */
	int max_fresh;                /* connections that have not shown it yet; beyond
	                               * this, the oldest is closed for a new one */
	double auth_timeout;          /* seconds for a new connection to show it */
	double idle_timeout;          /* seconds without a byte in either direction */
};

/* Where decided transactions go: borrowed, all of them, until worker_stop returns. */
struct worker_acct {
	struct pending *pending;
	struct keylive *keylive;
	struct journal *journal;      /* NULL: no journal */
	struct quota *quota;          /* NULL: no limits enforced */
	int64_t default_max_tokens;   /* reserved output when a request names no max_tokens */
	const struct gwsecret *secret; /* what HAProxy's NOTIFYs must carry */
	struct longbody *longbody;    /* NULL: long bodies judged on their first frame */
	struct owner *owners;         /* who made which stored response */
	struct usageview *usage;      /* keys' spend for GET /tally/v1/usage; NULL: 503 */
	const struct decision_policy *policy; /* the agent's defaults (decision.h) */
};

/* Totals over the worker's closed and open connections, read after it stopped. */
struct worker_totals {
	uint64_t connections;
	uint64_t refused;             /* over max_connections */
	uint64_t evicted;             /* fresh ones closed over max_fresh */
	uint64_t timeouts;
	uint64_t notifies;
	uint64_t bad_messages;
	uint64_t skipped_frames;
	uint64_t verdicts[DECISION_VERDICT_COUNT];
};

/* Creates and starts the thread (main thread). kt: a reference the worker now owns. */
struct worker *worker_start(int id, const struct worker_conn_cfg *conn,
                            const struct worker_acct *acct, struct keytable *kt,
                            char *err, size_t errlen);

/* Hands an accepted socket to the worker, which closes it when done. -1 if the worker
 * is stopping (the caller then closes fd). Any thread, until worker_stop is called. */
int worker_post_conn(struct worker *w, int fd);

/* Hands a new snapshot reference to the worker; it drops its old one. Any thread,
 * until worker_stop is called. */
void worker_post_keytable(struct worker *w, struct keytable *kt);

/* Asks the worker to close its connections and end its loop, waits for the thread,
 * copies its totals to *totals (may be NULL) and frees it (main thread). */
void worker_stop(struct worker *w, struct worker_totals *totals);

#endif
