-- models on PostgreSQL (sql/queries/models.sql is the same answer on SQLite): only the
-- order differs, names and tiers sorted by byte as SQLite does, whatever the
-- database's collation.
SELECT m.id, m.name, p.name, p.api,
       coalesce(u.requests, 0), coalesce(u.total_tokens, 0), coalesce(u.cost_micros, 0),
       coalesce(u.estimated_cost_micros, 0),
       c.tier, c.above_tokens, c.input_micros_per_mtok, c.cached_micros_per_mtok,
       c.cache_write_micros_per_mtok, c.cache_write_1h_micros_per_mtok,
       c.output_micros_per_mtok, c.reasoning_micros_per_mtok, c.audio_input_micros_per_mtok,
       c.audio_output_micros_per_mtok, c.web_search_micros_per_call
FROM models m
JOIN providers p ON p.id = m.provider_id
LEFT JOIN (SELECT model, sum(requests) AS requests,
                  sum(prompt_tokens + completion_tokens) AS total_tokens,
                  sum(cost_micros) AS cost_micros,
                  sum(estimated_cost_micros) AS estimated_cost_micros
           FROM model_daily WHERE day >= :month_start GROUP BY model) u ON u.model = m.name
LEFT JOIN model_prices c ON c.model_id = m.id
ORDER BY m.name COLLATE "C", c.tier <> 'default', c.tier COLLATE "C", c.above_tokens;
