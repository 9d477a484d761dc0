-- Version 1 to 2: usage tables (requests, usage_hourly, accounting) and nullable
-- model prices. SQLite cannot drop NOT NULL in place, so models is rebuilt (same ids)
-- with its index and config_generation triggers. Version 1 defaulted unset prices to
-- 0: a model whose three prices are all 0 gets NULL (unknown) prices instead. Nothing
-- references models by id, so dropping it under foreign_keys = ON is safe.
CREATE TABLE models_v2 (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE CHECK (name <> ''),
  provider_id INTEGER NOT NULL REFERENCES providers (id),
  input_micros_per_mtok INTEGER CHECK (input_micros_per_mtok >= 0),
  output_micros_per_mtok INTEGER CHECK (output_micros_per_mtok >= 0),
  cached_micros_per_mtok INTEGER CHECK (cached_micros_per_mtok >= 0),
  cache_write_micros_per_mtok INTEGER CHECK (cache_write_micros_per_mtok >= 0),
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL);
INSERT INTO models_v2 (id, name, provider_id, input_micros_per_mtok, output_micros_per_mtok,
  cached_micros_per_mtok, created_at, updated_at)
SELECT id, name, provider_id, CASE WHEN priced THEN input_micros_per_mtok END,
  CASE WHEN priced THEN output_micros_per_mtok END,
  CASE WHEN priced THEN cached_micros_per_mtok END, created_at, updated_at
FROM (SELECT *, input_micros_per_mtok + output_micros_per_mtok + cached_micros_per_mtok > 0
  AS priced FROM models);
DROP TABLE models;
ALTER TABLE models_v2 RENAME TO models;
CREATE INDEX models_provider_id ON models (provider_id);
CREATE TRIGGER models_gen_insert AFTER INSERT ON models BEGIN
  UPDATE meta SET value = value + 1 WHERE name = 'config_generation'; END;
CREATE TRIGGER models_gen_update AFTER UPDATE ON models BEGIN
  UPDATE meta SET value = value + 1 WHERE name = 'config_generation'; END;
CREATE TRIGGER models_gen_delete AFTER DELETE ON models BEGIN
  UPDATE meta SET value = value + 1 WHERE name = 'config_generation'; END;
CREATE TABLE requests (
  id INTEGER PRIMARY KEY,
  request_id TEXT NOT NULL UNIQUE,
  key_id INTEGER,
  model TEXT,
  model_requested TEXT,
  provider TEXT,
  verdict TEXT,
  status INTEGER,
  stream INTEGER CHECK (stream IN (0, 1)),
  prompt_tokens INTEGER,
  completion_tokens INTEGER,
  cached_tokens INTEGER,
  cache_creation_tokens INTEGER,
  reasoning_tokens INTEGER,
  cost_micros INTEGER,
  outcome TEXT NOT NULL CHECK (outcome IN ('complete', 'client_abort', 'upstream_error',
    'upstream_rejected', 'denied', 'gateway_rejected', 'no_record')),
  usage_source TEXT NOT NULL CHECK (usage_source IN ('none', 'response', 'stream', 'partial')),
  termination TEXT,
  started_at INTEGER NOT NULL,
  duration_ms INTEGER,
  ttfb_ms INTEGER,
  bytes_in INTEGER,
  bytes_out INTEGER);
CREATE INDEX requests_started_at ON requests (started_at);
CREATE INDEX requests_key_started_at ON requests (key_id, started_at);
CREATE TABLE usage_hourly (
  hour INTEGER NOT NULL,
  key_id INTEGER NOT NULL,
  model TEXT NOT NULL,
  requests INTEGER NOT NULL,
  errors INTEGER NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL,
  cached_tokens INTEGER NOT NULL,
  cache_creation_tokens INTEGER NOT NULL,
  reasoning_tokens INTEGER NOT NULL,
  cost_micros INTEGER NOT NULL,
  unpriced INTEGER NOT NULL,
  duration_ms_sum INTEGER NOT NULL,
  PRIMARY KEY (hour, key_id, model)) WITHOUT ROWID;
CREATE TABLE accounting (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  received INTEGER NOT NULL,
  written INTEGER NOT NULL,
  dropped INTEGER NOT NULL,
  duplicates INTEGER NOT NULL,
  timed_out INTEGER NOT NULL,
  unpriced INTEGER NOT NULL,
  updated_at INTEGER NOT NULL);
INSERT INTO accounting VALUES (1, 0, 0, 0, 0, 0, 0, 0);
