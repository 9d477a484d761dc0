-- requests_page_key: requests_page for one key (:key_id), walking the index
-- requests_key_started_at (key_id, started_at, rowid) backwards. Rows without a key
-- are requests_page_nokey's: PostgreSQL walks no index for IS NOT DISTINCT FROM.
-- :tag keeps rows carrying that whole tag (as requests_page_nokey, requests_page_end_user
-- and export_end_user do): r.tags is canonical (sorted, comma-joined, no spaces), so
-- ',' || :tag || ',' is a part of ',' || r.tags || ',' exactly then; replace() finds it
-- on both stores (LIKE's _ is a wildcard and SQLite's LIKE ignores case; instr and
-- strpos are one store's each). The walk starts below the tag's last day (queryd
-- lowers :before_ms to tag_until.sql's).
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
WHERE r.key_id = :key_id
  AND r.started_at >= :from_ms
  AND (r.started_at, r.id) < (:before_ms, :before_id)
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
