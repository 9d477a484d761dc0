-- models: every model with its provider, usage since :month_start (rows whose model
-- equals the configured name, from model_daily: a row per model, provider and day, the
-- keys already summed; reported and estimated cost apart) and
-- its rate cards: one row per card, ordered as the API lists them ('default' first,
-- then by tier, then by prompt size), or one row with a NULL tier for a model without
-- cards. queryd/api.c folds a model's rows into one object.
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
ORDER BY m.name, c.tier <> 'default', c.tier, c.above_tokens;
