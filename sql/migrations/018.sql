-- Version 18: end users' limits (docs/limits.md, "End users").
CREATE TABLE end_user_limits (
	id             INTEGER PRIMARY KEY AUTOINCREMENT CHECK (id > 0),  -- never reused
	key_id         INTEGER REFERENCES keys (id) ON DELETE CASCADE,
	team_id        INTEGER REFERENCES teams (id) ON DELETE CASCADE,
	end_user       TEXT NOT NULL CHECK (length(CAST(end_user AS BLOB)) <= 256),
	created_at     INTEGER NOT NULL,
	rpm            INTEGER CHECK (rpm > 0),
	tpm            INTEGER CHECK (tpm > 0),
	budget_micros  INTEGER CHECK (budget_micros > 0),
	budget_period  TEXT NOT NULL DEFAULT 'month' CHECK (budget_period IN ('day', 'week', 'month', 'total')),
	CHECK ((key_id IS NULL) <> (team_id IS NULL)),
	UNIQUE (key_id, end_user),
	UNIQUE (team_id, end_user)
);
CREATE TRIGGER end_user_limits_gen_insert AFTER INSERT ON end_user_limits BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER end_user_limits_gen_update AFTER UPDATE ON end_user_limits BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
CREATE TRIGGER end_user_limits_gen_delete AFTER DELETE ON end_user_limits BEGIN
	UPDATE meta SET value = value + 1 WHERE name = 'config_generation';
END;
