-- summary_keys: summary's rows from the rollups without models (key_daily, key_hourly:
-- a row per key, not per key and model, ~4 times fewer on the 10M benchmark), for
-- group=key, or a key filter with group=day or hour, without a model filter. Same
-- binding and columns as summary (model and provider always NULL).
-- CAST(:x AS T) IS NULL: PostgreSQL types a parameter by its first use. The days
-- [:day_from, :day_to) may stick out of [:from, :to) by a ragged end's day
-- (queryd/api.c): their hours outside the range come negated, for queryd's sum.
SELECT day AS t, key_id, NULL AS model, NULL AS provider, requests, errors, streams,
       prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens,
       reasoning_tokens, cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls,
       lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,
       lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000,
       lat_le_20000, lat_le_60000, lat_gt_60000
FROM key_daily
WHERE day >= :day_from AND day < :day_to AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id)
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
       -estimated_cost_micros, -audio_input_tokens, -audio_output_tokens, -web_search_calls,
       -lat_le_25, -lat_le_50, -lat_le_100, -lat_le_200, -lat_le_350, -lat_le_500,
       -lat_le_750, -lat_le_1000, -lat_le_1500, -lat_le_2500, -lat_le_4000, -lat_le_6000,
       -lat_le_10000, -lat_le_20000, -lat_le_60000, -lat_gt_60000
FROM key_hourly
WHERE ((hour >= :day_from AND hour < :from) OR (hour >= :to AND hour < :day_to))
  AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id);
