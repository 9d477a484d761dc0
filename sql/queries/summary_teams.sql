-- summary_teams: summary's rows from the team rollups (team_daily, team_hourly: a row
-- per team with traffic in the day or hour), for group=team and a team filter (params.c
-- lets neither meet a key, model or provider filter, nor group=key, model or provider).
-- Same binding and columns as summary, the team's id in key_id's place, the model's
-- column naming the part of the answer a row is: NULL a team's, 'total' every row's
-- (the totals, read only without a team filter, from model_daily and total_hourly).
-- Rows without a team are in no team rollup (the writer's rule): queryd's group 0,
-- "no team", is the totals less every team's sums.
-- The days [:day_from, :day_to) may stick out of [:from, :to) by a ragged end's day
-- (queryd/plan.c, as summary_keys): their hours outside the range come negated, for
-- queryd's sum.
-- CAST(:x AS T) IS NULL: PostgreSQL types a parameter by its first use.
SELECT day AS t, team_id AS key_id, NULL AS model, NULL AS provider, requests, errors,
       streams, prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens,
       reasoning_tokens, cost_micros, unpriced, duration_ms_sum, estimated,
       estimated_tokens, estimated_cost_micros, audio_input_tokens,
       audio_output_tokens, web_search_calls, lat_le_25, lat_le_50, lat_le_100,
       lat_le_200, lat_le_350, lat_le_500, lat_le_750, lat_le_1000, lat_le_1500,
       lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000,
       lat_gt_60000
FROM team_daily
WHERE day >= :day_from AND day < :day_to
  AND (CAST(:team_id AS BIGINT) IS NULL OR team_id = :team_id)
UNION ALL
SELECT hour, team_id, NULL, NULL, requests, errors, streams, prompt_tokens,
       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
       cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens,
       web_search_calls, lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350,
       lat_le_500, lat_le_750, lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000,
       lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000
FROM team_hourly
WHERE ((hour >= :from AND hour < :day_from) OR (hour >= :day_to AND hour < :to))
  AND (CAST(:team_id AS BIGINT) IS NULL OR team_id = :team_id)
UNION ALL
SELECT hour, team_id, NULL, NULL, -requests, -errors, -streams, -prompt_tokens,
       -completion_tokens, -cached_tokens, -cache_creation_tokens, -reasoning_tokens,
       -cost_micros, -unpriced, -duration_ms_sum, -estimated, -estimated_tokens,
       -estimated_cost_micros, -audio_input_tokens, -audio_output_tokens,
       -web_search_calls, -lat_le_25, -lat_le_50, -lat_le_100, -lat_le_200,
       -lat_le_350, -lat_le_500, -lat_le_750, -lat_le_1000, -lat_le_1500, -lat_le_2500,
       -lat_le_4000, -lat_le_6000, -lat_le_10000, -lat_le_20000, -lat_le_60000,
       -lat_gt_60000
FROM team_hourly
WHERE ((hour >= :day_from AND hour < :from) OR (hour >= :to AND hour < :day_to))
  AND (CAST(:team_id AS BIGINT) IS NULL OR team_id = :team_id)
UNION ALL
SELECT day, 0, 'total', NULL, requests, errors, streams, prompt_tokens,
       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
       cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens,
       web_search_calls, lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350,
       lat_le_500, lat_le_750, lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000,
       lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000
FROM model_daily
WHERE day >= :day_from AND day < :day_to
  AND CAST(:team_id AS BIGINT) IS NULL
UNION ALL
SELECT hour, 0, 'total', NULL, requests, errors, streams, prompt_tokens,
       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
       cost_micros, unpriced, duration_ms_sum, estimated, estimated_tokens,
       estimated_cost_micros, audio_input_tokens, audio_output_tokens,
       web_search_calls, lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350,
       lat_le_500, lat_le_750, lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000,
       lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000
FROM total_hourly
WHERE ((hour >= :from AND hour < :day_from) OR (hour >= :day_to AND hour < :to))
  AND CAST(:team_id AS BIGINT) IS NULL
UNION ALL
SELECT hour, 0, 'total', NULL, -requests, -errors, -streams, -prompt_tokens,
       -completion_tokens, -cached_tokens, -cache_creation_tokens, -reasoning_tokens,
       -cost_micros, -unpriced, -duration_ms_sum, -estimated, -estimated_tokens,
       -estimated_cost_micros, -audio_input_tokens, -audio_output_tokens,
       -web_search_calls, -lat_le_25, -lat_le_50, -lat_le_100, -lat_le_200,
       -lat_le_350, -lat_le_500, -lat_le_750, -lat_le_1000, -lat_le_1500, -lat_le_2500,
       -lat_le_4000, -lat_le_6000, -lat_le_10000, -lat_le_20000, -lat_le_60000,
       -lat_gt_60000
FROM total_hourly
WHERE ((hour >= :day_from AND hour < :from) OR (hour >= :to AND hour < :day_to))
  AND CAST(:team_id AS BIGINT) IS NULL;
