-- Version 14: a team may let its keys read the team's figures on GET /tally/v1/usage
-- (members_see_usage 1); 0, every team's until an operator says otherwise: each key
-- sees its own alone.
ALTER TABLE teams ADD COLUMN members_see_usage BIGINT NOT NULL DEFAULT 0 CHECK (members_see_usage IN (0, 1));
