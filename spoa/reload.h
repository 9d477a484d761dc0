/* reload: the thread that watches the store's configuration generation (meta
 * config_generation, one indexed read per interval) and, when it moves, builds a new
 * keytable snapshot, seeds budgets from it (spend.h) and hands it to the I/O threads
 * and the intake; and reads the teams' spend for the metrics (teamspend.h). A thread of its own, so that a slow or unreachable store (PostgreSQL
 * across a network) stalls neither the main loop (accepts, metrics, control socket)
 * nor any decision: the I/O threads keep deciding on the snapshot they hold.
 *
 * A poll or load that fails keeps the last snapshot, logged once until one succeeds
 * again (then logged once more). A key revoked on any node stops working on this one
 * within an interval of the store being readable. */
#ifndef TALLY_RELOAD_H
#define TALLY_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include "keyhash.h"

struct db;
struct intake;
struct keytable;
struct quota;
struct reload;
struct teamspend;
struct worker;

struct reload_target {
	struct db *db;                   /* used by the thread alone until reload_stop */
	const unsigned char *secret;     /* KEYHASH_SECRET_LEN bytes, kept by the caller */
	struct quota *quota;
	struct worker *const *workers;   /* kept by the caller */
	int nworkers;
	struct intake *intake;
	struct keytable *kt;             /* that snapshot: one reference, now the thread's
	                                  * (released by reload_stop, or by reload_start
	                                  * when it fails) */
	int64_t generation;              /* of kt */
	int interval_ms;
	struct teamspend *teams;         /* refreshed (teamspend.h); NULL: none */
};

/* Starts the thread. NULL with a message in err. */
struct reload *reload_start(const struct reload_target *t, char *err, size_t errlen);

/* Stops and joins the thread (a load in progress ends first); NULL is a no-op. */
void reload_stop(struct reload *r);

#endif
