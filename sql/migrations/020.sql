-- Version 20: tag_total_daily, the sums per tag and day across keys (reports of
-- every tag and tag budgets read it), back-filled from tag_daily: a sum of its sums
-- per tag and day, as the writer adds each row to both.
CREATE TABLE tag_total_daily (
	day                   INTEGER NOT NULL,
	tag                   TEXT NOT NULL,
	requests              INTEGER NOT NULL,
	errors                INTEGER NOT NULL,
	streams               INTEGER NOT NULL,
	prompt_tokens         INTEGER NOT NULL,
	completion_tokens     INTEGER NOT NULL,
	cached_tokens         INTEGER NOT NULL,
	cache_creation_tokens INTEGER NOT NULL,
	reasoning_tokens      INTEGER NOT NULL,
	cost_micros           INTEGER NOT NULL,
	unpriced              INTEGER NOT NULL,
	duration_ms_sum       INTEGER NOT NULL,
	lat_le_25 INTEGER NOT NULL,
	lat_le_50 INTEGER NOT NULL,
	lat_le_100 INTEGER NOT NULL,
	lat_le_200 INTEGER NOT NULL,
	lat_le_350 INTEGER NOT NULL,
	lat_le_500 INTEGER NOT NULL,
	lat_le_750 INTEGER NOT NULL,
	lat_le_1000 INTEGER NOT NULL,
	lat_le_1500 INTEGER NOT NULL,
	lat_le_2500 INTEGER NOT NULL,
	lat_le_4000 INTEGER NOT NULL,
	lat_le_6000 INTEGER NOT NULL,
	lat_le_10000 INTEGER NOT NULL,
	lat_le_20000 INTEGER NOT NULL,
	lat_le_60000 INTEGER NOT NULL,
	lat_gt_60000 INTEGER NOT NULL,
	estimated             INTEGER NOT NULL DEFAULT 0,  -- rows with an estimate
	estimated_tokens      INTEGER NOT NULL DEFAULT 0,
	estimated_cost_micros INTEGER NOT NULL DEFAULT 0,
	audio_input_tokens    INTEGER NOT NULL DEFAULT 0,
	audio_output_tokens   INTEGER NOT NULL DEFAULT 0,
	web_search_calls      INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (tag, day)
) WITHOUT ROWID;
INSERT INTO tag_total_daily (day, tag, requests, errors, streams, prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens, cost_micros, unpriced, duration_ms_sum, lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750, lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000, estimated, estimated_tokens, estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls)
  SELECT day, tag, sum(requests), sum(errors), sum(streams), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(reasoning_tokens), sum(cost_micros), sum(unpriced), sum(duration_ms_sum), sum(lat_le_25), sum(lat_le_50), sum(lat_le_100), sum(lat_le_200), sum(lat_le_350), sum(lat_le_500), sum(lat_le_750), sum(lat_le_1000), sum(lat_le_1500), sum(lat_le_2500), sum(lat_le_4000), sum(lat_le_6000), sum(lat_le_10000), sum(lat_le_20000), sum(lat_le_60000), sum(lat_gt_60000), sum(estimated), sum(estimated_tokens), sum(estimated_cost_micros), sum(audio_input_tokens), sum(audio_output_tokens), sum(web_search_calls)
  FROM tag_daily GROUP BY day, tag;
