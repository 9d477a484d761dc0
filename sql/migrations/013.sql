-- Version 13: teams above keys (docs/limits.md, "Teams"): the teams and their
-- allow-lists, a key's team, the team a request was decided under, and the rollups per
-- team that team summaries and team budgets read.
CREATE TABLE teams (
	id             INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id > 0),  -- never reused
	name           TEXT NOT NULL UNIQUE CHECK (name <> ''),
	created_at     INTEGER NOT NULL,
	rpm            INTEGER CHECK (rpm > 0),
	tpm            INTEGER CHECK (tpm > 0),
	max_concurrent INTEGER CHECK (max_concurrent > 0),
	budget_micros  INTEGER CHECK (budget_micros > 0),
	budget_period  TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'month', 'total'))
);

CREATE TABLE team_models (
	team_id INTEGER NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
	model   TEXT NOT NULL,
	PRIMARY KEY (team_id, model)
);

ALTER TABLE keys ADD COLUMN team_id INTEGER REFERENCES teams (id);
ALTER TABLE requests ADD COLUMN team_id INTEGER;
CREATE INDEX requests_team_started_at ON requests (team_id, started_at) WHERE team_id IS NOT NULL;

CREATE TABLE team_hourly (
	hour                  INTEGER NOT NULL,
	team_id               INTEGER NOT NULL,
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
	PRIMARY KEY (hour, team_id)
) WITHOUT ROWID;
CREATE TABLE team_daily (
	day                   INTEGER NOT NULL,
	team_id               INTEGER NOT NULL,
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
	PRIMARY KEY (day, team_id)
) WITHOUT ROWID;
CREATE TRIGGER teams_gen_insert AFTER INSERT ON teams BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER teams_gen_update AFTER UPDATE ON teams BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER teams_gen_delete AFTER DELETE ON teams BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER team_models_gen_insert AFTER INSERT ON team_models BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER team_models_gen_update AFTER UPDATE ON team_models BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER team_models_gen_delete AFTER DELETE ON team_models BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
