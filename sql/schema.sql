-- tally database schema: the public contract between tallyctl, the agent and queryd.
--
-- This file always describes the newest schema and is applied as a whole to an empty
-- database. Older databases are brought up to date by the ordered migrations in
-- sql/migrations/ (NNN.sql upgrades version NNN - 1 to NNN). Changing the schema means:
-- edit this file, bump PRAGMA user_version at the end, bump DB_SCHEMA_VERSION in
-- common/db.h, add the matching migration, and make the same change to
-- sql/pg/schema.sql (PostgreSQL's) with its own migration in sql/pg/migrations/.
--
-- Times are unix seconds (UTC), except requests.started_at (unix milliseconds).
-- Money is integer micro-dollars (1e-6 USD), never REAL.
-- Provider credentials are not stored here: they live in HAProxy's environment.

-- Small named counters.
--   config_generation: bumped by the triggers below on every change to providers,
--   models, model_prices, teams, team_models, tag_budgets, keys, key_models,
--   end_user_limits or model_budgets; the agent polls it to reload its in-memory tables.
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

-- Models clients may ask for and the provider serving each.
CREATE TABLE models (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL UNIQUE CHECK (name <> ''),  -- as in request bodies
	provider_id INTEGER NOT NULL REFERENCES providers (id),
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	-- the most output tokens it gives one answer: what a request naming no bound is
	-- estimated at (docs/limits.md); NULL: the agent option --default-max-tokens
	max_output  INTEGER CHECK (max_output > 0)
);
CREATE INDEX models_provider_id ON models (provider_id);

-- A model's prices (docs/pricing.md): rate cards, one per service tier and prompt size.
-- A request is priced by the card of the tier the provider reports it was served at
-- ('default' when none is reported; Anthropic's 'standard' is 'default') with the
-- largest above_tokens below its prompt_tokens (0: every size), so a long-context rate
-- is a second card of the same tier. Prices are integer micro-dollars per million
-- tokens (1000000 = $1 per Mtok), web searches per call. NULL is an unknown price,
-- never taken for 0: a row with tokens of a class its card does not price, or a tier
-- with no card, is stored unpriced (requests.cost_micros NULL) and counted in the
-- rollups' unpriced. Two prices are optional because they are parts of another class:
-- reasoning (NULL: at the output price) and cache_write_1h (NULL: at cache_write).
--   cache_write: input written to the cache (Anthropic's 5-minute lifetime)
--   audio_input / audio_output: the audio parts of the prompt and of the completion
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

-- Teams (docs/limits.md, "Teams"): a key belongs to at most one (keys.team_id), and a
-- request is admitted only if its key and its key's team both admit it. A team's limits
-- are a key's (NULL: no such limit); team_models is its allow-list, which narrows its
-- keys' own. A team is deleted only once no key belongs to it; its rows keep its id,
-- which no later team is given (its limits are counted under -id: never a key's).
CREATE TABLE teams (
	id             INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id > 0),  -- never reused
	name           TEXT NOT NULL UNIQUE CHECK (name <> ''),
	created_at     INTEGER NOT NULL,
	rpm            INTEGER CHECK (rpm > 0),
	tpm            INTEGER CHECK (tpm > 0),
	max_concurrent INTEGER CHECK (max_concurrent > 0),
	budget_micros  INTEGER CHECK (budget_micros > 0),
	budget_period  TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'week', 'month', 'total')),
	-- 1: its keys may read the team's figures on GET /tally/v1/usage; 0: each its own alone
	members_see_usage INTEGER NOT NULL DEFAULT 0 CHECK (members_see_usage IN (0, 1)),
	tags           TEXT,  -- tags every request of its keys carries (docs/limits.md: Tags)
	budget_tz      TEXT CHECK (budget_tz <> '')  -- its budget periods' zone; NULL: UTC
);

CREATE TABLE team_models (
	team_id INTEGER NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
	model   TEXT NOT NULL,
	PRIMARY KEY (team_id, model)
);

-- Budgets of tags (docs/limits.md, "Tags"): a request carrying tag (name=value) is
-- admitted only if the tag's budget, spent by every key's requests carrying it, admits
-- it too. Counted under an id of its own (quota_tag_subject), never a key's or a team's.
CREATE TABLE tag_budgets (
	id             INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id > 0),  -- never reused
	tag            TEXT NOT NULL UNIQUE CHECK (tag <> ''),
	created_at     INTEGER NOT NULL,
	budget_micros  INTEGER NOT NULL CHECK (budget_micros > 0),
	budget_period  TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'week', 'month', 'total'))
);

