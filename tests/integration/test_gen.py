"""Integration tests for tally-gen ($TALLY_BUILD/tally-gen), the tool that fills a tally
database through the agent's own queue and writer: --ndjson rows land exactly as given,
the rollups equal SQL sums over the rows, the accounting row is exact, bad input is
refused with its line number and nothing stored; random rows are deterministic for a
seed and have the documented shape. The store-dependent cases run on SQLite and on
PostgreSQL (a database of the private test cluster, tests/pgserver.py), where random
rows must be the same rows as on SQLite. With TALLY_VALGRIND=1 every run goes through
valgrind memcheck."""

import json
import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("TALLY_BUILD", "build"))
GEN = (BUILD if BUILD.is_absolute() else ROOT / BUILD) / "tally-gen"
VALGRIND = ["valgrind", "-q", "--error-exitcode=99", "--leak-check=full",
            "--errors-for-leak-kinds=definite"] if os.environ.get("TALLY_VALGRIND") else []

END = 1764806400            # 2025-12-04 00:00 UTC, a Thursday
LATENCY_BOUNDS = [25, 50, 100, 200, 350, 500, 750, 1000, 1500, 2500, 4000, 6000, 10000,
                  20000, 60000]
COLUMNS = ["request_id", "key_id", "model", "model_requested", "provider", "verdict",
           "status", "stream", "prompt_tokens", "completion_tokens", "cached_tokens",
           "cache_creation_tokens", "reasoning_tokens", "cost_micros", "outcome",
           "usage_source", "termination", "started_at", "duration_ms", "ttfb_ms",
           "bytes_in", "bytes_out", "estimated_tokens", "estimated_cost_micros", "end_user"]
SUMMED = ["prompt_tokens", "completion_tokens", "cached_tokens", "cache_creation_tokens",
          "reasoning_tokens", "cost_micros"]
ESTIMATED = ["estimated_tokens", "estimated_cost_micros"]
COUNTERS = ["received", "written", "dropped", "duplicates", "timed_out", "unpriced",
            "unauthenticated", "pending_overflow"]
DONE_RE = re.compile(r"tally-gen: (\d+) rows written \((\d+) duplicates, (\d+) dropped\) "
                     r"in [0-9.]+ s: \d+ rows/s")


