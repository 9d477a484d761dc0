-- Version 22: request_tags, a row per tag of each request row, so that a page or an
-- export of one tag walks that tag's rows alone (docs/performance.md, "Tags": a rare
-- tag's page walked every row of its range). Kept by triggers on requests, so every
-- path that inserts or deletes a row (the writer, tally-gen, prune) keeps it exact;
-- back-filled from the rows' tags. The text is split at its commas by a recursive
-- query, which no text makes fail (a row the store refused would be a row lost); it
-- stops where no comma is left, as instr() and substr() disagree past a NUL byte.
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
INSERT OR IGNORE INTO request_tags (tag, started_at, id)
  WITH RECURSIVE s(tag, started_at, id, rest) AS (
    SELECT NULL, started_at, id, tags || ',' FROM requests WHERE tags IS NOT NULL
    UNION ALL
    SELECT substr(rest, 1, instr(rest, ',') - 1), started_at, id,
           substr(rest, instr(rest, ',') + 1)
    FROM s WHERE instr(rest, ',') > 0)
  SELECT tag, started_at, id FROM s WHERE tag IS NOT NULL ORDER BY 1, 2, 3;
