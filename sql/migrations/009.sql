-- Version 9: accounting keyed by node, so that several agents (one per node) can share
-- one store (PostgreSQL), each writing its own counters. SQLite cannot change a primary
-- key in place: the table is rebuilt, and the one row of older schemas (id = 1) becomes
-- node 'local', the name an agent on SQLite takes unless told otherwise.
CREATE TABLE accounting_by_node (
	node       TEXT NOT NULL PRIMARY KEY CHECK (node <> ''),
	received   INTEGER NOT NULL,
	written    INTEGER NOT NULL,
	dropped    INTEGER NOT NULL,
	duplicates INTEGER NOT NULL,
	timed_out  INTEGER NOT NULL,
	unpriced   INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	unauthenticated  INTEGER NOT NULL DEFAULT 0,
	pending_overflow INTEGER NOT NULL DEFAULT 0
);
INSERT INTO accounting_by_node (node, received, written, dropped, duplicates, timed_out,
                                unpriced, updated_at, unauthenticated, pending_overflow)
	SELECT 'local', received, written, dropped, duplicates, timed_out, unpriced,
	       updated_at, unauthenticated, pending_overflow
	FROM accounting WHERE id = 1;
DROP TABLE accounting;
ALTER TABLE accounting_by_node RENAME TO accounting;
