-- Version 15: end users (docs/limits.md, "End users"). A key's policy on naming them
-- (end_users), the one a request named (requests.end_user), and the sums per key and
-- end user by day.
ALTER TABLE keys ADD COLUMN end_users TEXT NOT NULL DEFAULT 'optional'
	CHECK (end_users IN ('optional', 'required', 'forbidden'));
ALTER TABLE requests ADD COLUMN end_user TEXT;
CREATE INDEX requests_end_user_started_at ON requests (end_user, started_at, id) WHERE end_user IS NOT NULL;
CREATE TABLE end_user_daily (
	day                   BIGINT NOT NULL,
	key_id                BIGINT NOT NULL,
	end_user              TEXT NOT NULL,
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
	PRIMARY KEY (key_id, end_user, day)
);
