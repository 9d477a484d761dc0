-- accounting: the agent's durable counters, shown by /api/live when the agent is down.
SELECT received, written, dropped, duplicates, timed_out, unpriced, updated_at,
       unauthenticated, pending_overflow
FROM accounting WHERE id = 1;
