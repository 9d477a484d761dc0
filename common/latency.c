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

/* The rank of the q-quantile, 1-based, as in the nearest-rank definition; 0: none. */
static double latency_rank(const uint64_t counts[LATENCY_BUCKETS], double q)
{
	uint64_t total = 0;
	double rank;
	int i;

	for (i = 0; i < LATENCY_BUCKETS; i++)
		total += counts[i];
	if (!total)
		return 0;
	rank = q * (double)total;
	return rank < 1 ? 1 : rank;
}

int latency_quantile_bucket(const uint64_t counts[LATENCY_BUCKETS], double q)
{
	uint64_t below = 0;
	double rank = latency_rank(counts, q);
	int i;

	if (rank == 0)
		return -1;
	for (i = 0; i < LATENCY_BUCKETS - 1; i++) {
		if (counts[i] && (double)(below + counts[i]) >= rank)
			return i;
		below += counts[i];
	}
	return LATENCY_BUCKETS - 1;
}

double latency_percentile(const uint64_t counts[LATENCY_BUCKETS], double q)
{
	uint64_t below = 0;
	double lo;
	int i, b = latency_quantile_bucket(counts, q);

	if (b < 0)
		return -1;
	if (b == LATENCY_BUCKETS - 1)
		return (double)latency_bounds[LATENCY_BUCKETS - 2];
	for (i = 0; i < b; i++)
		below += counts[i];
	lo = b ? (double)latency_bounds[b - 1] : 0;
	return lo + ((double)latency_bounds[b] - lo) * (latency_rank(counts, q) - (double)below) /
	       (double)counts[b];
}
