"""The latency buckets of every rollup (common/rollup.h's bounds, as sql/schema.sql
names them lat_le_B and lat_gt_60000), for the suites that check queryd's latency
figures against the rows they seeded (test_queryd.py, test_dashboard.py)."""
LATENCY_BOUNDS = [25, 50, 100, 200, 350, 500, 750, 1000, 1500, 2500, 4000, 6000, 10000,
                  20000, 60000]