-- Gateway API keys. The clear key is shown once at creation and never stored.
-- service_tiers, server_tools, audio and cache_writes say what a request may ask for
-- that costs more (docs/pricing.md); NULL: the agent's default. server_tools (web search and other tools the provider
-- runs), audio and cache_writes (prompt cache writes, cache_control): 'priced' while
-- the model prices them, 'allow', 'deny'. end_users: whether its requests name the
-- end user they serve (docs/limits.md, "End users").
CREATE TABLE keys (
	id            INTEGER PRIMARY KEY,
	name          TEXT NOT NULL UNIQUE CHECK (name <> ''),
	prefix        TEXT NOT NULL,         -- first 12 characters of the key, for identification
	hash          BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),  -- HMAC-SHA256(secret, key)
	default_model TEXT,                  -- model name used when a request names none; NULL: none
	created_at    INTEGER NOT NULL,
	revoked_at    INTEGER,               -- NULL while the key is valid
	-- Limits (docs/limits.md); NULL: no such limit.
	rpm            INTEGER CHECK (rpm > 0),             -- requests per minute
	tpm            INTEGER CHECK (tpm > 0),             -- tokens per minute
	max_concurrent INTEGER CHECK (max_concurrent > 0),  -- requests in flight
	budget_micros  INTEGER CHECK (budget_micros > 0),  -- spend per period, micro-dollars
	budget_period  TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'week', 'month', 'total')),
	service_tiers  TEXT,  -- the tiers it may ask for, comma-separated
	server_tools   TEXT CHECK (server_tools IN ('priced', 'allow', 'deny')),
	audio          TEXT CHECK (audio IN ('priced', 'allow', 'deny')),
	cache_writes   TEXT CHECK (cache_writes IN ('priced', 'allow', 'deny')),
	team_id        INTEGER REFERENCES teams (id),  -- NULL: no team
	end_users      TEXT NOT NULL DEFAULT 'optional'
	               CHECK (end_users IN ('optional', 'required', 'forbidden')),
	tags           TEXT,  -- tags every request of the key carries; NULL: none
	budget_tz      TEXT CHECK (budget_tz <> '')  -- its budget periods' zone; NULL: UTC
);

-- Per-key model allow-lists, by model name. A key with no rows may use every model.
CREATE TABLE key_models (
	key_id INTEGER NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
	model  TEXT NOT NULL,
	PRIMARY KEY (key_id, model)
);

-- End users' limits (docs/limits.md, "End users"): a budget, rpm and tpm for each end
-- user a key's requests name, counted per key and end user, never issuing a key. A
-- row belongs to a key or to a team (the default of every key in it); end_user '' is
-- every end user without a row of its own, a named one overrides it. NULL: no such
-- limit, so a named row without limits exempts that end user from the default.
CREATE TABLE end_user_limits (
	id             INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id > 0),  -- never reused
	key_id         INTEGER REFERENCES keys (id) ON DELETE CASCADE,
	team_id        INTEGER REFERENCES teams (id) ON DELETE CASCADE,
	end_user       TEXT NOT NULL CHECK (length(CAST(end_user AS BLOB)) <= 256),
	created_at     INTEGER NOT NULL,
	rpm            INTEGER CHECK (rpm > 0),
	tpm            INTEGER CHECK (tpm > 0),
	budget_micros  INTEGER CHECK (budget_micros > 0),
	budget_period  TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'week', 'month', 'total')),
	CHECK ((key_id IS NULL) <> (team_id IS NULL)),
	UNIQUE (key_id, end_user),
	UNIQUE (team_id, end_user)
);

-- Budgets per model (docs/limits.md, "Budgets per model"): a key's or a team's spend on
-- one model per period, beside its budget for every model. model: a models.name, as
-- rows keep it. A key's is counted from its rows (usage_daily), a team's from the rows
-- made under it (team_model_daily).
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

