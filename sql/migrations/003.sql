-- Version 3: per-key limits.
ALTER TABLE keys ADD COLUMN rpm INTEGER CHECK (rpm > 0);
ALTER TABLE keys ADD COLUMN tpm INTEGER CHECK (tpm > 0);
ALTER TABLE keys ADD COLUMN max_concurrent INTEGER CHECK (max_concurrent > 0);
ALTER TABLE keys ADD COLUMN budget_micros INTEGER CHECK (budget_micros > 0);
ALTER TABLE keys ADD COLUMN budget_period TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'month', 'total'));
CREATE INDEX usage_hourly_key_hour ON usage_hourly (key_id, hour);
