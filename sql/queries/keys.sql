-- keys: every key with its allow-list (a JSON array), limits and spend in its budget
-- period, which starts at :day_start, :month_start or 0 (total). Spend comes from
-- usage_daily through its (key_id, day) index: the current day's row holds what the
-- writer has committed so far.
SELECT x.id, x.name, x.prefix, x.default_model, x.created_at, x.revoked_at, x.rpm, x.tpm,
       x.max_concurrent, x.budget_micros, x.budget_period, x.period_start,
       (SELECT json_group_array(model)
        FROM (SELECT model FROM key_models WHERE key_id = x.id ORDER BY model)) AS models,
       (SELECT coalesce(sum(cost_micros), 0) FROM usage_daily
        WHERE key_id = x.id AND day >= x.period_start) AS cost_micros,
       (SELECT coalesce(sum(requests), 0) FROM usage_daily
        WHERE key_id = x.id AND day >= x.period_start) AS requests,
       (SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM usage_daily
        WHERE key_id = x.id AND day >= x.period_start) AS total_tokens
FROM (SELECT k.*, CASE k.budget_period WHEN 'day' THEN :day_start
                                       WHEN 'month' THEN :month_start
                                       ELSE 0 END AS period_start
      FROM keys k) x
ORDER BY x.name;
