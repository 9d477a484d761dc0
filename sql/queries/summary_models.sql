-- summary_models: summary's rows from the rollups without keys (model_daily,
-- model_hourly), ~200 times fewer: every summary without a key filter or group=key.
-- Same binding and columns as summary (key_id always 0).
-- CAST(:x AS T) IS NULL: PostgreSQL types a parameter by its first use.
SELECT day AS t, 0 AS key_id, model, provider, requests, errors, streams, prompt_tokens,
       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
       cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls,
       lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,
       lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000,
       lat_le_20000, lat_le_60000, lat_gt_60000
FROM model_daily
WHERE day >= :day_from AND day < :day_to AND (CAST(:model AS TEXT) IS NULL OR model = :model)
UNION ALL
SELECT hour, 0, model, provider, requests, errors, streams, prompt_tokens,
       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
       cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls,
       lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,
       lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000,
       lat_le_20000, lat_le_60000, lat_gt_60000
FROM model_hourly
WHERE ((hour >= :from AND hour < :day_from) OR (hour >= :day_to AND hour < :to))
  AND (CAST(:model AS TEXT) IS NULL OR model = :model);
