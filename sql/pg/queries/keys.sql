-- keys on PostgreSQL (sql/queries/keys.sql is the same answer on SQLite): the key list
-- as a JSON array by json_agg (SQLite: json_group_array), a lateral sum per key (its
-- GROUP BY over a subquery's columns is refused here), the CASE's parameters typed
-- BIGINT (else the 0 makes them integer), and names sorted by byte as SQLite does,
-- whatever the database's collation.
SELECT k.id, k.name, k.prefix, k.default_model, k.created_at, k.revoked_at, k.team_id,
       (SELECT name FROM teams WHERE id = k.team_id) AS team_name, k.end_users, k.rpm,
       k.tpm, k.max_concurrent, k.budget_micros, k.budget_period, x.period_start,
       (SELECT coalesce(json_agg(model ORDER BY model COLLATE "C"), '[]')
        FROM key_models WHERE key_id = k.id) AS models,
       coalesce(u.cost_micros, 0) AS cost_micros,
       coalesce(u.estimated_cost_micros, 0) AS estimated_cost_micros,
       coalesce(u.requests, 0) AS requests,
       coalesce(u.total_tokens, 0) AS total_tokens,
       k.budget_tz
FROM keys k
CROSS JOIN LATERAL (SELECT CASE k.budget_period WHEN 'day' THEN CAST(:day_start AS BIGINT)
                                                WHEN 'week' THEN CAST(:week_start AS BIGINT)
                                                WHEN 'month' THEN CAST(:month_start AS BIGINT)
                                                ELSE 0 END AS period_start) x
LEFT JOIN LATERAL (SELECT sum(cost_micros) AS cost_micros,
                          sum(estimated_cost_micros) AS estimated_cost_micros,
                          sum(requests) AS requests,
                          sum(prompt_tokens + completion_tokens) AS total_tokens
                   FROM usage_daily
                   WHERE key_id = k.id AND day >= x.period_start) u ON true
ORDER BY k.name COLLATE "C";
