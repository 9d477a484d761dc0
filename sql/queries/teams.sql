-- teams: every team with its limits, its keys' count, whether its keys may read its
-- usage (members_see_usage) and its spend in its budget period, which starts at
-- :day_start, :week_start, :month_start or 0 (total), from team_daily (the current day's row holds
-- what the writer has committed so far); one row per model of its allow-list
-- (team_models), or one with a NULL model for a team without one, in id order:
-- queryd/api.c folds a team's rows into one object. One text for both stores:
-- correlated sums (teams are few), parameters typed BIGINT for PostgreSQL. A team whose
-- budget_tz names a zone has its period and spend made again from team_spend.sql.
SELECT x.id, x.name, x.created_at, x.rpm, x.tpm, x.max_concurrent, x.budget_micros,
       x.budget_period, x.period_start,
       coalesce((SELECT sum(d.cost_micros) FROM team_daily d
                 WHERE d.team_id = x.id AND d.day >= x.period_start), 0) AS cost_micros,
       coalesce((SELECT sum(d.estimated_cost_micros) FROM team_daily d
                 WHERE d.team_id = x.id AND d.day >= x.period_start), 0)
         AS estimated_cost_micros,
       coalesce((SELECT sum(d.requests) FROM team_daily d
                 WHERE d.team_id = x.id AND d.day >= x.period_start), 0) AS requests,
       coalesce((SELECT sum(d.prompt_tokens + d.completion_tokens) FROM team_daily d
                 WHERE d.team_id = x.id AND d.day >= x.period_start), 0) AS total_tokens,
       (SELECT count(*) FROM keys k WHERE k.team_id = x.id) AS keys,
       x.members_see_usage,
       m.model,
       x.budget_tz
FROM (SELECT t.*, CASE t.budget_period WHEN 'day' THEN CAST(:day_start AS BIGINT)
                                       WHEN 'week' THEN CAST(:week_start AS BIGINT)
                                       WHEN 'month' THEN CAST(:month_start AS BIGINT)
                                       ELSE 0 END AS period_start
      FROM teams t) x
LEFT JOIN team_models m ON m.team_id = x.id
ORDER BY x.id, m.model;
