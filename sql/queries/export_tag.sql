-- export_tag: export for one tag (:tag, a whole name=value), walking request_tags'
-- primary key (tag, started_at, id) in order: the tag's rows alone, not every row of
-- the range. An end user's export filters by tag as it walks its own index
-- (export_end_user). Same filters and columns as export.
-- CAST(:x AS T) IS NULL: PostgreSQL types a parameter by its first use.
SELECT r.request_id, r.key_id, k.name AS key_name, r.model, r.model_requested, r.provider,
       r.verdict, r.status, r.stream, r.prompt_tokens, r.completion_tokens, r.cached_tokens,
       r.cache_creation_tokens, r.reasoning_tokens, r.cost_micros, r.outcome, r.usage_source,
       r.termination, r.started_at, r.duration_ms, r.ttfb_ms, r.bytes_in, r.bytes_out,
       r.estimated_tokens, r.estimated_cost_micros, r.cache_creation_1h_tokens,
       r.audio_input_tokens, r.audio_output_tokens, r.accepted_prediction_tokens,
       r.rejected_prediction_tokens, r.web_search_calls, r.service_tier, r.team_id,
       t.name AS team_name, r.end_user, r.tags, r.id
FROM request_tags g JOIN requests r ON r.id = g.id
     LEFT JOIN keys k ON k.id = r.key_id LEFT JOIN teams t ON t.id = r.team_id
WHERE g.tag = :tag
  AND g.started_at >= :from_ms AND g.started_at < :to_ms
  AND (:has_key = 0 OR r.key_id IS NOT DISTINCT FROM :key_id)
  AND (CAST(:model AS TEXT) IS NULL OR r.model = :model)
  AND (:has_team = 0 OR r.team_id = :team_id
       OR (CAST(:team_id AS BIGINT) IS NULL AND r.team_id IS NULL))
  AND (CAST(:provider AS TEXT) IS NULL OR r.provider = :provider)
  AND (CAST(:status_lo AS BIGINT) IS NULL OR r.status BETWEEN :status_lo AND :status_hi)
  AND (CAST(:outcome AS TEXT) IS NULL OR r.outcome = :outcome)
  AND (:errors_only = 0 OR r.outcome <> 'complete')
  AND (CAST(:stream AS BIGINT) IS NULL OR r.stream = :stream)
ORDER BY g.started_at, g.id;
