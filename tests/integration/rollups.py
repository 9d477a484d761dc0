"""The writer's sums of request rows as a rollup row (the summed columns of
sql/schema.sql's rollups, common/rollup.h), for a rollup a test fills itself:
tally-gen --ndjson reads no end user, so the suites that read end users
(test_queryd.py, test_dashboard.py) set requests.end_user and end_user_daily here.
test_queryd checks rollup_sums against the writer's own key_daily rows."""
LATENCY_BOUNDS = [25, 50, 100, 200, 350, 500, 750, 1000, 1500, 2500, 4000, 6000, 10000,
                  20000, 60000]
LATENCY_COLUMNS = [f"lat_le_{b}" for b in LATENCY_BOUNDS] + [f"lat_gt_{LATENCY_BOUNDS[-1]}"]
SUMS = ["requests", "errors", "streams", "prompt_tokens", "completion_tokens",
        "cached_tokens", "cache_creation_tokens", "reasoning_tokens", "cost_micros",
        "unpriced", "duration_ms_sum", "estimated", "estimated_tokens",
        "estimated_cost_micros", "audio_input_tokens", "audio_output_tokens",
        "web_search_calls"] + LATENCY_COLUMNS


def rollup_sums(rows):
    """The summed columns of one rollup row holding rows (dicts with the requests
    table's columns, and unpriced as the agent decides it; a missing one is null)."""
    n = lambda r, k: r.get(k) or 0
    out = {"requests": len(rows),
           "errors": sum(r["outcome"] != "complete" for r in rows),
           "streams": sum(r.get("stream") == 1 for r in rows),
           "unpriced": sum(bool(r.get("unpriced")) for r in rows),
           "duration_ms_sum": sum(n(r, "duration_ms") for r in rows),
           "estimated": sum(r.get("estimated_tokens") is not None for r in rows)}
    for k in ("prompt_tokens", "completion_tokens", "cached_tokens", "cache_creation_tokens",
              "reasoning_tokens", "cost_micros", "estimated_tokens", "estimated_cost_micros",
              "audio_input_tokens", "audio_output_tokens", "web_search_calls"):
        out[k] = sum(n(r, k) for r in rows)
    for c in LATENCY_COLUMNS:
        out[c] = 0
    for r in rows:
        d = r.get("duration_ms")
        if d is not None:
            out[LATENCY_COLUMNS[next((i for i, b in enumerate(LATENCY_BOUNDS) if d <= b),
                                     len(LATENCY_BOUNDS))]] += 1
    return {k: out[k] for k in SUMS}


def store_end_users(con, rows):
    """Each row's end user (r["end_user"], None: none) into requests.end_user, and the
    end_user_daily rows the writer keeps of them: per key, UTC day and end user, rows
    without a key or an end user in none. con: a sqlite3 connection (committed here)."""
    groups = {}
    for r in rows:
        if r.get("key_id") is not None and r.get("end_user") is not None:
            day = r["started_at"] // 86_400_000 * 86400
            groups.setdefault((day, r["key_id"], r["end_user"]), []).append(r)
    cols = ["day", "key_id", "end_user"] + SUMS
    with con:
        con.executemany("UPDATE requests SET end_user = ? WHERE request_id = ?",
                        [(r.get("end_user"), r["request_id"]) for r in rows])
        con.executemany(f"INSERT INTO end_user_daily ({', '.join(cols)})"
                        f" VALUES ({', '.join('?' * len(cols))})",
                        [(*g, *rollup_sums(rs).values()) for g, rs in groups.items()])
