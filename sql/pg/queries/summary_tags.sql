-- summary_tags on PostgreSQL (sql/queries/summary_tags.sql is the same answer on
-- SQLite, where its comment says what it reads): only the order differs, tags sorted
-- by byte as SQLite does, whatever the database's collation, so that the first :limit
-- groups are the same on both stores.
WITH g AS MATERIALIZED (
  SELECT CASE WHEN :by_day = 1 THEN day ELSE 0 END AS t,
         CASE WHEN :by_day = 1 OR :by_tag = 1 THEN 0 ELSE key_id END AS key_id,
         CASE WHEN :by_tag = 1 THEN tag END AS model, NULL AS provider,
         sum(requests) AS requests, sum(errors) AS errors, sum(streams) AS streams,
         sum(prompt_tokens) AS prompt_tokens,
         sum(completion_tokens) AS completion_tokens,
         sum(cached_tokens) AS cached_tokens,
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
  FROM (SELECT day, tag, 0 AS key_id,
         requests, errors, streams, prompt_tokens, completion_tokens, cached_tokens,
         cache_creation_tokens, reasoning_tokens, cost_micros, unpriced,
         duration_ms_sum, lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350,
         lat_le_500, lat_le_750, lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000,
         lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000, estimated,
         estimated_tokens, estimated_cost_micros, audio_input_tokens,
         audio_output_tokens, web_search_calls
        FROM tag_total_daily
        WHERE :per_key = 0 AND tag = :tag AND day >= :day_from AND day < :day_to
        UNION ALL
        SELECT day, tag, 0 AS key_id,
         requests, errors, streams, prompt_tokens, completion_tokens, cached_tokens,
         cache_creation_tokens, reasoning_tokens, cost_micros, unpriced,
         duration_ms_sum, lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350,
         lat_le_500, lat_le_750, lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000,
         lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000, estimated,
         estimated_tokens, estimated_cost_micros, audio_input_tokens,
         audio_output_tokens, web_search_calls
        FROM tag_total_daily
        WHERE :per_key = 0 AND CAST(:tag AS TEXT) IS NULL AND day >= :day_from
          AND day < :day_to
        UNION ALL
        SELECT * FROM tag_daily
        WHERE :per_key = 1 AND tag = :tag AND day >= :day_from AND day < :day_to
        UNION ALL
        SELECT * FROM tag_daily
        WHERE :per_key = 1 AND CAST(:tag AS TEXT) IS NULL AND day >= :day_from
          AND day < :day_to) r
  WHERE CAST(:key_id AS BIGINT) IS NULL OR key_id = :key_id
  GROUP BY 1, 2, 3
)
SELECT * FROM (SELECT * FROM g
               ORDER BY cost_micros DESC, requests DESC, model COLLATE "C", key_id, t
               LIMIT :limit) l
UNION ALL
SELECT 0, 0, NULL, 'total',
       sum(requests), sum(errors), sum(streams), sum(prompt_tokens),
       sum(completion_tokens), sum(cached_tokens), sum(cache_creation_tokens),
       sum(reasoning_tokens), sum(cost_micros), sum(unpriced), sum(duration_ms_sum),
       sum(estimated), sum(estimated_tokens), sum(estimated_cost_micros),
       sum(audio_input_tokens), sum(audio_output_tokens), sum(web_search_calls),
       sum(lat_le_25), sum(lat_le_50), sum(lat_le_100), sum(lat_le_200), sum(lat_le_350),
       sum(lat_le_500), sum(lat_le_750), sum(lat_le_1000), sum(lat_le_1500),
       sum(lat_le_2500), sum(lat_le_4000), sum(lat_le_6000), sum(lat_le_10000),
       sum(lat_le_20000), sum(lat_le_60000), sum(lat_gt_60000)
FROM g;
