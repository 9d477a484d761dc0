-- summary: the rollup rows of [:from, :to) per key and model, for a key filter or
-- group=key with a model filter, or a key filter with group=model or provider
-- (summary_keys, summary_models and summary_totals serve the rest). Whole days [:day_from, :day_to) come from
-- usage_daily, the ragged hours at either end from usage_hourly, so a month reads ~30
-- rows per key, model and provider, not ~720; for group=hour the caller binds
-- day_from = day_to = to. queryd/api.c groups and sorts the rows itself: SQLite's
-- sum() over 27 columns took twice as long as reading them.
-- Columns: t (period start), key_id, model, provider, then the summed columns of
-- common/rollup.h in its order (queryd checks them at start).
-- CAST(:x AS T) IS NULL: PostgreSQL types a parameter by its first use.
SELECT day AS t, key_id, model, provider, requests, errors, streams, prompt_tokens,
       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
       cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls,
       lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,
       lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000,
       lat_le_20000, lat_le_60000, lat_gt_60000
FROM usage_daily
WHERE day >= :day_from AND day < :day_to
  AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id) AND (CAST(:model AS TEXT) IS NULL OR model = :model)
UNION ALL
SELECT hour, key_id, model, provider, requests, errors, streams, prompt_tokens,
       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
       cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls,
       lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,
       lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000,
       lat_le_20000, lat_le_60000, lat_gt_60000
FROM usage_hourly
WHERE ((hour >= :from AND hour < :day_from) OR (hour >= :day_to AND hour < :to))
  AND (CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id) AND (CAST(:model AS TEXT) IS NULL OR model = :model);
