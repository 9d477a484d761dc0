-- Version 14: a team may let its keys read the team's figures on GET /tally/v1/usage
-- (members_see_usage 1); 0, every team's until an operator says otherwise: each key
-- sees its own alone.
ALTER TABLE teams ADD COLUMN members_see_usage BIGINT NOT NULL DEFAULT 0 CHECK (members_see_usage IN (0, 1));
-- The key's and the team's spend since an hour read from an index alone: the usage
-- endpoint asks for it on an I/O thread (7 ms against 66 us for a key busy every hour of
-- a month on 5 models, SQLite).
CREATE INDEX key_hourly_key_hour ON key_hourly (key_id, hour, cost_micros, estimated_cost_micros);
CREATE INDEX team_hourly_team_hour ON team_hourly (team_id, hour, cost_micros, estimated_cost_micros);
