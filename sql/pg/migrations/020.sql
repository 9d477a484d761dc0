-- Version 20: tag_total_daily, the sums per tag and day across keys (reports of
-- every tag and tag budgets read it), back-filled from tag_daily: a sum of its sums
-- per tag and day, as the writer adds each row to both.
CREATE TABLE tag_total_daily (
	day                   BIGINT NOT NULL,
	tag                   TEXT NOT NULL,
	requests              BIGINT NOT NULL,
	errors                BIGINT NOT NULL,
	streams               BIGINT NOT NULL,
	prompt_tokens         BIGINT NOT NULL,
	completion_tokens     BIGINT NOT NULL,
	cached_tokens         BIGINT NOT NULL,
	cache_creation_tokens BIGINT NOT NULL,
	reasoning_tokens      BIGINT NOT NULL,
	cost_micros           BIGINT NOT NULL,
	unpriced              BIGINT NOT NULL,
	duration_ms_sum       BIGINT NOT NULL,
	lat_le_25 BIGINT NOT NULL,
	lat_le_50 BIGINT NOT NULL,
	lat_le_100 BIGINT NOT NULL,
	lat_le_200 BIGINT NOT NULL,
	lat_le_350 BIGINT NOT NULL,
	lat_le_500 BIGINT NOT NULL,
	lat_le_750 BIGINT NOT NULL,
	lat_le_1000 BIGINT NOT NULL,
	lat_le_1500 BIGINT NOT NULL,
	lat_le_2500 BIGINT NOT NULL,
	lat_le_4000 BIGINT NOT NULL,
	lat_le_6000 BIGINT NOT NULL,
	lat_le_10000 BIGINT NOT NULL,
	lat_le_20000 BIGINT NOT NULL,
	lat_le_60000 BIGINT NOT NULL,
	lat_gt_60000 BIGINT NOT NULL,
	estimated             BIGINT NOT NULL DEFAULT 0,  -- rows with an estimate
	estimated_tokens      BIGINT NOT NULL DEFAULT 0,
	estimated_cost_micros BIGINT NOT NULL DEFAULT 0,
	audio_input_tokens    BIGINT NOT NULL DEFAULT 0,
	audio_output_tokens   BIGINT NOT NULL DEFAULT 0,
	web_search_calls      BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (tag, day)
);
INSERT INTO tag_total_daily (day, tag, requests, errors, streams, prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens, cost_micros, unpriced, duration_ms_sum, lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750, lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000, estimated, estimated_tokens, estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls)
  SELECT day, tag, sum(requests), sum(errors), sum(streams), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(reasoning_tokens), sum(cost_micros), sum(unpriced), sum(duration_ms_sum), sum(lat_le_25), sum(lat_le_50), sum(lat_le_100), sum(lat_le_200), sum(lat_le_350), sum(lat_le_500), sum(lat_le_750), sum(lat_le_1000), sum(lat_le_1500), sum(lat_le_2500), sum(lat_le_4000), sum(lat_le_6000), sum(lat_le_10000), sum(lat_le_20000), sum(lat_le_60000), sum(lat_gt_60000), sum(estimated), sum(estimated_tokens), sum(estimated_cost_micros), sum(audio_input_tokens), sum(audio_output_tokens), sum(web_search_calls)
  FROM tag_daily GROUP BY day, tag;
