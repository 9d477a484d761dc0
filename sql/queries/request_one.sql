-- request_one: the row of one request id. Columns: those of queryd/row.c.
SELECT r.request_id, r.key_id, k.name AS key_name, r.model, r.model_requested, r.provider,
       r.verdict, r.status, r.stream, r.prompt_tokens, r.completion_tokens, r.cached_tokens,
       r.cache_creation_tokens, r.reasoning_tokens, r.cost_micros, r.outcome, r.usage_source,
       r.termination, r.started_at, r.duration_ms, r.ttfb_ms, r.bytes_in, r.bytes_out,
       r.estimated_tokens, r.estimated_cost_micros, r.cache_creation_1h_tokens,
       r.audio_input_tokens, r.audio_output_tokens, r.accepted_prediction_tokens,
       r.rejected_prediction_tokens, r.web_search_calls, r.service_tier, r.team_id,
       t.name AS team_name, r.end_user, r.tags, r.id
FROM requests r LEFT JOIN keys k ON k.id = r.key_id LEFT JOIN teams t ON t.id = r.team_id
WHERE r.request_id = :request_id;