def run(args, stdin=None, timeout=300):
    if not GEN.exists():
        pytest.fail(f"{GEN} is not built (run make)")
    return subprocess.run(VALGRIND + [str(GEN)] + [str(a) for a in args], input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def gen_ok(args, stdin=None):
    proc = run(args, stdin)
    assert proc.returncode == 0, proc.stderr
    m = DONE_RE.search(proc.stdout)
    assert m, proc.stdout
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def is_pg(db):
    return str(db).startswith("postgresql://")


def query(db, sql, args=()):
    """Rows of sql on db, a SQLite path or a PostgreSQL URL; parameters are written ?."""
    if is_pg(db):
        import psycopg2
        con = psycopg2.connect(db)
        try:
            with con.cursor() as cur:
                cur.execute(sql.replace("?", "%s"), args)
                return cur.fetchall()
        finally:
            con.close()
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def n(cond):
    """1 where cond holds, else 0, on both stores (PostgreSQL sums no booleans)."""
    return f"CASE WHEN {cond} THEN 1 ELSE 0 END"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    """(db, secret options) of an empty store: a SQLite path, or a fresh PostgreSQL
    database with the key secret named (a URL has no file beside it)."""
    if request.param == "sqlite":
        return tmp_path / "t.db", []
    return request.getfixturevalue("pg_url"), ["--secret", tmp_path / "key.secret"]


def accounting(db):
    (row,) = query(db, f"SELECT {', '.join(COUNTERS)} FROM accounting")
    return dict(zip(COUNTERS, row))


# What a kind of rollup table groups by after its period, as (SQL over requests, the
# table's column) pairs, and the rows it holds.
BY_KEY_MODEL = ([("coalesce(key_id, 0)", "key_id"), ("coalesce(model, '')", "model"),
                 ("coalesce(provider, '')", "provider")], "1 = 1")          # usage_*
BY_MODEL = (BY_KEY_MODEL[0][1:], "1 = 1")                                   # model_*
BY_TEAM = ([("team_id", "team_id")], "team_id IS NOT NULL")                 # team_*
BY_END_USER = ([("key_id", "key_id"), ("end_user", "end_user")],
               "key_id > 0 AND end_user IS NOT NULL")                       # end_user_daily


def rollup_sql(table, unit, seconds, by):
    """The rollup table's rows as SQL computes them from requests (schema.sql's rules),
    and as stored: period, the columns of by (BY_*), then the sums."""
    dims, where = by
    buckets, prev = [], None
    for b in LATENCY_BOUNDS:
        low = "duration_ms >= 0" if prev is None else f"duration_ms > {prev}"
        buckets.append(f"sum({n(f'{low} AND duration_ms <= {b}')})")
        prev = b
    buckets.append(f"sum({n(f'duration_ms > {LATENCY_BOUNDS[-1]}')})")
    sums = ", ".join(f"sum(coalesce({c}, 0))" for c in SUMMED)
    est = ", ".join(f"sum(coalesce({c}, 0))" for c in ESTIMATED)
    lat = ", ".join(f"coalesce({b}, 0)" for b in buckets)
    groups = ", ".join(str(i) for i in range(1, len(dims) + 2))
    expected = (
        f"SELECT started_at / 1000 / {seconds} * {seconds},"
        f" {', '.join(sql for sql, _ in dims)}, count(*),"
        " sum(" + n("outcome <> 'complete'") + "), sum(" + n("coalesce(stream, 0) = 1") + "), " + sums + ","
        f" sum({n('cost_micros IS NULL AND (prompt_tokens IS NOT NULL OR completion_tokens IS NOT NULL)')}),"
        f" sum(coalesce(duration_ms, 0)), sum({n('estimated_tokens IS NOT NULL')}), " + est + ", " +
        lat + f" FROM requests WHERE {where} GROUP BY {groups}")
    lat_cols = ", ".join([f"lat_le_{b}" for b in LATENCY_BOUNDS] + ["lat_gt_60000"])
    stored = (f"SELECT {unit}, {', '.join(col for _, col in dims)}, requests,"
              " errors, streams, " + ", ".join(SUMMED) + ", unpriced, duration_ms_sum,"
              " estimated, " + ", ".join(ESTIMATED) + ", " + lat_cols + f" FROM {table}")
    return expected, stored


def assert_consistent(db):
    """Rollups equal SQL sums over the rows; received = written + dropped, nothing
    dropped, written = the rows stored."""
    for table, unit, seconds, by in (("usage_hourly", "hour", 3600, BY_KEY_MODEL),
                                     ("usage_daily", "day", 86400, BY_KEY_MODEL),
                                     ("model_hourly", "hour", 3600, BY_MODEL),
                                     ("model_daily", "day", 86400, BY_MODEL),
                                     ("end_user_daily", "day", 86400, BY_END_USER)):
        expected, stored = rollup_sql(table, unit, seconds, by)
        assert sorted(query(db, expected)) == sorted(query(db, stored)), table
    acc = accounting(db)
    (count,) = query(db, "SELECT count(*) FROM requests")[0]
    assert acc["received"] == acc["written"] + acc["dropped"]
    assert acc["dropped"] == 0
    assert acc["written"] == count
    (timed_out,) = query(db, "SELECT count(*) FROM requests WHERE outcome = 'no_record'")[0]
    assert acc["timed_out"] == timed_out
    return acc


# ---- --ndjson ----

ROWS = [
    {"request_id": "1764806399123-1A2B-3C-000000009F8E7D6C", "key_id": 3,
     "model": "gpt-4o-2024-08-06", "model_requested": "gpt-4o", "provider": "openai",
     "verdict": "allow", "status": 200, "stream": True, "prompt_tokens": 812,
     "completion_tokens": 301, "cached_tokens": 0, "cache_creation_tokens": None,
     "reasoning_tokens": None, "cost_micros": 5040, "unpriced": False, "outcome": "complete",
     "usage_source": "stream", "termination": "--", "started_at": 1764806399123,
     "duration_ms": 2210, "ttfb_ms": 380, "bytes_in": 2301, "bytes_out": 9120},
    # The same hour, key and model: summed into one rollup row; stream given as 0.
    {"request_id": "r-2", "key_id": 3, "model": "gpt-4o-2024-08-06", "provider": "openai",
     "status": 200, "stream": 0, "prompt_tokens": 10, "completion_tokens": 20,
     "cost_micros": 7, "outcome": "complete", "usage_source": "response",
     "started_at": 1764806300000, "duration_ms": 25, "bytes_in": 1, "bytes_out": 2,
     "end_user": "alice@example.com"},
    # Unpriced: usage, no cost.
    {"request_id": "r-3", "key_id": 4, "model": "qwen", "provider": "vllm", "status": 200,
     "stream": 1, "prompt_tokens": 100, "completion_tokens": 50, "unpriced": 1,
     "outcome": "complete", "usage_source": "stream", "started_at": 1764720000000,
     "duration_ms": 60001},
    # A denial, no key, booleans as 0/1 and explicit nulls.
    {"request_id": "r-4", "key_id": None, "model": "claude-opus-4", "verdict": "budget_exceeded",
     "status": 402, "stream": None, "outcome": "denied", "started_at": 1764700000000,
     "duration_ms": 0, "termination": "PR"},
    # Everything optional missing but the estimate of a request whose record never came.
    {"request_id": "r-5", "outcome": "no_record", "started_at": 1700000000000,
     "estimated_tokens": 700, "estimated_cost_micros": 1750},
    {"request_id": "r-6", "key_id": 1, "model": "claude-sonnet-4", "provider": "anthropic",
     "status": 200, "stream": True, "prompt_tokens": 5000, "cached_tokens": 1000,
     "cache_creation_tokens": 2000, "outcome": "client_abort", "usage_source": "partial",
     "termination": "CD", "started_at": 1764806399999, "duration_ms": 999, "ttfb_ms": 500,
     "cost_micros": 12345, "estimated_tokens": 4096, "estimated_cost_micros": 61440,
     "end_user": "J\u00f6rg \"J\" M\u00fcller"},
    # An estimate without a price (a null cost).
    {"request_id": "r-7", "key_id": 2, "model": "o3", "provider": "openai", "status": 503,
     "stream": False, "outcome": "upstream_error", "termination": "sH",
     "started_at": 1764806399000, "reasoning_tokens": 0, "duration_ms": 123456,
     "estimated_tokens": 3000, "estimated_cost_micros": None},
    # An estimate of 0 tokens, in r-7's hour and model.
    {"request_id": "r-9", "key_id": 2, "model": "o3", "provider": "openai", "status": 200,
     "stream": False, "outcome": "complete", "usage_source": "none", "termination": "--",
     "started_at": 1764806398000, "estimated_tokens": 0, "estimated_cost_micros": 0},
]


def expected_row(obj):
    out = []
    for c in COLUMNS:
        v = obj.get(c)
        if isinstance(v, bool):
            v = int(v)
        if c == "usage_source" and v is None:
            v = "none"
        if v == "":
            v = None
        out.append(v)
    return tuple(out)


def ndjson(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_ndjson_rows_land_exactly(tmp_path, store):
    db, _ = store
    # A blank line and CRLF ends are accepted.
    text = ndjson(ROWS[:3]) + "\n  \n" + ndjson(ROWS[3:]).replace("\n", "\r\n")
    src = tmp_path / "rows.ndjson"
    src.write_text(text)
    assert gen_ok(["--db", db, "--ndjson", src]) == (len(ROWS), 0, 0)
    got = query(db, "SELECT " + ", ".join(COLUMNS) + " FROM requests ORDER BY id")
    assert got == [expected_row(r) for r in ROWS]
    acc = assert_consistent(db)
    assert acc == {"received": len(ROWS), "written": len(ROWS), "dropped": 0,
                   "duplicates": 0, "timed_out": 1, "unpriced": 1, "unauthenticated": 0,
                   "pending_overflow": 0}
    # The two rows of key 3 in one hour make one rollup row.
    assert query(db, "SELECT requests, streams, prompt_tokens, cost_micros, lat_le_25"
                     " FROM usage_hourly WHERE key_id = 3") == [(2, 1, 822, 5047, 1)]
    # Estimates are summed beside the reported figures: a null cost adds nothing, an
    # estimate of 0 tokens still counts as one.
    assert query(db, "SELECT requests, estimated, estimated_tokens, estimated_cost_micros,"
                     " cost_micros FROM model_hourly WHERE model = 'o3'") == [(2, 2, 3000, 0, 0)]
    assert query(db, "SELECT sum(estimated), sum(estimated_tokens), sum(estimated_cost_micros)"
                     " FROM usage_daily") == [(4, 7796, 63190)]

    # A second run continues the counters; a request id already stored is a duplicate.
    more = [dict(ROWS[0]), {"request_id": "r-8", "outcome": "complete", "started_at": 1}]
    assert gen_ok(["--db", db, "--ndjson", "-"], stdin=ndjson(more)) == (1, 1, 0)
    acc = assert_consistent(db)
    assert (acc["received"], acc["written"], acc["duplicates"]) == (len(ROWS) + 1,
                                                                     len(ROWS) + 1, 1)


BAD_LINES = [
    ("{\"request_id\": \"x\", ", "not a JSON object"),
    ("[1, 2]", "not a JSON object"),
    ("{\"outcome\": \"complete\", \"started_at\": 1}", "request_id is required"),
    ("{\"request_id\": \"\", \"outcome\": \"complete\", \"started_at\": 1}",
     "request_id must not be empty"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\"}", "started_at is required"),
    ("{\"request_id\": \"x\", \"outcome\": null, \"started_at\": 1}", "outcome is required"),
    ("{\"request_id\": \"x\", \"outcome\": \"done\", \"started_at\": 1}",
     "outcome is not a known outcome name"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1,"
     " \"usage_source\": \"body\"}", "usage_source is not a known"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1,"
     " \"prompt_tokens\": -1}", "prompt_tokens must be an integer"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1.5}",
     "started_at must be an integer"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": \"1\"}",
     "started_at must be an integer"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1, \"stream\": 2}",
     "stream must be true, false, 0 or 1"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1, \"status\": 0}",
     "status must be an integer from 1 to 999"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1, \"modle\": \"m\"}",
     "unknown key \"modle\""),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1, \"started_at\": 2}",
     "started_at given twice"),
    ("{\"request_id\": \"" + "x" * 64 + "\", \"outcome\": \"complete\", \"started_at\": 1}",
     "request_id must be a string of at most 63 bytes"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1} {}",
     "text after the JSON object"),
    ("{\"request_id\": \"x\", \"outcome\": \"no_record\", \"started_at\": 1,"
     " \"estimated_tokens\": -3}", "estimated_tokens must be an integer"),
    ("{\"request_id\": \"x\", \"outcome\": \"no_record\", \"started_at\": 1,"
     " \"estimated_tokens\": 1, \"estimated_cost_micros\": 0.5}",
     "estimated_cost_micros must be an integer"),
    ("{\"request_id\": \"x\", \"outcome\": \"no_record\", \"started_at\": 1,"
     " \"estimated_cost_micros\": 10}", "estimated_cost_micros needs estimated_tokens"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1,"
     " \"end_user\": \"a\\tb\"}", "end_user must be 1 to 256 bytes of UTF-8"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1,"
     " \"end_user\": \"\"}", "end_user must be 1 to 256 bytes of UTF-8"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1,"
     " \"end_user\": \"" + "u" * 257 + "\"}", "end_user must be 1 to 256 bytes of UTF-8"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1,"
     " \"tags\": \"env\"}", "tags must be a list of tags, name=value"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1,"
     " \"tags\": 5}", "tags must be a list of tags, name=value"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1,"
     " \"tags\": \"env=a,env=b\"}", "tags must be a list of tags, name=value"),
    ("{\"request_id\": \"x\", \"outcome\": \"complete\", \"started_at\": 1,"
     " \"tags\": \"" + ",".join(f"n{i}=v" for i in range(9)) + "\"}",
     "tags must be a list of tags, name=value"),
]


