/* worker: an agent I/O thread. It owns one libev loop, the SPOP connections the main
 * thread hands it, and a reference to the current keytable snapshot. Other threads talk
 * to it only through its inbox (a locked list) plus an ev_async wake-up. */
#ifndef TALLY_WORKER_H
#define TALLY_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "keytable-t.h"

struct worker;

/* Totals over the worker's closed and open connections, read after it stopped. */
struct worker_totals {
	uint64_t connections;
	uint64_t notifies;
	uint64_t bad_messages;
	uint64_t skipped_frames;
	uint64_t verdicts[DECISION_VERDICT_COUNT];
};

/* Creates and starts the thread. kt: a reference the worker now owns. */
struct worker *worker_start(int id, uint32_t max_frame_size, struct keytable *kt,
                            char *err, size_t errlen);

/* Hands an accepted socket to the worker, which closes it when done. -1 if the worker
 * is stopping (the caller then closes fd). Any thread. */
int worker_post_conn(struct worker *w, int fd);

/* Hands a new snapshot reference to the worker; it drops its old one. Any thread. */
void worker_post_keytable(struct worker *w, struct keytable *kt);

/* Asks the worker to close its connections and end its loop, waits for the thread,
 * copies its totals to *totals (may be NULL) and frees it. */
void worker_stop(struct worker *w, struct worker_totals *totals);

#endif
