-- tally database schema version 1, frozen: the starting point of the migration test
-- (test_tallyctl.py). A copy of sql/schema.sql as released at version 1; never edit.

-- tally database schema: the public contract between tallyctl, the agent and queryd.
--
-- This file always describes the newest schema and is applied as a whole to an empty
-- database. Older databases are brought up to date by the ordered migrations in
-- common/db.c. Changing the schema means: edit this file, bump PRAGMA user_version at
-- the end, bump DB_SCHEMA_VERSION in common/db.h and append the matching migration.
--
-- Times are unix seconds (UTC). Money is integer micro-dollars (1e-6 USD), never REAL.
-- Provider credentials are not stored here: they live in HAProxy's environment.

-- Small named counters.
--   config_generation: bumped by the triggers below on every change to providers,
--   models, keys or key_models; the agent polls it to reload its in-memory tables.
CREATE TABLE meta (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
);
INSERT INTO meta (name, value) VALUES ('config_generation', 0);

-- Upstream providers.
CREATE TABLE providers (
	id         INTEGER PRIMARY KEY,
	name       TEXT NOT NULL UNIQUE CHECK (name <> ''),
	api        TEXT NOT NULL CHECK (api IN ('openai', 'anthropic')),  -- wire protocol
	backend    TEXT NOT NULL CHECK (backend <> ''),  -- HAProxy backend that serves it
	base_url   TEXT,                                 -- informational; NULL if unset
	created_at INTEGER NOT NULL
);

-- Models clients may ask for, the provider serving each and its prices.
-- Prices are integer micro-dollars per million tokens (1000000 = $1 per Mtok).
CREATE TABLE models (
	id                     INTEGER PRIMARY KEY,
	name                   TEXT NOT NULL UNIQUE CHECK (name <> ''),  -- as in request bodies
	provider_id            INTEGER NOT NULL REFERENCES providers (id),
	input_micros_per_mtok  INTEGER NOT NULL DEFAULT 0 CHECK (input_micros_per_mtok >= 0),
	output_micros_per_mtok INTEGER NOT NULL DEFAULT 0 CHECK (output_micros_per_mtok >= 0),
	cached_micros_per_mtok INTEGER NOT NULL DEFAULT 0 CHECK (cached_micros_per_mtok >= 0),
	created_at             INTEGER NOT NULL,
	updated_at             INTEGER NOT NULL
);
CREATE INDEX models_provider_id ON models (provider_id);

-- Gateway API keys. The clear key is shown once at creation and never stored.
CREATE TABLE keys (
	id            INTEGER PRIMARY KEY,
	name          TEXT NOT NULL UNIQUE CHECK (name <> ''),
	prefix        TEXT NOT NULL,         -- first 12 characters of the key, for identification
	hash          BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),  -- HMAC-SHA256(secret, key)
	default_model TEXT,                  -- model name used when a request names none; NULL: none
	created_at    INTEGER NOT NULL,
	revoked_at    INTEGER                -- NULL while the key is valid
);

-- Per-key model allow-lists, by model name. A key with no rows may use every model.
CREATE TABLE key_models (
	key_id INTEGER NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
	model  TEXT NOT NULL,
	PRIMARY KEY (key_id, model)
);

-- config_generation triggers: one per table and statement kind (SQLite triggers fire
-- on a single event).
CREATE TRIGGER providers_gen_insert AFTER INSERT ON providers BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER providers_gen_update AFTER UPDATE ON providers BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER providers_gen_delete AFTER DELETE ON providers BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER models_gen_insert AFTER INSERT ON models BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER models_gen_update AFTER UPDATE ON models BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER models_gen_delete AFTER DELETE ON models BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER keys_gen_insert AFTER INSERT ON keys BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER keys_gen_update AFTER UPDATE ON keys BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER keys_gen_delete AFTER DELETE ON keys BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER key_models_gen_insert AFTER INSERT ON key_models BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER key_models_gen_update AFTER UPDATE ON key_models BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER key_models_gen_delete AFTER DELETE ON key_models BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;

PRAGMA user_version = 1;