@pytest.mark.parametrize("line,reason", BAD_LINES, ids=[r for _, r in BAD_LINES])
def test_ndjson_bad_line_rejected(tmp_path, line, reason):
    db = tmp_path / "t.db"
    src = tmp_path / "rows.ndjson"
    src.write_text(ndjson(ROWS[:2]) + line + "\n" + ndjson(ROWS[2:]))
    proc = run(["--db", db, "--ndjson", src])
    assert proc.returncode == 2, proc.stderr
    assert f"{src}:3: {reason}" in proc.stderr
    assert not db.exists(), "nothing may be written before every line is checked"


def test_ndjson_bad_line_into_existing_database(store):
    db, _ = store
    gen_ok(["--db", db, "--ndjson", "-"], stdin=ndjson(ROWS[:1]))
    proc = run(["--db", db, "--ndjson", "-"], stdin=ndjson(ROWS[1:3]) + "{}\n")
    assert proc.returncode == 2 and "-:3: request_id is required" in proc.stderr
    assert query(db, "SELECT count(*) FROM requests") == [(1,)]
    assert accounting(db)["received"] == 1


@pytest.mark.parametrize("args", [
    [], ["--db"], ["--db", "x.db"], ["--db", "x.db", "--rows", "-1"],
    ["--db", "x.db", "--rows", "10", "--rate", "5"],
    ["--db", "x.db", "--duration", "1", "--end", "5"],
    ["--db", "x.db", "--ndjson", "-", "--rows", "3"],
    ["--db", "x.db", "--rows", "10", "--keys", "0"],
    ["--db", "x.db", "--rows", "10", "--teams", "-1"],
    ["--db", "x.db", "--rows", "10", "--teams", "1001"],
    ["--db", "x.db", "--rows", "10", "--end-users", "-1"],
    ["--db", "x.db", "--rows", "10", "--end-users", "1000001"],
    ["--db", "x.db", "--ndjson", "-", "--end-users", "3"],
    ["--db", "x.db", "--rows", "10", "--tags", "-1"],
    ["--db", "x.db", "--rows", "10", "--tags", "100001"],
    ["--db", "x.db", "--ndjson", "-", "--tags", "3"],
    ["--db", "x.db", "--rows", "10", "--days", "1.5"],
    ["--db", "x.db", "--rows", "10", "--rows", "10"],
    ["--db", "x.db", "--bogus", "1"],
])
def test_usage_errors(tmp_path, args):
    proc = subprocess.run([str(GEN)] + args, capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)
    assert proc.returncode == 2
    assert "usage: tally-gen" in proc.stderr
    assert not (tmp_path / "x.db").exists()


