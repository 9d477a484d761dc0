/* rollup: the columns the usage rollups sum (usage_hourly, usage_daily, model_hourly,
 * model_daily, key_hourly, key_daily, total_hourly in sql/schema.sql), after their key
 * (the period, then key_id, model and provider as the table has them).
 * The one list of them: the writer builds its upserts from it, queryd checks its
 * summary queries against it at start, and test_rollup checks a fresh database's
 * tables against it. Pure; any thread. */
#ifndef TALLY_ROLLUP_H
#define TALLY_ROLLUP_H

#include <stddef.h>

#include "latency.h"

/* The named sums, in column order; the latency buckets follow them. */
enum rollup_sum {
	ROLLUP_REQUESTS,
	ROLLUP_ERRORS,                 /* outcome other than complete */
	ROLLUP_STREAMS,                /* stream = 1 */
	ROLLUP_PROMPT_TOKENS,
	ROLLUP_COMPLETION_TOKENS,
	ROLLUP_CACHED_TOKENS,
	ROLLUP_CACHE_CREATION_TOKENS,
	ROLLUP_REASONING_TOKENS,
	ROLLUP_COST,                   /* cost_micros */
	ROLLUP_UNPRICED,               /* rows with usage but no price */
	ROLLUP_DURATION,               /* duration_ms_sum */
	ROLLUP_ESTIMATED,              /* rows with an estimate */
	ROLLUP_ESTIMATED_TOKENS,
	ROLLUP_ESTIMATED_COST,         /* estimated_cost_micros */
	ROLLUP_AUDIO_INPUT_TOKENS,
	ROLLUP_AUDIO_OUTPUT_TOKENS,
	ROLLUP_WEB_SEARCH_CALLS,
	ROLLUP_NAMED
};

#define ROLLUP_SUMS (ROLLUP_NAMED + LATENCY_BUCKETS)

/* Column names of the named sums, indexed by enum rollup_sum. */
extern const char *const rollup_names[ROLLUP_NAMED];

/* The name of summed column i (0 .. ROLLUP_SUMS - 1) into buf: a named sum, then
 * lat_le_<bound> for each latency bound and lat_gt_<last bound>. */
void rollup_column(int i, char *buf, size_t len);

#endif
