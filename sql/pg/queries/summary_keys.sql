-- summary_keys on PostgreSQL (sql/queries/summary_keys.sql is the same answer on
-- SQLite): the same rows summed here, per key and, with a key filter, per day or hour.
-- A summary by key reads ~200 rows instead of ~10 000 (30 days on the 10M benchmark):
-- PostgreSQL's text form of each value and libpq's parse of it cost more than the sum.
-- Without a key filter the statement serves only group=key, which needs no time (t is
-- 0); with one, a key's days and hours are few. The sums are NUMERIC, read as integers.
-- The days [:day_from, :day_to) may stick out of [:from, :to) by a ragged end's day
-- (queryd/plan.c): their hours outside the range are subtracted, negated before the sum
-- so that one aggregate does it (one per branch cost the 30-day summary ~20% more).
-- The branches carry no model or provider: two constant columns fewer a row, ~5%.
-- The table's file changes when it is rewritten whole (pg_restore --clean, TRUNCATE,
-- VACUUM FULL): a restore under a running queryd is seen even when the rows that came
-- after it matched the kept count and sum. SQLite's file is 0 (restored only with
-- queryd stopped, docs/operations.md).
-- The days [:day_from, :cache_to) are those queryd keeps (queryd/daycache.h): their
-- rows come as part 'days', and only when the fingerprint of their key_daily rows in
-- this statement's snapshot (count, sum of requests and the table's file, the row of
-- part 'fingerprint': count as t, sum as key_id, file as requests) differs from
-- :fp_rows, :fp_requests, :fp_file, the kept one's; else the scan of key_daily starts
-- at :cache_to and reads none of them.
WITH fp AS (
  SELECT count(*) AS n, coalesce(sum(requests), 0) AS r,
         CAST(pg_relation_filenode('key_daily') AS BIGINT) AS f
  FROM key_daily
  WHERE day >= :day_from AND day < :cache_to
    AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id)
)
SELECT CASE WHEN CAST(:key_id AS BIGINT) IS NULL THEN 0 ELSE t END AS t, key_id, part,
       NULL AS provider, sum(requests) AS requests, sum(errors) AS errors,
       sum(streams) AS streams, sum(prompt_tokens) AS prompt_tokens,
       sum(completion_tokens) AS completion_tokens, sum(cached_tokens) AS cached_tokens,
       sum(cache_creation_tokens) AS cache_creation_tokens,
       sum(reasoning_tokens) AS reasoning_tokens, sum(cost_micros) AS cost_micros,
       sum(unpriced) AS unpriced, sum(duration_ms_sum) AS duration_ms_sum,
       sum(estimated) AS estimated, sum(estimated_tokens) AS estimated_tokens,
       sum(estimated_cost_micros) AS estimated_cost_micros,
       sum(audio_input_tokens) AS audio_input_tokens,
       sum(audio_output_tokens) AS audio_output_tokens,
       sum(web_search_calls) AS web_search_calls, sum(lat_le_25) AS lat_le_25,
       sum(lat_le_50) AS lat_le_50, sum(lat_le_100) AS lat_le_100,
       sum(lat_le_200) AS lat_le_200, sum(lat_le_350) AS lat_le_350,
       sum(lat_le_500) AS lat_le_500, sum(lat_le_750) AS lat_le_750,
       sum(lat_le_1000) AS lat_le_1000, sum(lat_le_1500) AS lat_le_1500,
       sum(lat_le_2500) AS lat_le_2500, sum(lat_le_4000) AS lat_le_4000,
       sum(lat_le_6000) AS lat_le_6000, sum(lat_le_10000) AS lat_le_10000,
       sum(lat_le_20000) AS lat_le_20000, sum(lat_le_60000) AS lat_le_60000,
       sum(lat_gt_60000) AS lat_gt_60000
FROM (
  SELECT CASE WHEN day < :cache_to THEN 'days' END AS part, day AS t, key_id, requests,
         errors, streams, prompt_tokens, completion_tokens, cached_tokens,
         cache_creation_tokens, reasoning_tokens, cost_micros, unpriced, duration_ms_sum,
         estimated, estimated_tokens, estimated_cost_micros, audio_input_tokens,
         audio_output_tokens, web_search_calls, lat_le_25, lat_le_50, lat_le_100,
         lat_le_200, lat_le_350, lat_le_500, lat_le_750, lat_le_1000, lat_le_1500,
         lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000,
         lat_gt_60000
  FROM key_daily
  WHERE day >= (SELECT CASE WHEN n = :fp_rows AND r = :fp_requests AND f = :fp_file
                            THEN :cache_to ELSE :day_from END FROM fp)
    AND day < :day_to AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id)
  UNION ALL
  SELECT NULL, hour, key_id, requests, errors, streams, prompt_tokens, completion_tokens,
         cached_tokens, cache_creation_tokens, reasoning_tokens, cost_micros, unpriced,
         duration_ms_sum, estimated, estimated_tokens, estimated_cost_micros,
         audio_input_tokens, audio_output_tokens, web_search_calls, lat_le_25, lat_le_50,
         lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750, lat_le_1000,
         lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000, lat_le_20000,
         lat_le_60000, lat_gt_60000
  FROM key_hourly
  WHERE ((hour >= :from AND hour < :day_from) OR (hour >= :day_to AND hour < :to))
    AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id)
  UNION ALL
  SELECT NULL, hour, key_id, -requests, -errors, -streams, -prompt_tokens,
         -completion_tokens, -cached_tokens, -cache_creation_tokens, -reasoning_tokens,
         -cost_micros, -unpriced, -duration_ms_sum, -estimated, -estimated_tokens,
         -estimated_cost_micros, -audio_input_tokens, -audio_output_tokens,
         -web_search_calls, -lat_le_25, -lat_le_50, -lat_le_100, -lat_le_200, -lat_le_350,
         -lat_le_500, -lat_le_750, -lat_le_1000, -lat_le_1500, -lat_le_2500, -lat_le_4000,
         -lat_le_6000, -lat_le_10000, -lat_le_20000, -lat_le_60000, -lat_gt_60000
  FROM key_hourly
  WHERE ((hour >= :day_from AND hour < :from) OR (hour >= :to AND hour < :day_to))
    AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id)
) r
GROUP BY 1, key_id, part
UNION ALL
SELECT n, r, 'fingerprint', NULL, f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
FROM fp;
