-- summary_tags: summary's groups from the tag rollups, by day only (params.c widens
-- the range to whole UTC days, [:day_from, :day_to), and refuses a team, end user,
-- model, provider or hour), for group=tag and a tag filter (:tag, one tag matched
-- whole; :key_id, a key's). A request with n tags is in n groups: the groups' sums, and
-- so the totals of group=tag, may exceed the range's requests. Summed here, a row per
-- group of the answer: per day (:by_day), per tag across keys (:by_tag: a tag is no
-- key's, its budget spans them all), else per key; the first :limit of them by cost,
-- then requests, descending, then tag and key (for group=day queryd binds the count of
-- days: all of them), then the row of part 'total', every group's sums.
-- Where the key matters (:per_key 1: a key filter or group=key) the rows are
-- tag_daily's, a row per tag, day and key; else tag_total_daily's, a row per tag and
-- day, which holds the same sums across keys in as many rows as tags times days (a
-- month of 1 000 tags: 30 000 rows, not tag_daily's 1.6M of 10M requests). A tag's rows
-- in the range are one range of either's primary key (tag, day[, key_id]); without a
-- tag filter every row of the table is read (no index leads with the day).
-- Of each table the tag filter is the first branch (tag = NULL matches nothing, so it
-- reads nothing without one); the second reads every tag's rows only without one; a
-- branch whose :per_key does not match reads nothing.
-- Same columns as summary: t, key_id, the tag in model's place and the part of the
-- answer in provider's (NULL: a group).
-- CAST(:x AS T) IS NULL: PostgreSQL types a parameter by its first use.
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
               ORDER BY cost_micros DESC, requests DESC, model, key_id, t
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
