/* stats: the process-wide counters (see stats.h). Any thread. */
#include "stats.h"

#include <time.h>

struct stats stats;

static const uint64_t stats_bounds[STATS_HIST_NBOUNDS] = STATS_HIST_BOUNDS;

void stats_hist_observe(struct stats_hist *h, uint64_t ns)
{
	int i = 0;

	while (i < STATS_HIST_NBOUNDS && ns > stats_bounds[i])
		i++;
	stats_add(&h->buckets[i], 1);
	stats_add(&h->count, 1);
	stats_add(&h->sum_ns, ns);
}

uint64_t stats_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *stats_error_name(enum stats_error e)
{
	static const char *const names[STATS_ERR_COUNT] = {
		[STATS_ERR_RECORD_PARSE] = "record_parse",
		[STATS_ERR_RECORD_TOO_LONG] = "record_too_long",
		[STATS_ERR_RECORD_UNAUTHENTICATED] = "record_unauthenticated",
		[STATS_ERR_USAGE_PARSE] = "usage_parse",
		[STATS_ERR_WRITE_BUSY] = "write_busy",
		[STATS_ERR_WRITE_FULL] = "write_full",
		[STATS_ERR_WRITE_OTHER] = "write_other",
		[STATS_ERR_WRITE_LOST] = "write_lost",
		[STATS_ERR_JOURNAL] = "journal",
		[STATS_ERR_SPOP] = "spop",
	};

	return (unsigned)e < STATS_ERR_COUNT ? names[e] : "unknown";
}