# ---- random rows ----

N = 20000


def fingerprint(db):
    return query(db, "SELECT count(*), sum(stream), sum(" + n("outcome <> 'complete'") + "),"
                     " sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens),"
                     " sum(cache_creation_tokens), sum(reasoning_tokens), sum(cost_micros),"
                     " sum(duration_ms), sum(bytes_out), min(started_at), max(started_at)"
                     " FROM requests")[0]


@pytest.fixture(scope="module")
def random_dbs(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen")
    args = ["--rows", N, "--seed", 42, "--end", END, "--days", 30]
    for name in ("a.db", "b.db"):
        assert gen_ok(["--db", d / name] + args) == (N, 0, 0)
    gen_ok(["--db", d / "c.db", "--rows", N, "--seed", 43, "--end", END])
    return d / "a.db", d / "b.db", d / "c.db"


@pytest.fixture(scope="module")
def random_pg(pg_server, tmp_path_factory):
    """random_dbs' a.db made again in a PostgreSQL database."""
    url = pg_server.create_db("gen_random")
    secret = tmp_path_factory.mktemp("gen_pg") / "key.secret"
    assert gen_ok(["--db", url, "--secret", secret, "--rows", N, "--seed", 42, "--end", END,
                   "--days", 30]) == (N, 0, 0)
    return url


def test_random_is_deterministic(random_dbs):
    a, b, c = random_dbs
    cols = ", ".join(COLUMNS)
    assert query(a, f"SELECT {cols} FROM requests ORDER BY id") == \
        query(b, f"SELECT {cols} FROM requests ORDER BY id")
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)
    assert query(a, "SELECT * FROM usage_daily") == query(b, "SELECT * FROM usage_daily")


def test_random_rows_are_consistent(random_dbs):
    for db in random_dbs:
        acc = assert_consistent(db)
        assert acc["received"] == acc["written"] == N
        (unpriced,) = query(db, "SELECT count(*) FROM requests WHERE cost_micros IS NULL AND"
                                " prompt_tokens IS NOT NULL")[0]
        assert acc["unpriced"] == unpriced > 0


def test_random_same_rows_on_postgres(random_dbs, random_pg):
    """The same seed makes the same rows, costs and rollups on either store."""
    cols = ", ".join(COLUMNS)
    a = random_dbs[0]
    assert query(random_pg, f"SELECT {cols} FROM requests ORDER BY id") == \
        query(a, f"SELECT {cols} FROM requests ORDER BY id")
    assert fingerprint(random_pg) == fingerprint(a)
    for table, unit, seconds, by in (("usage_hourly", "hour", 3600, BY_KEY_MODEL),
                                     ("model_daily", "day", 86400, BY_MODEL)):
        _, stored = rollup_sql(table, unit, seconds, by)
        assert sorted(query(random_pg, stored)) == sorted(query(a, stored)), table
    # Keys alike but for their random secrets: same names, same ids.
    assert query(random_pg, "SELECT id, name FROM keys ORDER BY id") == \
        query(a, "SELECT id, name FROM keys ORDER BY id")


def test_random_rows_are_consistent_on_postgres(random_pg):
    acc = assert_consistent(random_pg)
    assert acc["received"] == acc["written"] == N
    (unpriced,) = query(random_pg, "SELECT count(*) FROM requests WHERE cost_micros IS NULL"
                                   " AND prompt_tokens IS NOT NULL")[0]
    assert acc["unpriced"] == unpriced > 0


def test_postgres_needs_a_secret(pg_url):
    proc = run(["--db", pg_url, "--rows", 10])
    assert proc.returncode == 1
    assert "--secret PATH is required with a postgresql:// store" in proc.stderr


