-- Version 10: the tables of limits shared across nodes (used on PostgreSQL only; see
-- sql/schema.sql). IF NOT EXISTS: tests bring a new database down to an older version
-- by hand and leave these tables in place.
CREATE TABLE IF NOT EXISTS limit_pool (
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
-- concurrency slots and budget granted and not yet returned. A lease past its expiry
-- holds nothing (its slots count for no one). key_id 0: the node's presence (how many
-- nodes share a limit when the store is lost).
CREATE TABLE IF NOT EXISTS limit_lease (
	key_id      INTEGER NOT NULL,
	node        TEXT NOT NULL CHECK (node <> ''),
	slots       INTEGER NOT NULL DEFAULT 0,
	budget_held INTEGER NOT NULL DEFAULT 0,
	expires_ms  INTEGER NOT NULL,
	PRIMARY KEY (key_id, node)
) WITHOUT ROWID;
