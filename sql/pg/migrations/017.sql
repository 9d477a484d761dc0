-- Version 17: weekly budgets (docs/limits.md, "Budget periods"): budget_period 'week', from
-- Monday 00:00 UTC, for keys, teams and tags. The constraints are PostgreSQL's names
-- for the columns' CHECKs; a name that did not match would fail the migration.
ALTER TABLE keys DROP CONSTRAINT keys_budget_period_check,
	ADD CONSTRAINT keys_budget_period_check
	CHECK (budget_period IN ('day', 'week', 'month', 'total'));
ALTER TABLE teams DROP CONSTRAINT teams_budget_period_check,
	ADD CONSTRAINT teams_budget_period_check
	CHECK (budget_period IN ('day', 'week', 'month', 'total'));
ALTER TABLE tag_budgets DROP CONSTRAINT tag_budgets_budget_period_check,
	ADD CONSTRAINT tag_budgets_budget_period_check
	CHECK (budget_period IN ('day', 'week', 'month', 'total'));
