-- summary_keys: summary's rows from the rollups without models (key_daily, key_hourly:
-- a row per key, not per key and model, ~4 times fewer on the 10M benchmark), for
-- group=key, or a key filter with group=day or hour, without a model filter. Same
-- binding and columns as summary but the model's, which names the part of the answer
-- a row is (NULL: the rest), and the provider always NULL.
-- CAST(:x AS T) IS NULL: PostgreSQL types a parameter by its first use. The days
-- [:day_from, :day_to) may stick out of [:from, :to) by a ragged end's day
-- (queryd/plan.c): their hours outside the range come negated, for queryd's sum.
-- The days [:day_from, :cache_to) are those queryd keeps (queryd/daycache.h): their
-- rows come as part 'days', and only when the fingerprint of their key_daily rows in
-- this statement's snapshot (count, sum of requests and the table's file, the row of
-- part 'fingerprint': count as t, sum as key_id, file as requests) differs from
-- :fp_rows, :fp_requests, :fp_file, the kept one's; else the scan of key_daily starts
-- at :cache_to and reads none of them.
WITH fp AS (
  SELECT count(*) AS n, coalesce(sum(requests), 0) AS r,
         0 AS f
  FROM key_daily
  WHERE day >= :day_from AND day < :cache_to
    AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id)
)
SELECT n AS t, r AS key_id, 'fingerprint' AS part, NULL AS provider, f AS requests,
       0 AS errors, 0 AS streams, 0 AS prompt_tokens, 0 AS completion_tokens,
       0 AS cached_tokens, 0 AS cache_creation_tokens, 0 AS reasoning_tokens,
       0 AS cost_micros, 0 AS unpriced, 0 AS duration_ms_sum, 0 AS estimated,
       0 AS estimated_tokens, 0 AS estimated_cost_micros, 0 AS audio_input_tokens,
       0 AS audio_output_tokens, 0 AS web_search_calls, 0 AS lat_le_25, 0 AS lat_le_50,
       0 AS lat_le_100, 0 AS lat_le_200, 0 AS lat_le_350, 0 AS lat_le_500,
       0 AS lat_le_750, 0 AS lat_le_1000, 0 AS lat_le_1500, 0 AS lat_le_2500,
       0 AS lat_le_4000, 0 AS lat_le_6000, 0 AS lat_le_10000, 0 AS lat_le_20000,
       0 AS lat_le_60000, 0 AS lat_gt_60000
FROM fp
UNION ALL
SELECT day, key_id, CASE WHEN day < :cache_to THEN 'days' END, NULL, requests, errors,
       streams, prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens,
       reasoning_tokens, cost_micros, unpriced, duration_ms_sum, estimated,
       estimated_tokens, estimated_cost_micros, audio_input_tokens, audio_output_tokens,
       web_search_calls, lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350,
       lat_le_500, lat_le_750, lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000,
       lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000
FROM key_daily
WHERE day >= (SELECT CASE WHEN n = :fp_rows AND r = :fp_requests AND f = :fp_file
                          THEN :cache_to ELSE :day_from END FROM fp)
  AND day < :day_to AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id)
UNION ALL
SELECT hour, key_id, NULL, NULL, requests, errors, streams, prompt_tokens,
       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
       cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls,
       lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,
       lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000,
       lat_le_20000, lat_le_60000, lat_gt_60000
FROM key_hourly
WHERE ((hour >= :from AND hour < :day_from) OR (hour >= :day_to AND hour < :to))
  AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id)
UNION ALL
SELECT hour, key_id, NULL, NULL, -requests, -errors, -streams, -prompt_tokens,
       -completion_tokens, -cached_tokens, -cache_creation_tokens, -reasoning_tokens,
       -cost_micros, -unpriced, -duration_ms_sum, -estimated, -estimated_tokens,
       -estimated_cost_micros, -audio_input_tokens, -audio_output_tokens,
       -web_search_calls, -lat_le_25, -lat_le_50, -lat_le_100, -lat_le_200, -lat_le_350,
       -lat_le_500, -lat_le_750, -lat_le_1000, -lat_le_1500, -lat_le_2500, -lat_le_4000,
       -lat_le_6000, -lat_le_10000, -lat_le_20000, -lat_le_60000, -lat_gt_60000
FROM key_hourly
WHERE ((hour >= :day_from AND hour < :from) OR (hour >= :to AND hour < :day_to))
  AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id);