-- Usage: one row per HTTP transaction, written by the agent's writer thread. Integer
-- columns are NULL when not known or not reported (token counts the provider did not
-- report, no status, ...); text columns are NULL when empty. No foreign key on key_id:
-- keys are never deleted, and a check per row would cost every insert.
-- A forwarded request whose usage was not reported in full (cut before its usage, an
-- answer that outgrew the buffer, no record) is charged an estimate of the missing part
-- (docs/limits.md) in estimated_tokens and estimated_cost_micros; its reported counts
-- stay NULL. Both are NULL when nothing was estimated.
-- The seven columns after them are the classes providers bill apart (docs/pricing.md),
-- NULL when not reported, each a part of the count its comment names, then the service
-- tier. The row is priced by the model it was routed to (docs/pricing.md): model is
-- that one, or the dated snapshot of it the answer named; a name the answer gave that is
-- neither is model_reported, and prices nothing. priced_fallback names the classes (and
-- 'tier') the model's card has no price for, charged at a stated fallback rate.
CREATE TABLE requests (
	id                    INTEGER PRIMARY KEY,
	request_id            TEXT NOT NULL UNIQUE,  -- X-Request-Id, HAProxy's unique id
	key_id                INTEGER,               -- keys.id; NULL: no known key
	model                 TEXT,     -- as routed, or the dated snapshot of it the answer named
	model_requested       TEXT,     -- the configured model the agent routed to
	provider              TEXT,     -- providers.name
	verdict               TEXT,     -- the agent's verdict, 'fail_open'; NULL: never decided
	status                INTEGER,  -- HTTP status sent to the client
	stream                INTEGER CHECK (stream IN (0, 1)),
	prompt_tokens         INTEGER,  -- all input tokens, cached ones included
	completion_tokens     INTEGER,  -- all output tokens, reasoning ones included
	cached_tokens         INTEGER,  -- input read from the provider's cache
	cache_creation_tokens INTEGER,  -- input written to the provider's cache
	reasoning_tokens      INTEGER,
	cost_micros           INTEGER,  -- NULL: unpriced model, or no usage
	outcome               TEXT NOT NULL CHECK (outcome IN ('complete', 'client_abort',
	                          'upstream_error', 'upstream_rejected', 'denied',
	                          'gateway_rejected', 'no_record')),
	usage_source          TEXT NOT NULL CHECK (usage_source IN ('none', 'response',
	                          'stream', 'partial')),
	termination           TEXT,     -- HAProxy's termination state, e.g. '--', 'CD'
	started_at            INTEGER NOT NULL,  -- unix MILLIseconds (other *_at: seconds)
	duration_ms           INTEGER,  -- request arrival to end of response
	ttfb_ms               INTEGER,  -- request arrival to the upstream's response headers
	bytes_in              INTEGER,  -- request bytes from the client
	bytes_out             INTEGER,  -- response bytes to the client (headers included)
	estimated_tokens      INTEGER,  -- tokens charged for what was not reported
	estimated_cost_micros INTEGER,  -- their cost (NULL: unpriced or none estimated)
	cache_creation_1h_tokens   INTEGER,  -- part of cache_creation_tokens
	audio_input_tokens         INTEGER,  -- part of prompt_tokens
	audio_output_tokens        INTEGER,  -- part of completion_tokens
	accepted_prediction_tokens INTEGER,  -- part of completion_tokens
	rejected_prediction_tokens INTEGER,  -- part of completion_tokens
	web_search_calls           INTEGER,  -- server-side web searches, billed per call
	service_tier               TEXT,     -- as the provider reported it (else as asked for)
	model_reported             TEXT,     -- the model the answer named when not model
	priced_fallback            TEXT,     -- classes charged at a fallback rate (NULL: none)
	team_id                    INTEGER,  -- the key's team when it was decided; NULL: none
	end_user                   TEXT,     -- the end user the request named; NULL: none
	tags                       TEXT      -- its tags, name=value sorted by name, comma-separated; NULL: none
);
CREATE INDEX requests_started_at ON requests (started_at);
CREATE INDEX requests_key_started_at ON requests (key_id, started_at);
-- A page of one model's requests (a rare model's rows are too few to find by time).
CREATE INDEX requests_model_started_at ON requests (model, started_at);
-- A page of one team's requests; rows without a team cost it nothing.
CREATE INDEX requests_team_started_at ON requests (team_id, started_at) WHERE team_id IS NOT NULL;
-- A page of one end user's requests; rows without one cost it nothing.
CREATE INDEX requests_end_user_started_at ON requests (end_user, started_at) WHERE end_user IS NOT NULL;
-- A row per tag of each request row: a page or an export of one tag walks that tag's
-- rows alone. Kept by the two triggers below, so every path that inserts or deletes a
-- row keeps it exact. The text is split at its commas by a recursive query, which no
-- text makes fail (a row the store refused would be a row lost); it stops where no
-- comma is left, as instr() and substr() disagree past a NUL byte.
CREATE TABLE request_tags (
	tag        TEXT NOT NULL,
	started_at INTEGER NOT NULL,  -- requests.started_at
	id         INTEGER NOT NULL,  -- requests.id
	PRIMARY KEY (tag, started_at, id)
) WITHOUT ROWID;
CREATE TRIGGER requests_tags_insert AFTER INSERT ON requests WHEN NEW.tags IS NOT NULL BEGIN
	INSERT OR IGNORE INTO request_tags (tag, started_at, id)
	WITH RECURSIVE s(tag, rest) AS (
		SELECT NULL, NEW.tags || ','
		UNION ALL
		SELECT substr(rest, 1, instr(rest, ',') - 1), substr(rest, instr(rest, ',') + 1)
		FROM s WHERE instr(rest, ',') > 0)
	SELECT tag, NEW.started_at, NEW.id FROM s WHERE tag IS NOT NULL;
