/* stats: the agent's process-wide operational counters and latency histograms (the
 * accounting counters are counters.h's). Any thread updates them with relaxed atomics;
 * metrics.c and control.c read them. Counters only grow, except the gauges marked as
 * such. */
#ifndef TALLY_STATS_H
#define TALLY_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "acct-t.h"
#include "decision.h"

/* Upper bounds of the histogram buckets in nanoseconds; the last bucket is +Inf. */
#define STATS_HIST_BOUNDS { 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, \
	500000, 1000000, 2000000, 5000000, 10000000, 20000000, 50000000, 100000000, \
	200000000, 500000000, 1000000000, 2000000000, 5000000000 }
#define STATS_HIST_NBOUNDS 21

struct stats_hist {
	atomic_uint_fast64_t buckets[STATS_HIST_NBOUNDS + 1];  /* not cumulative */
	atomic_uint_fast64_t count;
	atomic_uint_fast64_t sum_ns;
};

/* Errors by kind, for metrics ("errors_total{kind=...}"). */
enum stats_error {
	STATS_ERR_RECORD_PARSE = 0,  /* a log record that could not be read */
	STATS_ERR_RECORD_TOO_LONG,   /* a syslog frame over the size limit */
	STATS_ERR_RECORD_UNAUTHENTICATED, /* a record without the gateway secret */
	STATS_ERR_USAGE_PARSE,       /* a captured body whose usage could not be read */
	STATS_ERR_WRITE_BUSY,        /* writer found the database locked (retried) */
	STATS_ERR_WRITE_FULL,        /* writer found the disk or database full (retried) */
	STATS_ERR_WRITE_OTHER,       /* any other store error in the writer (retried) */
	STATS_ERR_WRITE_LOST,        /* writer lost its PostgreSQL connection (retried) */
	STATS_ERR_JOURNAL,           /* the journal could not be written or read */
	STATS_ERR_SPOP,              /* SPOP protocol errors (connection closed) */
	STATS_ERR_COUNT
};

struct stats {
	/* The accounting counters live in counters.h. */
	atomic_uint_fast64_t records_tcp; /* log records read from the ring connection */
	atomic_uint_fast64_t records_udp; /* log records read from the UDP copy */
	atomic_uint_fast64_t records_backlog; /* taken from the ring over HAProxy's CLI */
	atomic_uint_fast64_t batches;     /* writer transactions committed */
	/* Gauge: unix ms of the writer's last commit, 0 before the first. With the queue's
	 * depth it says how far behind the writer is: rows waiting and no commit for long
	 * means the store is failing. */
	atomic_int_fast64_t writer_committed_ms;
	/* Gauges of the spill (spill.h): rows waiting on disk for the store, and when the
	 * oldest of them was spilled (unix ms; 0: none), the writer's lag. */
	atomic_int_fast64_t spilled_rows;
	atomic_int_fast64_t spill_head_ms;
	/* Long request bodies (HAProxy 3.4+, longbody.h): judged whole from their pieces,
	 * and pieces refused (the body is then judged on its first frame). */
	atomic_uint_fast64_t long_bodies_whole;
	atomic_uint_fast64_t long_bodies_refused;
	/* Rows whose answer named a model other than the one routed to (join.h): priced
	 * by the routed one, the name kept in model_reported. */
	atomic_uint_fast64_t model_mismatches;
	/* SPOP */
	atomic_uint_fast64_t spop_connections;       /* accepted, total */
	atomic_int_fast64_t spop_connections_open;   /* gauge */
	atomic_uint_fast64_t spop_frames_in;
	atomic_uint_fast64_t spop_frames_out;
	atomic_uint_fast64_t verdicts[DECISION_VERDICT_COUNT];
	atomic_uint_fast64_t outcomes[ACCT_OUTCOME_COUNT];  /* rows queued, by outcome */
	atomic_uint_fast64_t errors[STATS_ERR_COUNT];
	struct stats_hist decision_latency;
	struct stats_hist batch_latency;   /* one writer transaction, BEGIN to COMMIT */
};

/* The process's counters: zero at start, never freed. */
extern struct stats stats;

static inline void stats_add(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline uint64_t stats_get(atomic_uint_fast64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* Adds one observation of ns nanoseconds to h. Any thread. */
void stats_hist_observe(struct stats_hist *h, uint64_t ns);

/* Monotonic clock in nanoseconds, for latencies. */
uint64_t stats_now_ns(void);

/* Names for metrics and the control socket, stable: "record_parse", ... */
const char *stats_error_name(enum stats_error e);

#endif
