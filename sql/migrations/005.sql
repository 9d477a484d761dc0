-- Version 5: estimated usage. A forwarded request whose usage the gateway did not see
-- (or saw in part) is charged an estimate for the missing part: requests gets the
-- estimate's tokens and cost in columns of their own (reported counts stay NULL), the
-- rollups sum them with the count of estimated rows, and the accounting row counts
-- records and decisions refused for a wrong gateway secret and decisions refused
-- because the pending table was full. Rows stored before had no estimate: 0 is exact.
ALTER TABLE requests ADD COLUMN estimated_tokens INTEGER;
ALTER TABLE requests ADD COLUMN estimated_cost_micros INTEGER;
ALTER TABLE usage_hourly ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN estimated_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN estimated_cost_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN estimated_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN estimated_cost_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_hourly ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_hourly ADD COLUMN estimated_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_hourly ADD COLUMN estimated_cost_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_daily ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_daily ADD COLUMN estimated_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE model_daily ADD COLUMN estimated_cost_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE accounting ADD COLUMN unauthenticated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE accounting ADD COLUMN pending_overflow INTEGER NOT NULL DEFAULT 0;
