/* Unit tests of latency: the bucket of a duration, and the quantiles' bucket and
 * estimate drawn from the rollups' counts. */
#include <stdint.h>
#include <string.h>

#include "latency.h"
#include "unit.h"

static void test_bucket(void)
{
	CHECK_EQ_INT(latency_bucket(0), 0);
	CHECK_EQ_INT(latency_bucket(25), 0);
	CHECK_EQ_INT(latency_bucket(26), 1);
	CHECK_EQ_INT(latency_bucket(60000), LATENCY_BUCKETS - 2);
	CHECK_EQ_INT(latency_bucket(60001), LATENCY_BUCKETS - 1);
}

/* Requests of 1 to 6 ms all land in the first bucket: their median is "at most 25 ms",
 * which the estimate (12.5 ms by interpolation) cannot say better. */
static void test_quantile_bucket(void)
{
	uint64_t c[LATENCY_BUCKETS];

	memset(c, 0, sizeof(c));
	CHECK_EQ_INT(latency_quantile_bucket(c, 0.5), -1);
	CHECK(latency_percentile(c, 0.5) < 0);
	c[0] = 10;
	CHECK_EQ_INT(latency_quantile_bucket(c, 0.5), 0);
	CHECK(latency_percentile(c, 0.5) == 12.5);
	/* 10 fast, 10 between 1000 and 1500 ms, 1 past a minute */
	c[8] = 10;
	c[LATENCY_BUCKETS - 1] = 1;
	CHECK_EQ_INT(latency_quantile_bucket(c, 0.5), 8);
	CHECK(latency_percentile(c, 0.5) > 1000 && latency_percentile(c, 0.5) <= 1500);
	CHECK_EQ_INT(latency_quantile_bucket(c, 0.4), 0);
	CHECK_EQ_INT(latency_quantile_bucket(c, 1.0), LATENCY_BUCKETS - 1);
	CHECK(latency_percentile(c, 1.0) == 60000);
}

int main(void)
{
	RUN(test_bucket);
	RUN(test_quantile_bucket);
	return UNIT_DONE();
}
