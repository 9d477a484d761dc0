-- keys: every key with its team (id and name, NULL: none), its end-user policy, its
-- allow-list (a JSON array), limits and spend in its budget period, which starts at
-- :day_start, :week_start, :month_start or 0 (total). Spend comes from usage_daily through its
-- (key_id, day) index, one range per key for all the sums: the current day's row holds
-- what the writer has committed so far. Reported and estimated cost apart; queryd adds
-- them into what the budget is charged. A key whose budget_tz names a zone has its
-- period and spend made again from key_spend.sql (a zone's day is no UTC day).
SELECT x.id, x.name, x.prefix, x.default_model, x.created_at, x.revoked_at, x.team_id,
       (SELECT name FROM teams WHERE id = x.team_id) AS team_name, x.end_users, x.rpm,
       x.tpm, x.max_concurrent, x.budget_micros, x.budget_period, x.period_start,
       (SELECT json_group_array(model)
        FROM (SELECT model FROM key_models WHERE key_id = x.id ORDER BY model)) AS models,
       coalesce(sum(u.cost_micros), 0) AS cost_micros,
       coalesce(sum(u.estimated_cost_micros), 0) AS estimated_cost_micros,
       coalesce(sum(u.requests), 0) AS requests,
       coalesce(sum(u.prompt_tokens + u.completion_tokens), 0) AS total_tokens,
       x.budget_tz
FROM (SELECT k.*, CASE k.budget_period WHEN 'day' THEN :day_start
                                       WHEN 'week' THEN :week_start
                                       WHEN 'month' THEN :month_start
                                       ELSE 0 END AS period_start
      FROM keys k) x
LEFT JOIN usage_daily u ON u.key_id = x.id AND u.day >= x.period_start
GROUP BY x.id
ORDER BY x.name;
