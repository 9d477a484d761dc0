-- summary_totals: summary's rows for group=hour without a key or model filter, from
-- total_hourly (a row per hour, ~20 times fewer than model_hourly). Same binding and
-- columns as summary (key_id 0, model and provider NULL); the caller binds day_from =
-- day_to = to, so the range is [:from, :to).
SELECT hour AS t, 0 AS key_id, NULL AS model, NULL AS provider, requests, errors, streams,
       prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens,
       reasoning_tokens, cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls,
       lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,
       lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000,
       lat_le_20000, lat_le_60000, lat_gt_60000
FROM total_hourly
WHERE ((hour >= :from AND hour < :day_from) OR (hour >= :day_to AND hour < :to));
