-- Version 19: budgets per model for keys and teams (docs/limits.md, "Budgets per
-- model"), and the rollup per team and model that a team's are counted from.
CREATE TABLE model_budgets (
	id             INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id > 0),  -- never reused
	key_id         INTEGER REFERENCES keys (id) ON DELETE CASCADE,
	team_id        INTEGER REFERENCES teams (id) ON DELETE CASCADE,
	model          TEXT NOT NULL CHECK (model <> ''),
	created_at     INTEGER NOT NULL,
	budget_micros  INTEGER NOT NULL CHECK (budget_micros > 0),
	budget_period  TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'week', 'month', 'total')),
	CHECK ((key_id IS NULL) <> (team_id IS NULL)),
	UNIQUE (key_id, model),
	UNIQUE (team_id, model)
);
CREATE TRIGGER model_budgets_gen_insert AFTER INSERT ON model_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER model_budgets_gen_update AFTER UPDATE ON model_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER model_budgets_gen_delete AFTER DELETE ON model_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;

CREATE TABLE team_model_daily (
	day                   INTEGER NOT NULL,
	team_id               INTEGER NOT NULL,
	model                 TEXT NOT NULL,
	provider              TEXT NOT NULL,
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
	PRIMARY KEY (team_id, model, day, provider)
) WITHOUT ROWID;
-- The rows made under a team before this version, summed as the writer sums them
-- (writer_sum_add; test_writer checks the two agree).
INSERT INTO team_model_daily (day, team_id, model, provider, requests, errors, streams, prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens, reasoning_tokens, cost_micros, unpriced, duration_ms_sum, lat_le_25, lat_le_50, lat_le_100, lat_le_200, lat_le_350, lat_le_500, lat_le_750, lat_le_1000, lat_le_1500, lat_le_2500, lat_le_4000, lat_le_6000, lat_le_10000, lat_le_20000, lat_le_60000, lat_gt_60000, estimated, estimated_tokens, estimated_cost_micros, audio_input_tokens, audio_output_tokens, web_search_calls)
  SELECT started_at / 86400000 * 86400,
         team_id,
         coalesce(model, ''),
         coalesce(provider, ''),
         count(*),
         sum(CASE WHEN outcome <> 'complete' THEN 1 ELSE 0 END),
         sum(CASE WHEN stream = 1 THEN 1 ELSE 0 END),
         sum(CASE WHEN prompt_tokens > 0 THEN prompt_tokens ELSE 0 END),
         sum(CASE WHEN completion_tokens > 0 THEN completion_tokens ELSE 0 END),
         sum(CASE WHEN cached_tokens > 0 THEN cached_tokens ELSE 0 END),
         sum(CASE WHEN cache_creation_tokens > 0 THEN cache_creation_tokens ELSE 0 END),
         sum(CASE WHEN reasoning_tokens > 0 THEN reasoning_tokens ELSE 0 END),
         sum(CASE WHEN cost_micros > 0 THEN cost_micros ELSE 0 END),
         sum(CASE WHEN cost_micros IS NULL AND (prompt_tokens IS NOT NULL OR completion_tokens IS NOT NULL) THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms > 0 THEN duration_ms ELSE 0 END),
         sum(CASE WHEN duration_ms >= 0 AND duration_ms <= 25 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 26 AND duration_ms <= 50 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 51 AND duration_ms <= 100 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 101 AND duration_ms <= 200 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 201 AND duration_ms <= 350 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 351 AND duration_ms <= 500 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 501 AND duration_ms <= 750 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 751 AND duration_ms <= 1000 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 1001 AND duration_ms <= 1500 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 1501 AND duration_ms <= 2500 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 2501 AND duration_ms <= 4000 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 4001 AND duration_ms <= 6000 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 6001 AND duration_ms <= 10000 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 10001 AND duration_ms <= 20000 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms >= 20001 AND duration_ms <= 60000 THEN 1 ELSE 0 END),
         sum(CASE WHEN duration_ms > 60000 THEN 1 ELSE 0 END),
         sum(CASE WHEN estimated_tokens >= 0 THEN 1 ELSE 0 END),
         sum(CASE WHEN estimated_tokens > 0 THEN estimated_tokens ELSE 0 END),
         sum(CASE WHEN estimated_cost_micros > 0 THEN estimated_cost_micros ELSE 0 END),
         sum(CASE WHEN audio_input_tokens > 0 THEN audio_input_tokens ELSE 0 END),
         sum(CASE WHEN audio_output_tokens > 0 THEN audio_output_tokens ELSE 0 END),
         sum(CASE WHEN web_search_calls > 0 THEN web_search_calls ELSE 0 END)
    FROM requests WHERE team_id IS NOT NULL
    GROUP BY 1, 2, 3, 4;
