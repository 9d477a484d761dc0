-- Version 10: the tables of limits shared across nodes (see sql/pg/schema.sql). IF NOT
-- EXISTS: tests bring a new database down to an older version by hand and leave these
-- tables in place.
CREATE TABLE IF NOT EXISTS limit_pool (
	key_id          BIGINT NOT NULL PRIMARY KEY,
	rpm_cap         BIGINT NOT NULL DEFAULT 0,
	rpm_room        BIGINT NOT NULL DEFAULT 0,
	rpm_frac        BIGINT NOT NULL DEFAULT 0,
	rpm_at_ms       BIGINT NOT NULL DEFAULT 0,
	tpm_cap         BIGINT NOT NULL DEFAULT 0,
	tpm_room        BIGINT NOT NULL DEFAULT 0,
	tpm_frac        BIGINT NOT NULL DEFAULT 0,
	tpm_at_ms       BIGINT NOT NULL DEFAULT 0,
	budget_cap      BIGINT NOT NULL DEFAULT 0,
	budget_period   BIGINT NOT NULL DEFAULT 0,
	budget_start_ms BIGINT NOT NULL DEFAULT 0,
	budget_room     BIGINT NOT NULL DEFAULT 0
);

-- limit_lease: what a node holds of a key until expires_ms (renewed every sync):
-- concurrency slots and budget granted and not yet returned. A lease past its expiry
-- holds nothing (its slots count for no one). key_id 0: the node's presence (how many
-- nodes share a limit when the store is lost).
CREATE TABLE IF NOT EXISTS limit_lease (
	key_id      BIGINT NOT NULL,
	node        TEXT NOT NULL CHECK (node <> ''),
	slots       BIGINT NOT NULL DEFAULT 0,
	budget_held BIGINT NOT NULL DEFAULT 0,
	expires_ms  BIGINT NOT NULL,
	PRIMARY KEY (key_id, node)
);
