/* statsnap: a plain copy of the process counters (stats.h) and the live figures
 * (live-t.h) at one moment, so that metrics and control format numbers that agree with
 * one another. Main thread (it calls the live view's callbacks). */
#ifndef TALLY_STATSNAP_H
#define TALLY_STATSNAP_H

#include <stdint.h>

#include "counters.h"
#include "live-t.h"
#include "stats.h"

struct statsnap_hist {
	uint64_t buckets[STATS_HIST_NBOUNDS + 1];  /* not cumulative; the last is +Inf */
	uint64_t count;                            /* the sum of buckets */
	uint64_t sum_ns;
};

struct statsnap {
	struct counters acct;
	uint64_t records_tcp, records_udp, records_backlog, batches;
	int64_t writer_committed_ms;   /* unix ms of the writer's last commit; 0: none */
	int64_t spilled_rows;          /* rows waiting on disk for the store */
	int64_t spill_head_ms;         /* unix ms the oldest of them was spilled; 0: none */
	uint64_t long_bodies_whole, long_bodies_refused;
	uint64_t model_mismatches;
	uint64_t spop_connections, spop_frames_in, spop_frames_out;
	int64_t spop_connections_open;
	uint64_t verdicts[DECISION_VERDICT_COUNT];
	uint64_t outcomes[ACCT_OUTCOME_COUNT];
	uint64_t errors[STATS_ERR_COUNT];
	struct statsnap_hist decision_latency, batch_latency;
	uint64_t queue_depth, queue_capacity, inflight;   /* from the live view */
	uint64_t stored_responses;
};

/* Copies st and live's figures into out. Each counter is read atomically, the set is
 * not: a histogram's count is taken as the sum of the buckets read, so that it always
 * equals its +Inf bucket. */
void statsnap_take(struct statsnap *out, struct stats *st, const struct live_view *live);

#endif
