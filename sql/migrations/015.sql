-- Version 15: end users (docs/limits.md, "End users"). A key's policy on naming them
-- (end_users), the one a request named (requests.end_user), and the sums per key and
-- end user by day.
ALTER TABLE keys ADD COLUMN end_users TEXT NOT NULL DEFAULT 'optional'
	CHECK (end_users IN ('optional', 'required', 'forbidden'));
ALTER TABLE requests ADD COLUMN end_user TEXT;
CREATE INDEX requests_end_user_started_at ON requests (end_user, started_at) WHERE end_user IS NOT NULL;
CREATE TABLE end_user_daily (
	day                   INTEGER NOT NULL,
	key_id                INTEGER NOT NULL,
	end_user              TEXT NOT NULL,
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
	PRIMARY KEY (key_id, end_user, day)
) WITHOUT ROWID;
