"""The latency buckets of every rollup (common/rollup.h's bounds, as sql/schema.sql
names them lat_le_B and lat_gt_60000), for the suites that check queryd's latency
figures against the rows they seeded (test_queryd.py, test_dashboard.py)."""
LATENCY_BOUNDS = [25, 50, 100, 200, 350, 500, 750, 1000, 1500, 2500, 4000, 6000, 10000,
                  20000, 60000]

# --- a rollup a test fills itself -------------------------------------------------------
# tally-gen --ndjson reads no tags yet: the suites that read tags (test_queryd.py,
# test_dashboard.py) set requests.tags and tag_daily here, with the writer's sums.
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
           "streams": sum(r.get("stream") in (1, True) for r in rows),
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


def store_tags(con, rows):
    """Each row's tags (r["tags"], canonical text, None: none) into requests.tags, and
    the tag_daily rows the writer keeps of them: per tag, UTC day and key, a row with n
    tags in n of them, rows without a key or tags in none. con: a sqlite3 connection
    (committed here)."""
    groups = {}
    for r in rows:
        if r.get("key_id") is not None and r.get("tags"):
            day = r["started_at"] // 86_400_000 * 86400
            for t in r["tags"].split(","):
                groups.setdefault((day, t, r["key_id"]), []).append(r)
    cols = ["day", "tag", "key_id"] + SUMS
    with con:
        con.executemany("UPDATE requests SET tags = ? WHERE request_id = ?",
                        [(r.get("tags"), r["request_id"]) for r in rows])
        con.executemany(f"INSERT INTO tag_daily ({', '.join(cols)})"
                        f" VALUES ({', '.join('?' * len(cols))})",
                        [(*g, *rollup_sums(rs).values()) for g, rs in groups.items()])