END;
CREATE TRIGGER requests_tags_delete AFTER DELETE ON requests WHEN OLD.tags IS NOT NULL BEGIN
	DELETE FROM request_tags
	WHERE tag IN (WITH RECURSIVE s(tag, rest) AS (
	                SELECT NULL, OLD.tags || ','
	                UNION ALL
	                SELECT substr(rest, 1, instr(rest, ',') - 1), substr(rest, instr(rest, ',') + 1)
	                FROM s WHERE instr(rest, ',') > 0)
	              SELECT tag FROM s WHERE tag IS NOT NULL)
	  AND started_at = OLD.started_at AND id = OLD.id;
END;

-- Rollups per key, model and provider, by hour and by day, kept by the writer in the
-- same transaction as the rows they sum, so they always agree with requests.
-- Dashboards read these, never the raw table: a month is ~30 daily rows per key and
-- model, and a range's ragged ends come from the hourly table.
--   hour / day: unix seconds of the UTC hour / day the request started in (started_at
--     floored).
--   key_id: 0 for requests without a known key (a primary key column cannot be NULL).
--   model, provider: requests.model and requests.provider, '' for none.
-- Token and cost sums count NULL as 0; unpriced counts rows with usage but no price,
-- whose cost is missing from cost_micros. estimated_* sum the rows' estimates, which are
-- beside the reported figures, never in them: spend charged = cost_micros +
-- estimated_cost_micros.
-- lat_le_<N>: rows whose duration_ms is in (previous bound, N] milliseconds (the first
-- from 0), lat_gt_60000 the rest; rows without duration_ms are in no bucket. queryd
-- estimates latency percentiles from these buckets (docs/api.md); the bounds are
-- common/latency.h's and change only with a migration.
CREATE TABLE usage_hourly (
	hour                  INTEGER NOT NULL,
	key_id                INTEGER NOT NULL,
	model                 TEXT NOT NULL,
	provider              TEXT NOT NULL,
	requests              INTEGER NOT NULL,
	errors                INTEGER NOT NULL,  -- outcome other than 'complete'
	streams               INTEGER NOT NULL,  -- stream = 1
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
	PRIMARY KEY (hour, key_id, model, provider)
) WITHOUT ROWID;
-- A key's spend in its budget period (the agent reads it at start and on key changes).
CREATE INDEX usage_hourly_key_hour ON usage_hourly (key_id, hour);

CREATE TABLE usage_daily (
	day                   INTEGER NOT NULL,
	key_id                INTEGER NOT NULL,
	model                 TEXT NOT NULL,
	provider              TEXT NOT NULL,
	requests              INTEGER NOT NULL,
	errors                INTEGER NOT NULL,  -- outcome other than 'complete'
	streams               INTEGER NOT NULL,  -- stream = 1
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
	PRIMARY KEY (day, key_id, model, provider)
) WITHOUT ROWID;
CREATE INDEX usage_daily_key_day ON usage_daily (key_id, day);

