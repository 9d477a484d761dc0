-- requests_page: one page of request rows, newest first, keyset-paginated on
-- (started_at, id) below (:before_ms, :before_id): the cursor, or (to, INT64_MIN) for a
-- first page (queryd binds the lower of the two). That row value is the upper bound of
-- a backwards walk of the index requests_started_at (rowid is its last column): no
-- sort, no OFFSET. Columns: those of queryd/row.c. :limit is the page size plus one.
-- :has_team selects the team filter (:team_id NULL: rows without a team; a team's own
-- rows are requests_page_team's). A tag's page is requests_page_tag's, the team's
-- or model's filter with it.
-- CAST(:x AS T) IS NULL: PostgreSQL types a parameter by its first use.
SELECT r.request_id, r.key_id, k.name AS key_name, r.model, r.model_requested, r.provider,
       r.verdict, r.status, r.stream, r.prompt_tokens, r.completion_tokens, r.cached_tokens,
       r.cache_creation_tokens, r.reasoning_tokens, r.cost_micros, r.outcome, r.usage_source,
       r.termination, r.started_at, r.duration_ms, r.ttfb_ms, r.bytes_in, r.bytes_out,
       r.estimated_tokens, r.estimated_cost_micros, r.cache_creation_1h_tokens,
       r.audio_input_tokens, r.audio_output_tokens, r.accepted_prediction_tokens,
       r.rejected_prediction_tokens, r.web_search_calls, r.service_tier, r.team_id,
       t.name AS team_name, r.end_user, r.tags, r.id
FROM requests r LEFT JOIN keys k ON k.id = r.key_id LEFT JOIN teams t ON t.id = r.team_id
WHERE r.started_at >= :from_ms
  AND (r.started_at, r.id) < (:before_ms, :before_id)
  AND (CAST(:model AS TEXT) IS NULL OR r.model = :model)
  AND (:has_team = 0 OR r.team_id = :team_id
       OR (CAST(:team_id AS BIGINT) IS NULL AND r.team_id IS NULL))
  AND (CAST(:provider AS TEXT) IS NULL OR r.provider = :provider)
  AND (CAST(:status_lo AS BIGINT) IS NULL OR r.status BETWEEN :status_lo AND :status_hi)
  AND (CAST(:outcome AS TEXT) IS NULL OR r.outcome = :outcome)
  AND (:errors_only = 0 OR r.outcome <> 'complete')
  AND (CAST(:stream AS BIGINT) IS NULL OR r.stream = :stream)
ORDER BY r.started_at DESC, r.id DESC
LIMIT :limit;
