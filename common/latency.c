/* latency: rollup latency buckets and percentile estimates (see latency.h). */
#include "latency.h"

const int64_t latency_bounds[LATENCY_BUCKETS - 1] = {
	25, 50, 100, 200, 350, 500, 750, 1000, 1500, 2500, 4000, 6000, 10000, 20000, 60000,
};

int latency_bucket(int64_t ms)
{
	int i;

	for (i = 0; i < LATENCY_BUCKETS - 1; i++)
		if (ms <= latency_bounds[i])
			return i;
	return LATENCY_BUCKETS - 1;
}

double latency_percentile(const uint64_t counts[LATENCY_BUCKETS], double q)
{
	uint64_t total = 0, below = 0;
	double rank, lo;
	int i;

	for (i = 0; i < LATENCY_BUCKETS; i++)
		total += counts[i];
	if (!total)
		return -1;
	/* The rank-th smallest value, 1-based, as in the nearest-rank definition. */
	rank = q * (double)total;
	if (rank < 1)
		rank = 1;
	for (i = 0; i < LATENCY_BUCKETS - 1; i++) {
		if (counts[i] && (double)(below + counts[i]) >= rank) {
			lo = i ? (double)latency_bounds[i - 1] : 0;
			return lo + ((double)latency_bounds[i] - lo) * (rank - (double)below) /
			       (double)counts[i];
		}
		below += counts[i];
	}
	return (double)latency_bounds[LATENCY_BUCKETS - 2];
}