-- The same rollups without the key: what every figure not filtered or grouped by key
-- reads (a day of usage_daily holds a row per key and model, ~200 times more).
CREATE TABLE model_hourly (
	hour                  INTEGER NOT NULL,
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
	PRIMARY KEY (hour, model, provider)
) WITHOUT ROWID;
CREATE TABLE model_daily (
	day                   INTEGER NOT NULL,
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
	PRIMARY KEY (day, model, provider)
) WITHOUT ROWID;
-- The same rollups without the model: what a summary by key (or by day or hour for one
-- key) without a model filter reads. An hour of usage_hourly holds a row per key and
-- model and a day of usage_daily the same (on the 10M benchmark ~520 and ~880 rows),
-- key_hourly and key_daily a row per key (~200): 2.6 and 4.3 times fewer.
CREATE TABLE key_hourly (
	hour                  INTEGER NOT NULL,
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
	PRIMARY KEY (hour, key_id)
) WITHOUT ROWID;
-- A key's spend since an hour (budgets at start, GET /tally/v1/usage): the index alone
-- answers it, a few entries a key-hour, where the primary key would read every key's.
CREATE INDEX key_hourly_key_hour ON key_hourly (key_id, hour, cost_micros, estimated_cost_micros);
CREATE TABLE key_daily (
	day                   INTEGER NOT NULL,
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
	PRIMARY KEY (day, key_id)
) WITHOUT ROWID;
-- The same per team (requests.team_id; rows without a team are in neither): team
-- summaries and team budgets read these.
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
-- A team's spend since an hour (budgets, the team gauges, GET /tally/v1/usage), as above.
CREATE INDEX team_hourly_team_hour ON team_hourly (team_id, hour, cost_micros, estimated_cost_micros);
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
-- The same per team and model (rows with a team), by day: a team's budgets per model.
-- Ordered by team and model: a budget's spend since a day is one range.
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
-- The same per key and end user (requests.end_user; rows without one are in none),
-- by day only: a key's end users' spend this period (GET /tally/v1/usage/end_users)
-- and reports by end user read these. Ordered by key and end user: a page of a key's
-- end users reads their days in order and stops at the page's end.
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
-- The same per tag and day across keys, a row per (tag, day) with rows: tag budgets
-- and reports of every key read these, as many rows as tags times days (tag_daily
-- has as many again per key carrying the tag). Each row equals the sum of
-- tag_daily's rows of its tag and day.
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
-- The hourly totals, neither key nor model: a summary by hour without a filter (the
-- dashboard's chart) reads a row per hour, not ~20 of model_hourly (a month: 720 rows,
-- not ~15k).
CREATE TABLE total_hourly (
	hour                  INTEGER NOT NULL PRIMARY KEY,
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
	web_search_calls      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The agents' durable accounting counters: a row per node (an agent's --node name;
-- 'local' for the one agent of a SQLite store), rewritten by that node's writer in
-- every transaction it commits, so it always matches the rows stored with it.
--   received:   distinct transactions accepted for accounting
--   written:    rows inserted into requests
--   dropped:    rows lost (queue full, or the database failing for too long)
--   duplicates: records for a transaction already accounted (not in received)
--   timed_out:  rows written as 'no_record' (part of written)
--   unpriced:   rows written with usage but no price (part of written)
--   unauthenticated: records and decisions refused because they did not carry the
--               gateway secret (no row: they did not come from the gateway's HAProxy)
--   pending_overflow: decisions refused (503) because the pending table was full
--               (each still a row, from its record)
-- Once a node's agent has drained its queue (at every clean stop, and at start-up),
-- nothing of it is in flight and its row has received = written + dropped; so has the
-- sum of the rows when every agent has drained:
--   SELECT sum(received) = sum(written) + sum(dropped) FROM accounting;
-- While it runs, received may be ahead by the rows still queued. A row counted
-- received by an agent that then died is counted again when the journal re-delivers
-- it; the agent sets its received = written + dropped at start-up. No row: the node
-- has accounted nothing yet.
CREATE TABLE accounting (
	node       TEXT NOT NULL PRIMARY KEY CHECK (node <> ''),
	received   INTEGER NOT NULL,
	written    INTEGER NOT NULL,
	dropped    INTEGER NOT NULL,
	duplicates INTEGER NOT NULL,
	timed_out  INTEGER NOT NULL,
	unpriced   INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,  -- unix seconds of the last update
	unauthenticated  INTEGER NOT NULL DEFAULT 0,
	pending_overflow INTEGER NOT NULL DEFAULT 0
);

-- Stored responses (the Responses API's ids) and the keys that made them: upstream,
-- every response is stored under the operator's one account, and the agent lets only
-- the key that made one read, cancel or delete it (README.md, "stored responses"). Written by the
-- writer with the create's row; the agent loads the last 30 days at start.
--   model: the configured model the create was routed to (its provider holds it).
CREATE TABLE stored_responses (
	response_id TEXT PRIMARY KEY,
	key_id      INTEGER NOT NULL,
	model       TEXT NOT NULL,
	request_id  TEXT NOT NULL,     -- requests.request_id of the create
	created_at  INTEGER NOT NULL   -- unix seconds
);
CREATE INDEX stored_responses_created_at ON stored_responses (created_at);

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
CREATE TRIGGER model_prices_gen_insert AFTER INSERT ON model_prices BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER model_prices_gen_update AFTER UPDATE ON model_prices BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER model_prices_gen_delete AFTER DELETE ON model_prices BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
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
CREATE TRIGGER tag_budgets_gen_insert AFTER INSERT ON tag_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER tag_budgets_gen_update AFTER UPDATE ON tag_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER tag_budgets_gen_delete AFTER DELETE ON tag_budgets BEGIN
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
CREATE TRIGGER end_user_limits_gen_insert AFTER INSERT ON end_user_limits BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER end_user_limits_gen_update AFTER UPDATE ON end_user_limits BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER end_user_limits_gen_delete AFTER DELETE ON end_user_limits BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER model_budgets_gen_insert AFTER INSERT ON model_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER model_budgets_gen_update AFTER UPDATE ON model_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER model_budgets_gen_delete AFTER DELETE ON model_budgets BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;

-- Limits shared across nodes (PostgreSQL only; spoa/share.c, docs/limits.md "Shared
-- limits"). On SQLite the tables exist for parity and stay empty: one node enforces its
-- limits in memory. Times are the store's clock in unix ms, never a node's.
-- limit_pool: one row per limited subject (quota.h's ids), the cluster's rpm and tpm token buckets (whole
-- units, 1/60000 remainder, refilled up to *_at_ms, computed under *_cap) and the
-- budget left to grant in the period (kind 0 day, 1 month, 2 total, 3 week) starting at
-- budget_start_ms, computed under budget_cap.
CREATE TABLE limit_pool (
	key_id          INTEGER NOT NULL PRIMARY KEY,
	rpm_cap         INTEGER NOT NULL DEFAULT 0,
	rpm_room        INTEGER NOT NULL DEFAULT 0,
	rpm_frac        INTEGER NOT NULL DEFAULT 0,
	rpm_at_ms       INTEGER NOT NULL DEFAULT 0,
	tpm_cap         INTEGER NOT NULL DEFAULT 0,
	tpm_room        INTEGER NOT NULL DEFAULT 0,
	tpm_frac        INTEGER NOT NULL DEFAULT 0,
	tpm_at_ms       INTEGER NOT NULL DEFAULT 0,
	budget_cap      INTEGER NOT NULL DEFAULT 0,
	budget_period   INTEGER NOT NULL DEFAULT 0,
	budget_start_ms INTEGER NOT NULL DEFAULT 0,
	budget_room     INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- limit_lease: what a node holds of a key until expires_ms (renewed every sync):
-- concurrency slots and budget granted and not yet returned. A lease's slots count
-- until --lease-hold-ms past its expiry (its HAProxy may still stream); a restarted
-- agent renames its node's previous leases to node/restarted-MS. key_id 0: the node's
-- presence (how many nodes share a limit when the store is lost).
CREATE TABLE limit_lease (
	key_id      INTEGER NOT NULL,
	node        TEXT NOT NULL CHECK (node <> ''),
	slots       INTEGER NOT NULL DEFAULT 0,
	budget_held INTEGER NOT NULL DEFAULT 0,
	expires_ms  INTEGER NOT NULL,
	PRIMARY KEY (key_id, node)
) WITHOUT ROWID;

PRAGMA user_version = 22;
