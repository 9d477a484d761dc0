-- team_spend: a team's spend since :start (unix seconds), for a budget whose period begins
-- at a zone's midnight (teams.budget_tz; queryd/api.c asks it for those teams alone):
-- team_hourly from :start's first whole hour on, and the team's rows before that hour, where
-- a zone off the hour (+05:30) begins its day; an empty range on the hour. The agent
-- seeds its budgets by the same split (spoa/spend.c). One text for both stores.
SELECT coalesce(h.cost_micros, 0) + coalesce(r.cost_micros, 0) AS cost_micros,
       coalesce(h.estimated_cost_micros, 0) + coalesce(r.estimated_cost_micros, 0)
         AS estimated_cost_micros,
       coalesce(h.requests, 0) + r.requests AS requests,
       coalesce(h.total_tokens, 0) + coalesce(r.total_tokens, 0) AS total_tokens
FROM (SELECT sum(cost_micros) AS cost_micros,
             sum(estimated_cost_micros) AS estimated_cost_micros,
             sum(requests) AS requests,
             sum(prompt_tokens + completion_tokens) AS total_tokens
      FROM team_hourly
      WHERE team_id = CAST(:id AS BIGINT) AND hour >= CAST(:start AS BIGINT)) h,
     (SELECT sum(cost_micros) AS cost_micros,
             sum(estimated_cost_micros) AS estimated_cost_micros,
             count(*) AS requests,
             sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)) AS total_tokens
      FROM requests
      WHERE team_id = CAST(:id AS BIGINT) AND started_at >= CAST(:start AS BIGINT) * 1000
        AND started_at < (CAST(:start AS BIGINT) + 3599) / 3600 * 3600000) r;
