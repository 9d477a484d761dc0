-- Version 22: request_tags, a row per tag of each request row, so that a page or an
-- export of one tag walks that tag's rows alone (docs/performance.md, "Tags": a rare
-- tag's page walked every row of its range). Kept by triggers on requests (an INSERT
-- ... SELECT per statement of the writer's, from its transition table; a delete by
-- the primary key per row deleted, which a plan over a transition table could not
-- promise), so every path that inserts or deletes a row (the writer, tally-gen,
-- prune) keeps it exact; back-filled from the rows' tags. A tag twice in a text is
-- stored once: no text makes the row's INSERT fail (a row the store refused would be
-- a row lost).
CREATE TABLE request_tags (
	tag        TEXT NOT NULL,
	started_at BIGINT NOT NULL,  -- requests.started_at
	id         BIGINT NOT NULL,  -- requests.id
	PRIMARY KEY (tag, started_at, id)
);
CREATE FUNCTION tally_request_tags_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO request_tags (tag, started_at, id)
	SELECT DISTINCT t.tag, n.started_at, n.id
	FROM tally_new_requests n, unnest(string_to_array(n.tags, ',')) AS t(tag)
	WHERE n.tags IS NOT NULL;
	RETURN NULL;
END $$;
CREATE FUNCTION tally_request_tags_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM request_tags WHERE tag = ANY (string_to_array(OLD.tags, ','))
	  AND started_at = OLD.started_at AND id = OLD.id;
	RETURN NULL;
END $$;
CREATE TRIGGER requests_tags_insert AFTER INSERT ON requests
	REFERENCING NEW TABLE AS tally_new_requests
	FOR EACH STATEMENT EXECUTE FUNCTION tally_request_tags_insert();
CREATE TRIGGER requests_tags_delete AFTER DELETE ON requests
	FOR EACH ROW WHEN (OLD.tags IS NOT NULL) EXECUTE FUNCTION tally_request_tags_delete();
INSERT INTO request_tags (tag, started_at, id)
  SELECT t.tag, r.started_at, r.id
  FROM requests r, unnest(string_to_array(r.tags, ',')) AS t(tag)
  WHERE r.tags IS NOT NULL
  ON CONFLICT DO NOTHING;
