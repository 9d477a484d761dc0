/* statsnap: copies counters and live figures (see statsnap.h). Main thread. */
#include "statsnap.h"

#include <string.h>

static void statsnap_hist(struct statsnap_hist *out, struct stats_hist *h)
{
	int i;

	out->count = 0;
	for (i = 0; i <= STATS_HIST_NBOUNDS; i++) {
		out->buckets[i] = stats_get(&h->buckets[i]);
		out->count += out->buckets[i];
	}
	out->sum_ns = stats_get(&h->sum_ns);
}

static void statsnap_array(uint64_t *out, atomic_uint_fast64_t *in, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		out[i] = stats_get(&in[i]);
}

void statsnap_take(struct statsnap *out, struct stats *st, const struct live_view *live)
{
	memset(out, 0, sizeof(*out));
	out->acct = counters_now();
	out->records_tcp = stats_get(&st->records_tcp);
	out->records_udp = stats_get(&st->records_udp);
	out->records_backlog = stats_get(&st->records_backlog);
	out->batches = stats_get(&st->batches);
	out->writer_committed_ms = atomic_load_explicit(&st->writer_committed_ms,
	                                                memory_order_relaxed);
	out->spilled_rows = atomic_load_explicit(&st->spilled_rows, memory_order_relaxed);
	out->spill_head_ms = atomic_load_explicit(&st->spill_head_ms, memory_order_relaxed);
	out->long_bodies_whole = stats_get(&st->long_bodies_whole);
	out->long_bodies_refused = stats_get(&st->long_bodies_refused);
	out->model_mismatches = stats_get(&st->model_mismatches);
	out->spop_connections = stats_get(&st->spop_connections);
	out->spop_connections_open = atomic_load_explicit(&st->spop_connections_open,
	                                                  memory_order_relaxed);
	out->spop_frames_in = stats_get(&st->spop_frames_in);
	out->spop_frames_out = stats_get(&st->spop_frames_out);
	statsnap_array(out->verdicts, st->verdicts, DECISION_VERDICT_COUNT);
	statsnap_array(out->outcomes, st->outcomes, ACCT_OUTCOME_COUNT);
	statsnap_array(out->errors, st->errors, STATS_ERR_COUNT);
	statsnap_hist(&out->decision_latency, &st->decision_latency);
	statsnap_hist(&out->batch_latency, &st->batch_latency);
	out->queue_depth = live->queue_depth(live->arg);
	out->queue_capacity = live->queue_capacity(live->arg);
	out->inflight = live->inflight(live->arg);
	out->stored_responses = live->stored_responses(live->arg);
}
