-- requests_page_end_user: requests_page for one end user (:end_user, its id matched
-- exactly), walking the index requests_end_user_started_at (end_user, started_at,
-- rowid; PostgreSQL's ends in id) backwards: an end user's page reads its own rows, not
-- every row of the range or of its key between them. The index holds no row without an
-- end user (it is partial; end_user = :end_user implies NOT NULL). Every other filter
-- applies to those rows: :has_key selects the key filter (:key_id NULL: rows without a
-- key, which may name an end user too), :has_team the team filter (:team_id NULL: rows
-- without a team).
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
WHERE r.end_user = :end_user
  AND r.started_at >= :from_ms
  AND (r.started_at, r.id) < (:before_ms, :before_id)
  AND (:has_key = 0 OR r.key_id IS NOT DISTINCT FROM :key_id)
  AND (CAST(:model AS TEXT) IS NULL OR r.model = :model)
  AND (:has_team = 0 OR r.team_id = :team_id
       OR (CAST(:team_id AS BIGINT) IS NULL AND r.team_id IS NULL))
  AND (CAST(:provider AS TEXT) IS NULL OR r.provider = :provider)
  AND (CAST(:status_lo AS BIGINT) IS NULL OR r.status BETWEEN :status_lo AND :status_hi)
  AND (CAST(:outcome AS TEXT) IS NULL OR r.outcome = :outcome)
  AND (:errors_only = 0 OR r.outcome <> 'complete')
  AND (CAST(:stream AS BIGINT) IS NULL OR r.stream = :stream)
  AND (CAST(:tag AS TEXT) IS NULL
       OR replace(',' || r.tags || ',', ',' || :tag || ',', '') <> ',' || r.tags || ',')
ORDER BY r.started_at DESC, r.id DESC
LIMIT :limit;
