-- Version 7: prices per token class, service tier and prompt size, and usage per class.
-- A model's prices move from four columns of models into model_prices, one row per
-- rate card (tier, prompt-size band); the card a model had becomes its 'default' card
-- for every prompt size. A card without a cache-write price used to charge cache writes
-- at the input price: that price is now written into the card, so no cost changes.
-- requests gets the classes providers report beside the four it had, and the rollups
-- sum the ones an operator budgets (audio, web searches).
CREATE TABLE model_prices (
	model_id                       INTEGER NOT NULL REFERENCES models (id) ON DELETE CASCADE,
	tier                           TEXT NOT NULL CHECK (tier <> ''),
	above_tokens                   INTEGER NOT NULL CHECK (above_tokens >= 0),
	input_micros_per_mtok          INTEGER CHECK (input_micros_per_mtok >= 0),
	cached_micros_per_mtok         INTEGER CHECK (cached_micros_per_mtok >= 0),
	cache_write_micros_per_mtok    INTEGER CHECK (cache_write_micros_per_mtok >= 0),
	cache_write_1h_micros_per_mtok INTEGER CHECK (cache_write_1h_micros_per_mtok >= 0),
	output_micros_per_mtok         INTEGER CHECK (output_micros_per_mtok >= 0),
	reasoning_micros_per_mtok      INTEGER CHECK (reasoning_micros_per_mtok >= 0),
	audio_input_micros_per_mtok    INTEGER CHECK (audio_input_micros_per_mtok >= 0),
	audio_output_micros_per_mtok   INTEGER CHECK (audio_output_micros_per_mtok >= 0),
	web_search_micros_per_call     INTEGER CHECK (web_search_micros_per_call >= 0),
	PRIMARY KEY (model_id, tier, above_tokens)
) WITHOUT ROWID;
INSERT INTO model_prices (model_id, tier, above_tokens, input_micros_per_mtok,
                          cached_micros_per_mtok, cache_write_micros_per_mtok,
                          output_micros_per_mtok)
	SELECT id, 'default', 0, input_micros_per_mtok, cached_micros_per_mtok,
	       coalesce(cache_write_micros_per_mtok, input_micros_per_mtok), output_micros_per_mtok
	FROM models
	WHERE input_micros_per_mtok IS NOT NULL OR output_micros_per_mtok IS NOT NULL OR
	      cached_micros_per_mtok IS NOT NULL OR cache_write_micros_per_mtok IS NOT NULL;
ALTER TABLE models DROP COLUMN input_micros_per_mtok;
ALTER TABLE models DROP COLUMN output_micros_per_mtok;
ALTER TABLE models DROP COLUMN cached_micros_per_mtok;
ALTER TABLE models DROP COLUMN cache_write_micros_per_mtok;
ALTER TABLE keys ADD COLUMN service_tiers TEXT;
ALTER TABLE keys ADD COLUMN server_tools TEXT CHECK (server_tools IN ('priced', 'allow', 'deny'));
ALTER TABLE keys ADD COLUMN audio TEXT CHECK (audio IN ('priced', 'allow', 'deny'));
ALTER TABLE requests ADD COLUMN cache_creation_1h_tokens INTEGER;
ALTER TABLE requests ADD COLUMN audio_input_tokens INTEGER;
ALTER TABLE requests ADD COLUMN audio_output_tokens INTEGER;
ALTER TABLE requests ADD COLUMN accepted_prediction_tokens INTEGER;
ALTER TABLE requests ADD COLUMN rejected_prediction_tokens INTEGER;
ALTER TABLE requests ADD COLUMN web_search_calls INTEGER;
ALTER TABLE requests ADD COLUMN service_tier TEXT;
ALTER TABLE usage_hourly ADD COLUMN audio_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN audio_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN web_search_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN audio_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN audio_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN web_search_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_hourly ADD COLUMN audio_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_hourly ADD COLUMN audio_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_hourly ADD COLUMN web_search_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_daily ADD COLUMN audio_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_daily ADD COLUMN audio_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_daily ADD COLUMN web_search_calls INTEGER NOT NULL DEFAULT 0;
CREATE TRIGGER model_prices_gen_insert AFTER INSERT ON model_prices BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER model_prices_gen_update AFTER UPDATE ON model_prices BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER model_prices_gen_delete AFTER DELETE ON model_prices BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
