-- Version 21: budget periods in a stated time zone per key and team (docs/limits.md,
-- "Time zones"); NULL, as every existing row, keeps UTC.
ALTER TABLE keys ADD COLUMN budget_tz TEXT CHECK (budget_tz <> '');
ALTER TABLE teams ADD COLUMN budget_tz TEXT CHECK (budget_tz <> '');
