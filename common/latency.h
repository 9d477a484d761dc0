/* latency: the fixed latency buckets of the usage rollups (usage_hourly, usage_daily:
 * columns lat_le_<bound> and lat_gt_60000, sql/schema.sql) and the percentile estimate
 * queryd draws from them. Pure functions; any thread.
 *
 * The bounds are part of the schema: changing them needs a migration that rebuilds the
 * rollups. */
#ifndef TALLY_LATENCY_H
#define TALLY_LATENCY_H

#include <stdint.h>

#define LATENCY_BUCKETS 16   /* 15 bounds, then everything over the last */

/* Upper bounds in milliseconds of buckets 0..LATENCY_BUCKETS-2, ascending. */
extern const int64_t latency_bounds[LATENCY_BUCKETS - 1];

/* Bucket of a duration in milliseconds: the first whose bound is >= ms (0 for ms <= 0),
 * LATENCY_BUCKETS - 1 beyond the last bound. */
int latency_bucket(int64_t ms);

/* The bucket holding the q-quantile (0 < q <= 1) of the durations counted in counts:
 * all the buckets can say of it (over the previous bound, at most its own; over the
 * last bound for LATENCY_BUCKETS - 1). Returns -1 when counts holds nothing. */
int latency_quantile_bucket(const uint64_t counts[LATENCY_BUCKETS], double q);

/* Estimates the q-quantile (0 < q <= 1) of the durations counted in counts: linear
 * interpolation inside the bucket holding the rank, so the true value lies in the same
 * bucket; a rank in the last bucket gives the last bound. Returns -1 when counts holds
 * nothing. */
double latency_percentile(const uint64_t counts[LATENCY_BUCKETS], double q);

#endif