def test_random_shape(random_dbs):
    db = random_dbs[0]
    assert query(db, "SELECT count(*) FROM keys WHERE name LIKE 'team-%-%'") == [(200,)]
    assert query(db, "SELECT count(*) FROM models") == [(12,)]
    assert sorted(query(db, "SELECT name FROM providers")) == [("anthropic",), ("openai",),
                                                               ("vllm",)]
    # Every row names a known key and model; popular keys take a Zipf share.
    assert query(db, "SELECT count(*) FROM requests WHERE key_id NOT IN (SELECT id FROM keys)"
                     " OR model_requested NOT IN (SELECT name FROM models)") == [(0,)]
    keys = [n for (n,) in query(db, "SELECT count(*) FROM requests GROUP BY key_id"
                                    " ORDER BY 1 DESC")]
    assert len(keys) > 150 and keys[0] > 10 * keys[len(keys) // 2]
    assert query(db, "SELECT count(DISTINCT model) FROM requests") == [(12,)]

    (streams, errors, prov_errors, reasoning, cached) = query(
        db, "SELECT avg(stream = 1), avg(outcome <> 'complete'),"
            " count(DISTINCT outcome), sum(reasoning_tokens > 0), sum(cached_tokens > 0)"
            " FROM requests")[0]
    assert 0.32 <= streams <= 0.38
    assert 0.015 <= errors <= 0.025
    assert prov_errors == 6   # complete + the five kinds of failure
    assert reasoning > 0 and cached > 0
    assert query(db, "SELECT count(*) FROM requests WHERE reasoning_tokens > 0 AND"
                     " model NOT IN ('o3', 'o4-mini')") == [(0,)]
    denied = dict(query(db, "SELECT verdict, status FROM requests WHERE outcome = 'denied'"
                            " GROUP BY 1"))
    assert denied == {"rate_limit_requests": 429, "budget_exceeded": 402}
    assert query(db, "SELECT count(*) FROM requests WHERE (prompt_tokens NOT BETWEEN 50 AND 20000"
                     " AND (model <> 'claude-sonnet-4' OR prompt_tokens NOT BETWEEN 200001"
                     " AND 500001)) OR completion_tokens NOT BETWEEN 10 AND 4000") == [(0,)]

    # Rate cards: a default one per priced model, two priority ones and a long-context one.
    assert sorted(query(db, "SELECT m.name, c.tier, c.above_tokens FROM model_prices c"
                            " JOIN models m ON m.id = c.model_id WHERE c.tier <> 'default'"
                            " OR c.above_tokens > 0")) == [
        ("claude-sonnet-4", "default", 200000), ("gpt-4o", "priority", 0),
        ("gpt-4o-mini", "priority", 0)]
    assert query(db, "SELECT count(*) FROM model_prices WHERE tier = 'default' AND"
                     " above_tokens = 0") == [(11,)]
    # The classes, on a fraction of the rows of the providers that report them.
    (long_ctx, web, web_other, audio, audio_other, tiers, priority, h1) = query(
        db, "SELECT sum(prompt_tokens > 200000), sum(web_search_calls > 0 AND provider = 'anthropic'),"
            " sum(web_search_calls IS NOT NULL AND provider <> 'anthropic'),"
            " sum(audio_input_tokens > 0 AND model IN ('gpt-4o', 'gpt-4o-mini')),"
            " sum(audio_input_tokens IS NOT NULL AND model NOT IN ('gpt-4o', 'gpt-4o-mini')),"
            " sum(service_tier IS NOT NULL AND provider <> 'openai'),"
            " sum(service_tier = 'priority'), sum(cache_creation_1h_tokens > 0) FROM requests")[0]
    assert long_ctx > 0 and web > 0 and audio > 0 and priority > 0 and h1 > 0
    assert web_other == audio_other == tiers == 0
    assert query(db, "SELECT count(*) FROM requests WHERE service_tier = 'priority' AND"
                     " (audio_input_tokens IS NOT NULL OR model NOT IN ('gpt-4o', 'gpt-4o-mini'))"
                     " OR audio_input_tokens > prompt_tokens OR audio_output_tokens >"
                     " completion_tokens OR cache_creation_1h_tokens > cache_creation_tokens"
                     " OR (provider = 'openai' AND prompt_tokens IS NOT NULL AND"
                     " service_tier IS NULL)") == [(0,)]
    assert query(db, "SELECT sum(audio_input_tokens), sum(audio_output_tokens),"
                     " sum(web_search_calls) FROM requests") == \
        query(db, "SELECT sum(audio_input_tokens), sum(audio_output_tokens),"
                  " sum(web_search_calls) FROM model_daily")

    # Time: inside the span, in order, busier by day than by night.
    lo, hi = (END - 30 * 86400) * 1000, END * 1000
    assert query(db, "SELECT min(started_at) >= ?, max(started_at) < ? FROM requests",
                 (lo, hi)) == [(1, 1)]
    assert query(db, "SELECT count(*) FROM requests a JOIN requests b ON b.id = a.id + 1"
                     " WHERE b.started_at < a.started_at") == [(0,)]
    day, night = query(db, "SELECT sum(h BETWEEN 12 AND 16), sum(h BETWEEN 0 AND 4) FROM"
                           " (SELECT started_at / 3600000 % 24 AS h FROM requests)")[0]
    assert day > 3 * night

    # Request ids: unique, shaped like tally.cfg's unique-id-format, starting with
    # the accept time.
    ids = query(db, "SELECT request_id, started_at FROM requests")
    assert len({i for i, _ in ids}) == N
    rid = re.compile(r"(\d{13})-[0-9A-F]+-[0-9A-F]+-[0-9A-F]{16}")
    for i, started in ids:
        m = rid.fullmatch(i)
        assert m and int(m.group(1)) == started, i


CARD = ["input_micros_per_mtok", "cached_micros_per_mtok", "cache_write_micros_per_mtok",
        "coalesce(cache_write_1h_micros_per_mtok, cache_write_micros_per_mtok)",
        "output_micros_per_mtok", "coalesce(reasoning_micros_per_mtok, output_micros_per_mtok)",
        "audio_input_micros_per_mtok", "audio_output_micros_per_mtok",
        "web_search_micros_per_call"]


def cards(db):
    """{model: [(tier, above_tokens, prices in CARD's order)]}"""
    out = {}
    for name, tier, above, *p in query(db, f"SELECT m.name, c.tier, c.above_tokens, {', '.join(CARD)}"
                                           " FROM model_prices c JOIN models m ON m.id = c.model_id"):
        out.setdefault(name, []).append((tier, above, p))
    return out


def test_random_costs_are_the_agents(random_dbs):
    """Costs recomputed from the models' cards as spoa/acct.c's acct_price does: the card
    of the reported tier ('default' when none) with the largest above_tokens below the
    prompt; each class at its price, its tokens out of the count it is part of; a class
    the card does not price leaves the row unpriced."""
    db = random_dbs[0]
    by_model = cards(db)
    rows = query(db, "SELECT model, service_tier, prompt_tokens, cached_tokens,"
                     " cache_creation_tokens, cache_creation_1h_tokens, completion_tokens,"
                     " reasoning_tokens, audio_input_tokens, audio_output_tokens,"
                     " web_search_calls, cost_micros FROM requests")
    priced = classes = 0
    for (model, tier, prompt, cached, created, created_1h, completion, reasoning, audio_in,
         audio_out, web, cost) in rows:
        if prompt is None and completion is None:
            assert cost is None
            continue
        n = lambda v: v or 0
        fit = [(above, p) for t, above, p in by_model.get(model, [])
               if t == (tier or "default") and above < n(prompt)]
        if not fit:
            assert cost is None, model
            continue
        p = max(fit, key=lambda x: x[0])[1]
        counts = [max(n(prompt) - n(cached) - n(created) - n(audio_in), 0), n(cached),
                  n(created) - n(created_1h), n(created_1h),
                  max(n(completion) - n(reasoning) - n(audio_out), 0), n(reasoning),
                  n(audio_in), n(audio_out)]
        if any(c and price is None for c, price in zip(counts + [n(web)], p)):
            assert cost is None, model
            continue
        total = sum(c * (price or 0) for c, price in zip(counts, p))
        assert cost == (total + 500000) // 1000000 + n(web) * (p[8] or 0), model
        priced += 1
        classes += bool(n(audio_in) or n(web) or n(created_1h) or tier == "priority" or
                        n(prompt) > 200000)
    assert priced > N * 0.9 and classes > 0


def test_random_estimates_are_the_agents(random_dbs):
    """Some random rows carry the agent's estimate (spoa/acct.c acct_estimate) of what
    the upstream did not report: only forwarded requests that may have been billed and
    whose usage is missing in part; the prompt estimated as the body's bytes / 4, the
    completion as the max_tokens the request named (a power of two from 256), each
    priced as reported tokens are, no cost for an unpriced model."""
    db = random_dbs[0]
    cards = query(db, "SELECT m.name, c.tier, c.above_tokens, c.input_micros_per_mtok,"
                      " c.output_micros_per_mtok FROM models m JOIN model_prices c"
                      " ON c.model_id = m.id ORDER BY c.above_tokens")

    def prices(model, tier, prompt):
        """The card's input and output prices (docs/pricing.md: the tier's card with the
        largest threshold below the prompt); (None, None) without one."""
        best = (None, None)
        for name, t, above, i, o in cards:
            if name == model and t == (tier or "default") and (best == (None, None)
                                                               or above < prompt):
                best = (i, o)
        return best
    rows = query(db, "SELECT model, outcome, usage_source, termination, status,"
                     " prompt_tokens, completion_tokens, bytes_in, estimated_tokens,"
                     " estimated_cost_micros, service_tier FROM requests")
    kinds = {}
    for model, outcome, source, term, status, prompt, completion, bytes_in, est, cost, tier \
            in rows:
        billable = (outcome not in ("denied", "gateway_rejected")
                    and source in ("none", "partial")
                    and (outcome == "no_record" or 200 <= (status or 0) < 300
                         or (term or "  ")[1] in "HDL"))
        if not billable:
            assert est is None and cost is None, (outcome, source, term)
            continue
        kinds[(outcome, source)] = kinds.get((outcome, source), 0) + 1
        prompt_est = 0 if prompt is not None else \
            None if bytes_in is None else (bytes_in - 250 + 3) // 4
        pin, pout = prices(model, tier, prompt if prompt is not None else prompt_est or 0)
        if prompt_est is None:          # no record: no bytes to check the prompt by
            assert est > 256
            continue
        bound = est - prompt_est
        assert completion is None and bound in (256, 512, 1024, 2048, 4096), (est, prompt_est)
        if pin is None or pout is None:
            assert cost is None, model
        else:
            # One sum, rounded once to the nearest micro-dollar, as a reported row's.
            assert cost == (prompt_est * pin + bound * pout + 500000) // 1000000, \
                (model, est, cost)
    # every kind of unreported usage occurs, and only sometimes
    assert set(kinds) >= {("complete", "none"), ("client_abort", "none"),
                          ("upstream_error", "none"), ("no_record", "none")}, kinds
    assert 0.002 * N < sum(kinds.values()) < 0.02 * N, kinds
    (est_rows,) = query(db, "SELECT sum(estimated) FROM usage_daily")[0]
    assert est_rows == sum(kinds.values())


def test_random_appends_to_an_existing_database(store):
    """A second span into the same database keeps its keys and models and continues the
    counters, as an agent restarted on it would."""
    db, secret = store
    gen_ok(["--db", db, "--rows", 3000, "--seed", 1, "--end", END, "--days", 2] + secret)
    gen_ok(["--db", db, "--rows", 2000, "--seed", 2, "--end", END + 86400, "--days", 1,
            "--keys", 250] + secret)
    assert query(db, "SELECT count(*) FROM keys") == [(250,)]
    assert query(db, "SELECT count(*) FROM models") == [(12,)]
    acc = assert_consistent(db)
    assert acc["written"] == 5000


def test_live_rows_are_stamped_now(store):
    db, secret = store
    t0 = time.time()
    written, _, _ = gen_ok(["--db", db, "--duration", "1", "--rate", "300", "--keys", 20]
                           + secret)
    t1 = time.time()
    assert 200 <= written <= 301
    (lo, hi) = query(db, "SELECT min(started_at), max(started_at) FROM requests")[0]
    assert t0 * 1000 - 1000 <= lo <= hi <= t1 * 1000 + 1000
    assert hi - lo >= 500
    assert_consistent(db)


# ---- teams ----

def assert_teams_consistent(db):
    """team_hourly and team_daily equal the sums of the rows with a team (rows without
    one are in neither)."""
    for table, unit, seconds in (("team_hourly", "hour", 3600), ("team_daily", "day", 86400)):
        expected, stored = rollup_sql(table, unit, seconds, BY_TEAM)
        assert sorted(query(db, expected)) == sorted(query(db, stored)), table


def plain_run(tmp_path, db, args):
    """A run of args, db's but for the option under test, into a fresh SQLite database:
    its path, once its rows are found to be db's in every column of COLUMNS but the end
    user (--end-users names one)."""
    plain = tmp_path / "plain.db"
    gen_ok(["--db", plain, *args])
    cols = ", ".join(c for c in COLUMNS if c != "end_user")
    assert query(db, f"SELECT {cols} FROM requests ORDER BY id") == \
        query(plain, f"SELECT {cols} FROM requests ORDER BY id")
    return plain


def test_random_teams(tmp_path, store):
    """--teams T: teams <word>-<n>, keys in team (rank mod T) but every 8th in none, each
    row carrying its key's team, and the team rollups the writer kept equal to the rows'
    sums (rows without a team in none). The rows are those of the same run without
    teams, but for team_id."""
    db, extra = store
    args = ["--rows", 3000, "--seed", 42, "--end", END, "--days", 3, "--keys", 40]
    assert gen_ok(["--db", db, *extra, *args, "--teams", 5]) == (3000, 0, 0)
    teams = dict(query(db, "SELECT name, id FROM teams"))
    assert sorted(teams) == ["billing-3", "growth-4", "infra-5", "search-1", "support-2"]
    keys = query(db, "SELECT k.name, t.name FROM keys k LEFT JOIN teams t ON t.id = k.team_id")
    assert len(keys) == 40
    for name, team in keys:
        rank = int(name.rsplit("-", 1)[1]) - 1
        want = None if rank % 8 == 7 else sorted(teams, key=teams.get)[rank % 5]
        assert team == want, (name, team)
    (bad,) = query(db, "SELECT count(*) FROM requests r JOIN keys k ON k.id = r.key_id"
                       " WHERE r.team_id IS DISTINCT FROM k.team_id")[0]
    assert bad == 0
    (with_team, without) = query(db, "SELECT count(team_id), count(*) - count(team_id)"
                                     " FROM requests")[0]
    assert with_team > 1000 and without > 0
    assert_teams_consistent(db)
    assert_consistent(db)
    if is_pg(db):
        return
    plain = plain_run(tmp_path, db, args)
    assert query(plain, "SELECT count(*), count(team_id) FROM requests")[0] == (3000, 0)
    assert query(plain, "SELECT count(*) FROM team_hourly")[0] == (0,)


def test_ndjson_team_id(store):
    """--ndjson rows may name a team_id: stored as given, and in the team rollups; a row
    without one is in none."""
    db, _ = store
    t = END * 1000
    lines = [{"request_id": "t1", "outcome": "complete", "started_at": t, "team_id": 7,
              "prompt_tokens": 10, "completion_tokens": 2, "cost_micros": 5, "duration_ms": 30},
             {"request_id": "t2", "outcome": "upstream_error", "started_at": t + 1,
              "team_id": 7, "prompt_tokens": 1, "unpriced": True},
             {"request_id": "t3", "outcome": "complete", "started_at": t + 2, "team_id": 8},
             {"request_id": "t4", "outcome": "complete", "started_at": t + 3}]
    assert gen_ok(["--db", db, "--ndjson", "-"], ndjson(lines)) == (4, 0, 0)
    assert sorted(query(db, "SELECT request_id, team_id FROM requests"), key=str) == \
        [("t1", 7), ("t2", 7), ("t3", 8), ("t4", None)]
    assert sorted(query(db, "SELECT team_id, requests, errors, prompt_tokens FROM team_daily")) == \
        [(7, 2, 1, 11), (8, 1, 0, 0)]
    assert_teams_consistent(db)


# ---- end users ----

def test_random_end_users(tmp_path, store):
    """--end-users U: every row names one of U end users of its key, user-1..user-U, a
    few busy and most not, and end_user_daily is the rows' sums per key, day and end user:
    each of its rows is a group of requests, each group one of its rows. The rows are
    those of the same run without end users, but for end_user."""
    db, extra = store
    args = ["--rows", 5000, "--seed", 42, "--end", END, "--days", 3, "--keys", 20]
    assert gen_ok(["--db", db, *extra, *args, "--end-users", 30]) == (5000, 0, 0)
    assert query(db, "SELECT count(*) FROM requests WHERE end_user IS NULL") == [(0,)]
    by_user = query(db, "SELECT end_user, count(*) FROM requests WHERE key_id ="
                        " (SELECT key_id FROM requests GROUP BY key_id ORDER BY count(*) DESC"
                        " LIMIT 1) GROUP BY end_user ORDER BY 2 DESC")
    assert {u for u, _ in by_user} <= {f"user-{i}" for i in range(1, 31)}
    assert by_user[0][0] == "user-1" and len(by_user) > 20
    assert by_user[0][1] > 5 * by_user[len(by_user) // 2][1]
    expected, stored = rollup_sql("end_user_daily", "day", 86400, BY_END_USER)
    rows = sorted(query(db, stored))
    assert rows == sorted(query(db, expected))
    assert sum(r[3] for r in rows) == 5000 and len({r[1] for r in rows}) == 20
    assert_consistent(db)
    if is_pg(db):
        return
    plain = plain_run(tmp_path, db, args)
    assert query(plain, "SELECT count(end_user) FROM requests") == [(0,)]
    assert query(plain, "SELECT count(*) FROM end_user_daily") == [(0,)]


# ---- tags ----

def tag_sums(db):
    """tag_daily as the rows make it: per tag, UTC day and key, a row with n tags in n
    of them, rows without a key or tags in none; (tag, day, key_id, requests, errors,
    prompt_tokens, cost_micros) sorted."""
    acc = {}
    for started, key_id, tags, outcome, prompt, cost in query(
            db, "SELECT started_at, key_id, tags, outcome, prompt_tokens, cost_micros"
                " FROM requests WHERE key_id IS NOT NULL AND tags IS NOT NULL"):
        for t in tags.split(","):
            a = acc.setdefault((t, started // 86_400_000 * 86400, key_id), [0, 0, 0, 0])
            a[0] += 1
            a[1] += outcome != "complete"
            a[2] += prompt or 0
            a[3] += cost or 0
    return sorted((*k, *v) for k, v in acc.items())


def tag_total_sums(db):
    """tag_total_daily as the rows make it: tag_sums over every key; (tag, day,
    requests, errors, prompt_tokens, cost_micros) sorted."""
    acc = {}
    for tag, day, _, *sums in tag_sums(db):
        acc[(tag, day)] = [a + b for a, b in zip(acc.get((tag, day), [0] * 4), sums)]
    return sorted((*k, *v) for k, v in acc.items())


def test_random_tags(tmp_path, store):
    """--tags N: every row carries 0 to 3 tags of N over env, feature, region and tenant,
    one per name, in canonical text (sorted by name), a few common and most rare; the
    writer's tag_daily is the rows' sums per tag, day and key, its tag_total_daily per
    tag and day. The rows are those of the same run without tags, but for tags."""
    db, extra = store
    args = ["--rows", 5000, "--seed", 42, "--end", END, "--days", 3, "--keys", 20]
    assert gen_ok(["--db", db, *extra, *args, "--tags", 40]) == (5000, 0, 0)
    rows = [t for (t,) in query(db, "SELECT tags FROM requests")]
    tagged = [t.split(",") for t in rows if t is not None]
    assert 500 < len(rows) - len(tagged) < 2500 and rows.count("") == 0
    assert all(1 <= len(t) <= 3 and t == sorted(t) and
               len({x.split("=")[0] for x in t}) == len(t) for t in tagged)
    counts = {}
    for t in (x for ts in tagged for x in ts):
        counts[t] = counts.get(t, 0) + 1
    assert set(counts) <= {f"{n}=v{i}" for n in ("env", "feature", "region", "tenant")
                           for i in range(1, 11)} and len(counts) > 30
    ranked = sorted(counts.values(), reverse=True)
    assert max(counts, key=counts.get) == "env=v1" and ranked[0] > 5 * ranked[len(ranked) // 2]
    assert sorted(query(db, "SELECT tag, day, key_id, requests, errors, prompt_tokens,"
                            " cost_micros FROM tag_daily")) == tag_sums(db)
    totals = tag_total_sums(db)
    assert sorted(query(db, "SELECT tag, day, requests, errors, prompt_tokens, cost_micros"
                            " FROM tag_total_daily")) == totals
    assert len(totals) < len(tag_sums(db)) / 4    # 20 keys share each tag's days
    assert_consistent(db)
    if is_pg(db):
        return
    plain = plain_run(tmp_path, db, args)
    assert query(plain, "SELECT count(tags) FROM requests") == [(0,)]
    assert query(plain, "SELECT count(*) FROM tag_daily") == [(0,)]
    assert query(plain, "SELECT count(*) FROM tag_total_daily") == [(0,)]


def test_ndjson_tags(store):
    """--ndjson rows may carry tags, a list as X-Tally-Tags takes it: stored in canonical
    text, summed once per tag into tag_daily; rows without a key or tags in none."""
    db, _ = store
    t = END * 1000
    lines = [{"request_id": "g1", "outcome": "complete", "started_at": t, "key_id": 3,
              "tags": "feature=search, env=prod", "prompt_tokens": 10, "cost_micros": 5},
             {"request_id": "g2", "outcome": "upstream_error", "started_at": t + 1,
              "key_id": 3, "tags": "env=prod", "prompt_tokens": 1},
             {"request_id": "g3", "outcome": "complete", "started_at": t + 2, "tags": "env=prod"},
             {"request_id": "g4", "outcome": "complete", "started_at": t + 3, "key_id": 3,
              "tags": ""},
             {"request_id": "g5", "outcome": "complete", "started_at": t + 4, "key_id": 4}]
    assert gen_ok(["--db", db, "--ndjson", "-"], ndjson(lines)) == (5, 0, 0)
    assert sorted(query(db, "SELECT request_id, tags FROM requests"), key=str) == \
        [("g1", "env=prod,feature=search"), ("g2", "env=prod"), ("g3", "env=prod"),
         ("g4", None), ("g5", None)]
    assert sorted(query(db, "SELECT tag, key_id, requests, errors, prompt_tokens, cost_micros"
                            " FROM tag_daily")) == \
        [("env=prod", 3, 2, 1, 11, 5), ("feature=search", 3, 1, 0, 10, 5)]
    assert sorted(query(db, "SELECT tag, day, key_id, requests, errors, prompt_tokens,"
                            " cost_micros FROM tag_daily")) == tag_sums(db)
