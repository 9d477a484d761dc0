-- models: every model with its provider, prices and usage since :month_start (rows
-- whose model equals the configured name), from usage_daily; reported and estimated
-- cost apart.
SELECT m.id, m.name, p.name, p.api, m.input_micros_per_mtok, m.output_micros_per_mtok,
       m.cached_micros_per_mtok, m.cache_write_micros_per_mtok,
       coalesce(u.requests, 0), coalesce(u.total_tokens, 0), coalesce(u.cost_micros, 0),
       coalesce(u.estimated_cost_micros, 0)
FROM models m
JOIN providers p ON p.id = m.provider_id
LEFT JOIN (SELECT model, sum(requests) AS requests,
                  sum(prompt_tokens + completion_tokens) AS total_tokens,
                  sum(cost_micros) AS cost_micros,
                  sum(estimated_cost_micros) AS estimated_cost_micros
           FROM usage_daily WHERE day >= :month_start GROUP BY model) u ON u.model = m.name
ORDER BY m.name;
