-- accounting: the agents' durable counters, shown by /api/live when the agent is down:
-- summed over the nodes (a row each since schema 9; one agent's store holds its own),
-- updated_at the newest. A store no agent has written to reads zeros.
SELECT coalesce(sum(received), 0), coalesce(sum(written), 0), coalesce(sum(dropped), 0),
       coalesce(sum(duplicates), 0), coalesce(sum(timed_out), 0), coalesce(sum(unpriced), 0),
       coalesce(max(updated_at), 0), coalesce(sum(unauthenticated), 0),
       coalesce(sum(pending_overflow), 0)
FROM accounting;
