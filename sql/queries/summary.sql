-- summary: usage over [:from, :to) grouped by :grp (key, model, provider, hour, day).
-- Whole days [:day_from, :day_to) come from usage_daily, the ragged hours at either end
-- from usage_hourly, so a month reads ~30 rows per key, model and provider, not ~720.
-- For grp = hour the caller binds day_from = day_to = to: all of it from usage_hourly.
-- Columns: key_name (grp = key only), g, then the sums in the order queryd/api.c reads.
WITH r AS (
	SELECT day AS t, key_id, model, provider, requests, errors, streams, prompt_tokens,
	       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
	       cost_micros, unpriced, duration_ms_sum,
	       lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,
	       lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000,
	       lat_le_20000, lat_le_60000, lat_gt_60000
	FROM usage_daily
	WHERE day >= :day_from AND day < :day_to
	UNION ALL
	SELECT hour, key_id, model, provider, requests, errors, streams, prompt_tokens,
	       completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens,
	       cost_micros, unpriced, duration_ms_sum,
	       lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750,
	       lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000,
	       lat_le_20000, lat_le_60000, lat_gt_60000
	FROM usage_hourly
	WHERE (hour >= :from AND hour < :day_from) OR (hour >= :day_to AND hour < :to)
), s AS (
	SELECT CASE :grp WHEN 'key' THEN key_id WHEN 'model' THEN model
	                 WHEN 'provider' THEN provider WHEN 'day' THEN t - t % 86400
	                 ELSE t END AS g,
	       sum(requests) AS requests, sum(errors), sum(streams), sum(prompt_tokens),
	       sum(completion_tokens), sum(cached_tokens), sum(cache_creation_tokens),
	       sum(reasoning_tokens), sum(cost_micros) AS cost_micros, sum(unpriced),
	       sum(duration_ms_sum),
	       sum(lat_le_25), sum(lat_le_50), sum(lat_le_100), sum(lat_le_200), sum(lat_le_350),
	       sum(lat_le_500), sum(lat_le_750), sum(lat_le_1000), sum(lat_le_1500),
	       sum(lat_le_2500), sum(lat_le_4000), sum(lat_le_6000), sum(lat_le_10000),
	       sum(lat_le_20000), sum(lat_le_60000), sum(lat_gt_60000)
	FROM r
	WHERE (:key_id IS NULL OR key_id = :key_id) AND (:model IS NULL OR model = :model)
	GROUP BY g
)
SELECT k.name AS key_name, s.*
FROM s LEFT JOIN keys k ON :grp = 'key' AND k.id = s.g
ORDER BY CASE WHEN :grp IN ('hour', 'day') THEN s.g END, s.cost_micros DESC, s.requests DESC, s.g;
