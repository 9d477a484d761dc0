-- Version 6: stored responses. The agent keeps which key made which response of the
-- Responses API, so that only that key reaches it again.
CREATE TABLE stored_responses (
	response_id TEXT PRIMARY KEY,
	key_id      INTEGER NOT NULL,
	model       TEXT NOT NULL,
	request_id  TEXT NOT NULL,
	created_at  INTEGER NOT NULL
);
CREATE INDEX stored_responses_created_at ON stored_responses (created_at);
