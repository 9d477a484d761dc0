-- Version 16: tags (docs/limits.md, "Tags"). Default tags of keys and teams, the tags
-- a request carried (requests.tags), sums per tag, key and day, and tags' budgets.
ALTER TABLE teams ADD COLUMN tags TEXT;
ALTER TABLE keys ADD COLUMN tags TEXT;
ALTER TABLE requests ADD COLUMN tags TEXT;
-- Budgets of tags (docs/limits.md, "Tags"): a request carrying tag (name=value) is
-- admitted only if the tag's budget, spent by every key's requests carrying it, admits
-- it too. Counted under an id of its own (quota_tag_subject), never a key's or a team's.
CREATE TABLE tag_budgets (
	id             INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id > 0),  -- never reused
	tag            TEXT NOT NULL UNIQUE CHECK (tag <> ''),
	created_at     INTEGER NOT NULL,
	budget_micros  INTEGER NOT NULL CHECK (budget_micros > 0),
	budget_period  TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'month', 'total'))
);
-- The same per tag and key (requests.tags; a row with n tags is in n groups, rows
-- without tags in none), by day only: tag budgets (across every key) and reports by
-- tag read these. Ordered by tag and day: a tag's spend since a day is one range.
CREATE TABLE tag_daily (
	day                   INTEGER NOT NULL,
	tag                   TEXT NOT NULL,
	key_id                INTEGER NOT NULL,
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
	PRIMARY KEY (tag, day, key_id)
) WITHOUT ROWID;
CREATE TRIGGER tag_budgets_gen_insert AFTER INSERT ON tag_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER tag_budgets_gen_update AFTER UPDATE ON tag_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER tag_budgets_gen_delete AFTER DELETE ON tag_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
