-- Version 17: weekly budgets (docs/limits.md, "Budget periods"): budget_period 'week', from
-- Monday 00:00 UTC, for keys, teams and tags. Only the three columns' CHECK widens, which
-- no stored row can fail: SQLite's documented way for such a change is to rewrite the
-- tables' text in sqlite_schema ("Making Other Kinds Of Table Schema Changes" in its
-- ALTER TABLE page), where a rebuild of keys would have to drop a table that others
-- reference with ON DELETE CASCADE. RESET makes this connection read the new text; the
-- table created and dropped after it moves the schema cookie, so that every other
-- connection reads it too, and fails the migration unless all three were rewritten.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql, 'budget_period IN (''day'', ''month'', ''total'')',
                       'budget_period IN (''day'', ''week'', ''month'', ''total'')')
WHERE type = 'table' AND name IN ('keys', 'teams', 'tag_budgets');
PRAGMA writable_schema = RESET;
CREATE TABLE migration_017 (rewritten INTEGER NOT NULL CHECK (rewritten = 3));
INSERT INTO migration_017
SELECT count(*) FROM sqlite_schema
WHERE type = 'table' AND name IN ('keys', 'teams', 'tag_budgets')
  AND instr(sql, 'budget_period IN (''day'', ''week'', ''month'', ''total'')') > 0;
DROP TABLE migration_017;
