"""tally-queryd end to end: a database seeded through the agent's own writer (tally-gen
--ndjson) with known rows, a real tally-queryd on a loopback port, and every answer
compared with what Python computes from the same rows (docs/api.md is the contract).

Each store-dependent test runs on both stores: the SQLite database itself, and a
PostgreSQL database (the session's private server, tests/pgserver.py) on
sql/pg/schema.sql holding exactly the same rows, ids included, copied table by table
(pg_store), so that one expectation checks both answers.

Processes are Proc objects (stack.py), stopped on every exit path by the fixtures."""
import calendar
import csv
import http.client
import io
import itertools
import json
import math
import os
import random
import re
import socket
import sqlite3
import subprocess
import time
import urllib.parse

import psycopg2
import pytest

from conftest import ROOT, SCHEMA, binary, free_port
from pgcopy import pg_store
from rollups import LATENCY_BOUNDS as BOUNDS
from stack import Proc, Stack, wait_port

TOKEN = "op-token-0123456789abcdef"
VALGRIND = os.environ.get("TALLY_VALGRIND") == "1"
DATA_PATHS = ["/api/summary", "/api/requests", "/api/requests/x", "/api/keys", "/api/teams",
              "/api/models",
              "/api/live", "/api/export?from=0&to=1"]
OUTCOMES = ["complete", "complete", "complete", "client_abort", "upstream_error",
            "upstream_rejected", "denied", "gateway_rejected", "no_record"]
FORWARDED = ("complete", "client_abort", "upstream_error", "no_record")
NOW = int(time.time())
TODAY = NOW - NOW % 86400
BASE = TODAY - 5 * 86400           # whole days BASE .. BASE+3d sit inside the summary range
# A team name a spreadsheet would run and that breaks naive JSON or CSV: a formula with a
# comma and quotes, a backslash, a JSON object's end, a line break, a control character,
# U+2028 and markup.
HOSTILE = '=HYPERLINK("http://x/?a=1,b","c")\\"},{"x":1\n\r\x01\u2028<b>'
HOSTILE_Q = urllib.parse.quote(HOSTILE, safe="")
# End users' ids are the client's (printable ASCII, 1 to 256 bytes): plain ones, ids a
# spreadsheet would run (quotes included), the longest. Each is seen under several keys
# (several end users: they are namespaced by key) and on rows without a key.
EU_FORMULA, EU_AT = '=HYPERLINK("http://x","y")', "@SUM(A1)"
EU_LONG = "L" * 255 + "~"
END_USERS = ["u-1", "u-2", EU_FORMULA, EU_AT, "+1", "-2+3", EU_LONG]
Q = lambda s: urllib.parse.quote(s, safe="")
# Tags (common/tags.h): names and values that a match by substring or by LIKE would
# confuse (env=prod inside env=prod2 and xenv=prod, env=Prod, a_b=1 and axb=1 for LIKE's
# _), values that start like a formula (+ - @; the canonical text starts with a name).
TAG_VALUES = {"a_b": ["1"], "axb": ["1"], "calc": ["+1", "-2+3", "@x"],
              "env": ["prod", "prod2", "Prod"], "feature": ["search", "chat"],
              "xenv": ["prod"]}


# --- processes -----------------------------------------------------------------------

class Queryd:
    def __init__(self, tmp, db, name="queryd", token=TOKEN, args=(), env_token=True):
        self.port = free_port()
        argv = [str(binary("tally-queryd")), "--db", str(db), "--listen",
                f"127.0.0.1:{self.port}", "--threads", "2", *args]
        if VALGRIND:
            argv = ["valgrind", "--error-exitcode=99", "--leak-check=full",
                    "--errors-for-leak-kinds=definite", "-q"] + argv
        env = {k: v for k, v in os.environ.items() if k != "TALLY_OPERATOR_TOKEN"}
        if token is not None and env_token:
            env["TALLY_OPERATOR_TOKEN"] = token
        self.proc = Proc(name, argv, tmp, env=env)
        wait_port(self.port, self.proc, timeout=30)

    def request(self, path, token=TOKEN, method="GET", headers=None, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            hdrs = dict(headers or {})
            if token is not None:
                hdrs["Authorization"] = f"Bearer {token}"
            conn.putrequest(method, path, skip_accept_encoding=True)
            for k, v in hdrs.items():
                conn.putheader(k, v)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def get(self, path, **kw):
        status, headers, body = self.request(path, **kw)
        assert status == 200, (path, status, body)
        assert headers["content-type"] == "application/json; charset=utf-8"
        assert headers["cache-control"] == "no-store"
        return json.loads(body)

    def output(self):
        return self.proc.log_path.read_text(errors="replace")

    def stop(self):
        """Stops with SIGTERM; a clean exit (0) also means no valgrind error (99)."""
        code = self.proc.stop(timeout=30)
        assert code == 0, self.output()


STORES = ["sqlite", "postgres"]


def store_of(request, db):
    """The store a test parametrized by STORES reads: db itself, or its copy on
    PostgreSQL."""
    if request.param == "sqlite":
        return db
    return pg_store(request.getfixturevalue("pg_server"), f"queryd_{next(PG_DBS)}", db)


PG_DBS = itertools.count(1)


@pytest.fixture(params=STORES)
def kind(request):
    """Runs a test once per store: pass it to store_of."""
    return request


def tallyctl(db, *args):
    r = subprocess.run([str(binary("tallyctl")), "--db", str(db), *args], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout.strip()


def gen(db, *args, timeout=120):
    r = subprocess.run([str(binary("tally-gen")), "--db", str(db), *args], capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


CARD_PRICES = ["input_micros_per_mtok", "cached_micros_per_mtok", "cache_write_micros_per_mtok",
               "cache_write_1h_micros_per_mtok", "output_micros_per_mtok",
               "reasoning_micros_per_mtok", "audio_input_micros_per_mtok",
               "audio_output_micros_per_mtok", "web_search_micros_per_call"]
# Inserted out of order: the API lists 'default' first, then by tier, then prompt size.
CLAUDE_CARDS = [
    {"tier": "priority", "above_tokens": 0, "input_micros_per_mtok": 5000000,
     "output_micros_per_mtok": 25000000},
    {"tier": "default", "above_tokens": 200000, "input_micros_per_mtok": 6000000,
     "cache_write_micros_per_mtok": 7500000, "cache_write_1h_micros_per_mtok": 12000000,
     "output_micros_per_mtok": 22500000, "web_search_micros_per_call": 10000},
    {"tier": "default", "above_tokens": 0, "input_micros_per_mtok": 3000000,
     "cache_write_micros_per_mtok": 3750000, "output_micros_per_mtok": 15000000,
     "web_search_micros_per_call": 10000},
    {"tier": "batch", "above_tokens": 0, "input_micros_per_mtok": 1500000},
]
NEW_ROW_COLS = ["cache_creation_1h_tokens", "audio_input_tokens", "audio_output_tokens",
                "accepted_prediction_tokens", "rejected_prediction_tokens", "web_search_calls",
                "service_tier"]
NEW_SUMS = ["audio_input_tokens", "audio_output_tokens", "web_search_calls"]


def add_model(con, name, provider, cards):
    """A model and its rate cards, as tallyctl stores them (schema 7: model_prices)."""
    con.execute("INSERT INTO models (name, provider_id, created_at, updated_at)"
                " SELECT ?, id, 0, 0 FROM providers WHERE name = ?", (name, provider))
    for c in cards:
        cols = ["tier", "above_tokens"] + [k for k in CARD_PRICES if k in c]
        con.execute(f"INSERT INTO model_prices (model_id, {', '.join(cols)})"
                    f" SELECT id, {', '.join('?' * len(cols))} FROM models WHERE name = ?",
                    [c[k] for k in cols] + [name])


def card_json(c):
    return {"tier": c["tier"], "above_tokens": c["above_tokens"],
            **{k: c.get(k) for k in CARD_PRICES}}


# --- the seeded rows ----------------------------------------------------------------

def make_rows(key_ids):
    """Known rows: around BASE (5 days ago) over 5 days, some today, ties on started_at,
    every outcome, NULLs in every nullable column, durations in every latency bucket;
    forwarded rows without full usage carry estimates sometimes (priced, unpriced, 0)."""
    rnd = random.Random(7)
    models = [("m-gpt", "p-openai"), ("m-claude", "p-anth"), ("m-other", "p-openai"),
              (None, None), ("modèle", "p-anth")]
    durations = [None, 0, 1, 25, 26, 50, 99, 100, 101, 349, 350, 500, 749, 1000, 1499, 2500,
                 3999, 6000, 9999, 10000, 19999, 60000, 60001, 250000]
    rows = []

    def row(i, started_ms, key_id=None, model=("m-gpt", "p-openai")):
        prompt = rnd.choice([None, 0, rnd.randrange(1, 5000)])
        completion = rnd.choice([None, rnd.randrange(0, 3000)])
        cost = rnd.choice([None, rnd.randrange(0, 100000)])
        r = {"request_id": f"req-{i:05d}", "key_id": key_id, "model": model[0],
             "model_requested": rnd.choice([model[0], 'm-gpt,"x"']), "provider": model[1],
             "verdict": rnd.choice(["allow", None]), "status": rnd.choice([200, 200, 429, 401, 500, 502, None]),
             "stream": rnd.choice([True, False, None]), "prompt_tokens": prompt,
             "completion_tokens": completion, "cached_tokens": rnd.choice([None, 0, 17]),
             "cache_creation_tokens": rnd.choice([None, 5]),
             "reasoning_tokens": rnd.choice([None, 0, 9]), "cost_micros": cost,
             "unpriced": cost is None and (prompt is not None or completion is not None),
             "outcome": rnd.choice(OUTCOMES),
             "usage_source": rnd.choice(["none", "response", "stream", "partial"]),
             "termination": rnd.choice(["--", "CD", "SH", None]), "started_at": started_ms,
             "duration_ms": rnd.choice(durations), "ttfb_ms": rnd.choice([None, 12]),
             "bytes_in": rnd.randrange(100, 5000), "bytes_out": rnd.choice([None, 9000]),
             "estimated_tokens": None, "estimated_cost_micros": None}
        if r["usage_source"] in ("none", "partial") and r["outcome"] in FORWARDED:
            est = rnd.choice([None, 0, rnd.randrange(1, 5000), rnd.randrange(1, 5000)])
            r["estimated_tokens"] = est
            r["estimated_cost_micros"] = None if est is None else rnd.choice([None, est * 3])
        return r

    i = 0
    for _ in range(400):
        started = (BASE - 86400) * 1000 + rnd.randrange(0, 5 * 86400 * 1000)
        rows.append(row(i, started, rnd.choice(key_ids + [None]), rnd.choice(models)))
        i += 1
    for _ in range(6):              # ties: same millisecond, told apart by id
        rows.append(row(i, BASE * 1000 + 5000, key_ids[0], models[0]))
        i += 1
    today_span = max(1, (NOW - TODAY) * 1000 - 1000)
    for _ in range(30):             # today: the key with a daily budget, and the month
        rows.append(row(i, TODAY * 1000 + rnd.randrange(0, today_span), key_ids[1],
                        rnd.choice(models[:2])))
        i += 1
    return rows


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The known rows in a SQLite database, through tallyctl and the agent's writer."""
    tmp = tmp_path_factory.mktemp("queryd")
    db = tmp / "tally.db"
    tallyctl(db, "provider", "set", "p-openai", "--api", "openai", "--backend", "be_openai")
    tallyctl(db, "provider", "set", "p-anth", "--api", "anthropic", "--backend", "be_anth")
    con = sqlite3.connect(db)
    with con:
        add_model(con, "m-gpt", "p-openai", [
            {"tier": "default", "above_tokens": 0, "input_micros_per_mtok": 150000,
             "output_micros_per_mtok": 600000, "cached_micros_per_mtok": 75000}])
        add_model(con, "m-claude", "p-anth", CLAUDE_CARDS)
        add_model(con, "m-free", "p-openai", [])
    con.close()
    tallyctl(db, "key", "create", "alpha", "--budget-usd", "12.5", "--budget-period", "total")
    tallyctl(db, "key", "create", "beta", "--models", "m-gpt", "--default-model", "m-gpt")
    tallyctl(db, "key", "set", "beta", "--rpm", "60", "--tpm", "1000", "--max-concurrent", "3",
             "--budget-usd", "1", "--budget-period", "day")
    tallyctl(db, "key", "create", "gamma")
    tallyctl(db, "key", "revoke", "gamma")
    tallyctl(db, "key", "set", "beta", "--end-users", "required")
    tallyctl(db, "key", "set", "gamma", "--end-users", "forbidden")
    con = sqlite3.connect(db)
    keys = {n: i for i, n in con.execute("SELECT id, name FROM keys")}
    con.close()
    rows = make_rows([keys["alpha"], keys["beta"], keys["gamma"]])
    teams = add_teams(db, keys, rows)
    rnd = random.Random(13)
    for r in rows:       # rows without a key may name an end user too (no rollup has them)
        r["end_user"] = rnd.choice(END_USERS) if rnd.random() < 0.7 else None
    for r in rows:       # 0 to 3 tags, canonical (sorted by name); rows without a key too
        names = sorted(rnd.sample(sorted(TAG_VALUES), rnd.choice([0, 1, 1, 2, 3])))
        r["tags"] = ",".join(f"{n}={rnd.choice(TAG_VALUES[n])}" for n in names) or None
    nd = tmp / "rows.ndjson"
    nd.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n"
                          for r in rows))
    gen(db, "--ndjson", str(nd))
    con = sqlite3.connect(db)
    ids = dict(con.execute("SELECT request_id, id FROM requests"))
    con.close()
    assert len(ids) == len(rows)
    for r in rows:
        r["id"] = ids[r["request_id"]]
        r["key_name"] = {v: k for k, v in keys.items()}.get(r["key_id"])
        r["team_name"] = {v: k for k, v in teams.items()}.get(r["team_id"])
    return {"db": db, "tmp": tmp, "rows": rows, "keys": keys, "teams": teams}


def add_teams(db, keys, rows):
    """Teams "platform" (alpha's) and HOSTILE (beta's; gamma has none; its keys may read
    its usage), as schema 14 stores them, and each row's team_id as the agent records it: its key's team when
    it was decided, so some of alpha's rows, from before alpha moved, are HOSTILE's.
    Rows without a key have no team. The writer fills the team rollups from them."""
    con = sqlite3.connect(db)
    with con:
        con.execute("INSERT INTO teams (name, created_at) VALUES ('platform', 0)")
        con.execute("INSERT INTO teams (name, created_at, budget_micros, budget_period,"
                    " members_see_usage) VALUES (?, 0, 5000000, 'total', 1)", (HOSTILE,))
        teams = {n: i for i, n in con.execute("SELECT id, name FROM teams")}
        con.execute("INSERT INTO team_models (team_id, model) VALUES (?, 'm-gpt'), (?, 'm-claude')",
                    (teams[HOSTILE], teams[HOSTILE]))
        con.execute("UPDATE keys SET team_id = ? WHERE id = ?", (teams["platform"], keys["alpha"]))
        con.execute("UPDATE keys SET team_id = ? WHERE id = ?", (teams[HOSTILE], keys["beta"]))
    con.close()
    rnd = random.Random(11)
    for r in rows:
        r["team_id"] = {keys["alpha"]: teams["platform"], keys["beta"]: teams[HOSTILE]}.get(r["key_id"])
        if r["key_id"] == keys["alpha"] and rnd.random() < 0.15:
            r["team_id"] = teams[HOSTILE]
    return teams


@pytest.fixture(scope="module", params=STORES)
def world(request, seeded):
    """The seeded rows on one store (db: the SQLite original, for reading them back;
    store: what queryd is given), and a queryd serving them."""
    store = store_of(request, seeded["db"])
    q = Queryd(seeded["tmp"], store, name=f"queryd-{request.param}")
    try:
        yield dict(seeded, store=store, kind=request.param, q=q)
    finally:
        q.stop()


# --- expected values, computed here -------------------------------------------------------

def percentile(counts, q):
    """common/latency.c's latency_percentile, operation for operation."""
    total = sum(counts)
    if not total:
        return None
    rank = max(q * total, 1)
    below = 0
    for i in range(15):
        if counts[i] and below + counts[i] >= rank:
            lo = BOUNDS[i - 1] if i else 0
            return lo + (BOUNDS[i] - lo) * (rank - below) / counts[i]
        below += counts[i]
    return float(BOUNDS[-1])


def bucket(ms):
    for i, b in enumerate(BOUNDS):
        if ms <= b:
            return i
    return 15


def usage(rows):
    n = lambda v: v or 0
    lat = [0] * 16
    for r in rows:
        if r["duration_ms"] is not None:
            lat[bucket(r["duration_ms"])] += 1
    timed = sum(lat)
    out = {"requests": len(rows),
           "errors": sum(r["outcome"] != "complete" for r in rows),
           "streams": sum(r["stream"] is True for r in rows),
           "prompt_tokens": sum(n(r["prompt_tokens"]) for r in rows),
           "completion_tokens": sum(n(r["completion_tokens"]) for r in rows),
           "cached_tokens": sum(n(r["cached_tokens"]) for r in rows),
           "cache_creation_tokens": sum(n(r["cache_creation_tokens"]) for r in rows),
           "reasoning_tokens": sum(n(r["reasoning_tokens"]) for r in rows),
           "cost_micros": sum(n(r["cost_micros"]) for r in rows),
           "unpriced": sum(bool(r["unpriced"]) for r in rows),
           "estimated": sum(r["estimated_tokens"] is not None for r in rows),
           "estimated_tokens": sum(n(r["estimated_tokens"]) for r in rows),
           "estimated_cost_micros": sum(n(r["estimated_cost_micros"]) for r in rows),
           **{k: sum(n(r.get(k)) for r in rows) for k in NEW_SUMS}}
    out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    dur = sum(n(r["duration_ms"]) for r in rows)
    pct = {}
    for name, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99)):
        v = percentile(lat, q)
        pct[name] = None if v is None else math.floor(v + 0.5)
    out["latency_ms"] = {"avg": dur / timed if timed else None, **pct}
    out["error_rate"] = out["errors"] / len(rows) if rows else None
    return out


def check_usage(got, want, what):
    for k, v in want.items():
        if k in ("error_rate",) and v is not None:
            assert got[k] == pytest.approx(v), (what, k)
        elif k == "latency_ms":
            assert got[k]["avg"] == pytest.approx(v["avg"], abs=0.051) if v["avg"] is not None \
                else got[k]["avg"] is None, (what, k)
            for p in ("p50", "p95", "p99"):
                assert got[k][p] == v[p], (what, p, got[k], v)
        else:
            assert got[k] == v, (what, k, got[k], v)


def summary_expected(rows, frm, to, group, key_id=None, model=None, team_id=None):
    frm_e = frm - frm % 3600
    to_e = to + (3600 - to % 3600) % 3600
    sel = [r for r in rows if frm_e <= r["started_at"] // 1000 < to_e
           and (key_id is None or r["key_id"] == key_id)
           and (team_id is None or r.get("team_id") == team_id)
           and (model is None or r["model"] == model)]

    def gkey(r):
        s = r["started_at"] // 1000
        return {"key": r["key_id"] or 0, "team": r.get("team_id") or 0, "model": r["model"] or "",
                "provider": r["provider"] or "", "hour": s - s % 3600,
                "day": s - s % 86400}[group]
    groups = {}
    for r in sel:
        groups.setdefault(gkey(r), []).append(r)
    out = [(g, usage(rs)) for g, rs in groups.items()]
    if group in ("hour", "day"):
        out.sort(key=lambda x: x[0])
    else:
        out.sort(key=lambda x: (-x[1]["cost_micros"], -x[1]["requests"], x[0]))
    return frm_e, to_e, out, usage(sel)


# --- tests ---------------------------------------------------------------------------------

def test_auth_on_every_data_endpoint(world):
    q = world["q"]
    status, _, body = q.request("/api/health", token=None)
    assert status == 200 and json.loads(body) == {"ok": True, "data": True, "schema_version": SCHEMA}
    wrong_same_len = TOKEN[:-1] + ("x" if TOKEN[-1] != "x" else "y")
    for path in DATA_PATHS:
        for token in (None, wrong_same_len, TOKEN + "0", "short", ""):
            status, headers, body = q.request(path, token=token)
            assert status == 401, (path, token, status, body)
            assert json.loads(body) == {"error": "missing or invalid operator token"}
            assert headers["www-authenticate"] == "Bearer"
            assert headers["cache-control"] == "no-store"
        status, _, _ = q.request(path, token=None, headers={"Authorization": f"Basic {TOKEN}"})
        assert status == 401
        status, _, _ = q.request(path, token=None, headers={"Authorization": f"bearer {TOKEN}"})
        assert status in (200, 404), path     # the scheme is case-insensitive


@pytest.mark.parametrize("token", [None, ""], ids=["unset", "empty"])
def test_without_token_serves_only_health_and_files(world, tmp_path, token):
    """TALLY_OPERATOR_TOKEN="" is no token: not a token that nothing matches."""
    q = Queryd(tmp_path, world["store"], name="queryd-notoken", token=token)
    try:
        status, _, body = q.request("/api/health", token=None)
        assert status == 200 and json.loads(body)["data"] is False
        for path in DATA_PATHS:
            for given in (None, "", TOKEN):
                status, headers, body = q.request(path, token=given)
                assert status == 503, (path, given)
                assert json.loads(body) == {
                    "error": "TALLY_OPERATOR_TOKEN is not set: queryd serves no data"}
        status, headers, _ = q.request("/", token=None)
        assert status == 200 and headers["content-type"].startswith("text/html")
    finally:
        q.stop()
    assert "TALLY_OPERATOR_TOKEN is not set" in q.output()


def test_token_file(world, tmp_path):
    tf = tmp_path / "token"
    tf.write_text("from-a-file\n")
    q = Queryd(tmp_path, world["store"], name="queryd-tokenfile", token=None,
               args=["--token-file", str(tf)])
    try:
        assert q.request("/api/keys", token="from-a-file")[0] == 200
        assert q.request("/api/keys", token="from-a-file\\n")[0] == 401
        assert q.request("/api/keys", token=TOKEN)[0] == 401
    finally:
        q.stop()


def test_token_file_of_the_longest_token(world, tmp_path):
    """A 4096-byte token (the most queryd keeps) with its CRLF is read whole; one byte
    more is refused at start, as is a token HTTP could never carry (edge whitespace)."""
    longest = "t" * 4096
    tf = tmp_path / "token"
    tf.write_bytes(longest.encode() + b"\r\n")
    q = Queryd(tmp_path, world["store"], name="queryd-longtoken", token=None,
               args=["--token-file", str(tf)])
    try:
        assert q.request("/api/keys", token=longest)[0] == 200
        assert q.request("/api/keys", token=longest[:-1])[0] == 401
        assert q.request("/api/keys", token=longest + "t")[0] == 401
    finally:
        q.stop()
    tf.write_text("t" * 4097)
    r = subprocess.run([str(binary("tally-queryd")), "--db", str(world["store"]), "--listen",
                        f"127.0.0.1:{free_port()}", "--token-file", str(tf)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "longer than" in r.stderr, r.stderr
    for bad in (" padded", "padded ", "\tpadded"):
        r = subprocess.run([str(binary("tally-queryd")), "--db", str(world["store"]), "--listen",
                            f"127.0.0.1:{free_port()}"], capture_output=True, text=True,
                           timeout=10, env=dict(os.environ, TALLY_OPERATOR_TOKEN=bad))
        assert r.returncode == 1 and "whitespace" in r.stderr, (bad, r.stderr)


@pytest.mark.parametrize("group", ["key", "model", "provider", "hour", "day"])
def test_summary_groups_match_raw_rows(world, group):
    """A range with ragged hours at both ends around three whole days, from not on an hour
    boundary: the daily rollups' days plus the hourly rollups' ragged ends must add up to
    exactly what the raw rows say."""
    q, rows = world["q"], world["rows"]
    frm, to = BASE - 2 * 3600 - 1234, BASE + 3 * 86400 + 2 * 3600
    got = q.get(f"/api/summary?from={frm}&to={to}&group={group}&limit=1000")
    frm_e, to_e, want, total = summary_expected(rows, frm, to, group)
    assert (got["from"], got["to"], got["group"]) == (frm_e, to_e, group)
    assert [r["group"] for r in got["rows"]] == [g for g, _ in want]
    for row, (g, u) in zip(got["rows"], want):
        check_usage(row, u, (group, g))
        if group == "key":
            names = {v: k for k, v in world["keys"].items()}
            assert row["key_name"] == names.get(g)
        else:
            assert "key_name" not in row
        assert "team_name" not in row
    check_usage(got["totals"], total, "totals")
    assert got["totals"]["requests"] > 100


@pytest.mark.parametrize("query", ["group=day&key=alpha", "group=hour&key=beta",
                                   "group=key&model=m-claude", "group=hour&model=m-gpt",
                                   "group=provider&key=alpha"])
def test_summary_rollup_choice_matches_raw_rows(world, query):
    """Each rollup queryd picks for a filter and group (by key alone, by hour alone, by
    key and model, by model) gives what the raw rows say over a ragged range."""
    q, rows, keys = world["q"], world["rows"], world["keys"]
    frm, to = BASE - 2 * 3600 - 1234, BASE + 3 * 86400 + 2 * 3600
    args = dict(a.split("=") for a in query.split("&"))
    got = q.get(f"/api/summary?from={frm}&to={to}&{query}&limit=1000")
    _, _, want, total = summary_expected(rows, frm, to, args["group"],
                                         key_id=keys.get(args.get("key")),
                                         model=args.get("model"))
    assert [r["group"] for r in got["rows"]] == [g for g, _ in want]
    for row, (g, u) in zip(got["rows"], want):
        check_usage(row, u, (query, g))
    check_usage(got["totals"], total, (query, "totals"))
    assert got["totals"]["requests"] > 10


RAGGED = {"head": (BASE - 20 * 3600, BASE + 2 * 86400 + 3 * 3600),
          "tail": (BASE - 3 * 3600, BASE + 2 * 86400 + 20 * 3600),
          "both": (BASE - 15 * 3600, BASE + 3 * 86400 + 13 * 3600),
          "in-one-day": (BASE + 86400 + 3 * 3600, BASE + 86400 + 21 * 3600),
          "up-to-now": (BASE - 20 * 3600, NOW)}


@pytest.mark.parametrize("query", ["group=key", "group=day&key=alpha", "group=key&key=beta",
                                   "group=day&key=beta"])
@pytest.mark.parametrize("span", list(RAGGED))
def test_summary_by_key_whole_ragged_days_match_raw_rows(world, span, query):
    """A ragged end day with more than 12 hours in the range is read from key_daily less
    its hours outside the range (queryd/api.c): the sums are still the raw rows' ones."""
    q, rows, keys = world["q"], world["rows"], world["keys"]
    frm, to = RAGGED[span]
    args = dict(a.split("=") for a in query.split("&"))
    got = q.get(f"/api/summary?from={frm}&to={to}&{query}&limit=1000")
    _, _, want, total = summary_expected(rows, frm, to, args["group"],
                                         key_id=keys.get(args.get("key")))
    assert [r["group"] for r in got["rows"]] == [g for g, _ in want]
    for row, (g, u) in zip(got["rows"], want):
        check_usage(row, u, (span, query, g))
    check_usage(got["totals"], total, (span, query, "totals"))
    assert got["totals"]["requests"] > 0


TEAM_QUERIES = ["group=team", "team=platform", "group=day&team=platform",
                f"group=hour&team={HOSTILE_Q}", f"group=team&team={HOSTILE_Q}"]


@pytest.mark.parametrize("query", TEAM_QUERIES)
@pytest.mark.parametrize("span", ["main"] + list(RAGGED))
def test_summary_by_team_matches_raw_rows(world, span, query):
    """group=team and a team filter read team_daily and team_hourly, ragged end days whole
    less their hours outside the range as by key: the sums are the raw rows' ones, rows
    without a team are group 0 ("no team", team_name null: the totals less the teams'),
    and a team's summary (group team unless given) has no such group."""
    q, rows, teams = world["q"], world["rows"], world["teams"]
    frm, to = RAGGED.get(span, (BASE - 2 * 3600 - 1234, BASE + 3 * 86400 + 2 * 3600))
    args = dict(a.split("=") for a in query.split("&"))
    group = args.get("group", "team")
    team = urllib.parse.unquote(args["team"]) if "team" in args else None
    got = q.get(f"/api/summary?from={frm}&to={to}&{query}&limit=1000")
    _, _, want, total = summary_expected(rows, frm, to, group,
                                         team_id=teams[team] if team else None)
    assert got["group"] == group
    assert [r["group"] for r in got["rows"]] == [g for g, _ in want]
    names = {v: k for k, v in teams.items()}
    for row, (g, u) in zip(got["rows"], want):
        check_usage(row, u, (span, query, g))
        if group == "team":
            assert row["team_name"] == names.get(g)
        assert "key_name" not in row
    check_usage(got["totals"], total, (span, query, "totals"))
    if span == "main":
        assert got["totals"]["requests"] > 10
        if query == "group=team":
            assert {r["group"] for r in got["rows"]} == {0, *teams.values()}


def end_user_expected(rows, frm, to, group, key_id=None, end_user=None):
    """A summary of end users from the raw rows: the range widened to whole UTC days (the
    rollup is daily), rows with a key and an end user only; groups (end user, key id),
    key ids or days, ordered as queryd orders them."""
    frm_e, to_e = frm - frm % 86400, to + (86400 - to % 86400) % 86400
    sel = [r for r in rows if frm_e <= r["started_at"] // 1000 < to_e
           and r["key_id"] is not None and r["end_user"] is not None
           and key_id in (None, r["key_id"]) and end_user in (None, r["end_user"])]
    groups = {}
    for r in sel:
        g = {"end_user": (r["end_user"], r["key_id"]), "key": r["key_id"],
             "day": r["started_at"] // 86_400_000 * 86400}[group]
        groups.setdefault(g, []).append(r)
    out = [(g, usage(rs)) for g, rs in groups.items()]
    out.sort(key=lambda x: x[0] if group == "day" else
             (-x[1]["cost_micros"], -x[1]["requests"], x[0]))
    return frm_e, to_e, out, usage(sel)


EU_QUERIES = ["group=end_user", "group=end_user&key=alpha", "end_user=u-1",
              "end_user=u-1&group=day", f"end_user={Q(EU_AT)}&group=key",
              "group=end_user&key=beta&end_user=u-2", f"group=day&end_user={EU_LONG}&key=alpha",
              f"group=key&end_user={Q(EU_FORMULA)}"]


@pytest.mark.parametrize("query", EU_QUERIES)
@pytest.mark.parametrize("span", ["main"] + list(RAGGED))
def test_summary_by_end_user_matches_raw_rows(world, span, query):
    """group=end_user and an end_user filter read end_user_daily, by day only: the range
    is widened to whole UTC days and the answer's from and to say so; an end user is a
    group per key (group: its id; key_id, key_name), rows without a key are in none; the
    sums are the raw rows' ones, the groups in queryd's order (cost, requests, id, key)."""
    q, rows, keys = world["q"], world["rows"], world["keys"]
    frm, to = RAGGED.get(span, (BASE - 2 * 3600 - 1234, BASE + 3 * 86400 + 2 * 3600))
    args = {k: urllib.parse.unquote(v) for k, v in (a.split("=") for a in query.split("&"))}
    group = args.get("group", "end_user")
    got = q.get(f"/api/summary?from={frm}&to={to}&{query}&limit=1000")
    frm_e, to_e, want, total = end_user_expected(rows, frm, to, group,
                                                 key_id=keys.get(args.get("key")),
                                                 end_user=args.get("end_user"))
    assert (got["from"], got["to"], got["group"]) == (frm_e, to_e, group)
    assert got["from"] % 86400 == 0 and got["to"] % 86400 == 0
    names = {v: k for k, v in keys.items()}
    if group == "end_user":
        assert [(r["group"], r["key_id"], r["key_name"]) for r in got["rows"]] == \
            [(eu, k, names[k]) for (eu, k), _ in want]
    else:
        assert [r["group"] for r in got["rows"]] == [g for g, _ in want]
        assert all("key_id" not in r for r in got["rows"])
    for row, (g, u) in zip(got["rows"], want):
        check_usage(row, u, (span, query, g))
    check_usage(got["totals"], total, (span, query, "totals"))
    if span == "main":
        assert got["totals"]["requests"] > 10


@pytest.mark.parametrize("group", ["end_user", "tag"])
def test_summary_of_end_users_and_tags_is_bounded(world, group):
    """limit lists the first groups by cost and the totals still sum every end user or
    tag; an end user under two keys is two groups (a tag one), in byte order of their
    text on a tie; the default range is the current UTC day."""
    q, rows = world["q"], world["rows"]
    expected = end_user_expected if group == "end_user" else tag_expected
    frm, to = BASE - 86400, BASE + 4 * 86400
    _, _, want, total = expected(rows, frm, to, group)
    assert len(want) > 10
    if group == "end_user":
        assert len({name for (name, _), _ in want}) < len(want)
    for limit in (1, 5, 10):
        got = q.get(f"/api/summary?from={frm}&to={to}&group={group}&limit={limit}")
        assert [(r["group"], r.get("key_id")) for r in got["rows"]] == \
            [g if group == "end_user" else (g, None) for g, _ in want[:limit]]
        check_usage(got["totals"], total, ("limit", limit))
    got = q.get(f"/api/summary?group={group}")
    assert got["to"] - got["from"] == 86400 and got["from"] in (TODAY, TODAY + 86400)
    _, _, want, total = expected(rows, got["from"], got["to"], group)
    check_usage(got["totals"], total, "today")
    # 400 days after widening at most (the BAD list has one day more)
    got = q.get(f"/api/summary?group={group}&from={BASE}&to={BASE + 400 * 86400}")
    assert got["to"] - got["from"] == 400 * 86400


def tag_expected(rows, frm, to, group, key_id=None, tag=None):
    """A summary of tags from the raw rows: the range widened to whole UTC days (the
    rollup is daily), rows with a key and tags only, a row with n tags in n groups of
    group=tag (once in a key's or day's of one tag); groups tags (across keys), key ids
    or days, ordered as queryd orders them."""
    frm_e, to_e = frm - frm % 86400, to + (86400 - to % 86400) % 86400
    groups, sel = {}, []
    for r in rows:
        if not (frm_e <= r["started_at"] // 1000 < to_e and r["key_id"] is not None and
                r["tags"] and key_id in (None, r["key_id"])):
            continue
        for t in r["tags"].split(","):
            if tag in (None, t):
                g = {"tag": t, "key": r["key_id"],
                     "day": r["started_at"] // 86_400_000 * 86400}[group]
                groups.setdefault(g, []).append(r)
                sel.append(r)
    out = [(g, usage(rs)) for g, rs in groups.items()]
    out.sort(key=lambda x: x[0] if group == "day" else
             (-x[1]["cost_micros"], -x[1]["requests"], x[0]))
    return frm_e, to_e, out, usage(sel)


TAG_QUERIES = ["group=tag", "group=tag&key=alpha", "tag=env=prod", "tag=env=prod&group=day",
               f"tag=calc={Q('+1')}&group=key", "group=tag&key=beta&tag=a_b=1",
               "group=day&tag=feature=search&key=alpha", "tag=env=pro"]


@pytest.mark.parametrize("query", TAG_QUERIES)
@pytest.mark.parametrize("span", ["main"] + list(RAGGED))
def test_summary_by_tag_matches_raw_rows(world, span, query):
    """group=tag and a tag filter read the tag rollups (tag_total_daily, tag_daily with a
    key or by key), by day only: the range is widened to
    whole UTC days and the answer's from and to say so; a tag is one group across keys
    (group: the tag); a row counts once in each of its tags' groups, so the totals of
    group=tag are over tags (more than the rows' requests), those of one tag its rows';
    rows without a key are in none; the order is queryd's (cost, requests, tag by
    byte)."""
    q, rows, keys = world["q"], world["rows"], world["keys"]
    frm, to = RAGGED.get(span, (BASE - 2 * 3600 - 1234, BASE + 3 * 86400 + 2 * 3600))
    args = dict(a.split("=", 1) for a in query.split("&"))
    args = {k: urllib.parse.unquote(v) for k, v in args.items()}
    group = args.get("group", "tag")
    got = q.get(f"/api/summary?from={frm}&to={to}&{query}&limit=1000")
    frm_e, to_e, want, total = tag_expected(rows, frm, to, group, key_id=keys.get(args.get("key")),
                                            tag=args.get("tag"))
    assert (got["from"], got["to"], got["group"]) == (frm_e, to_e, group)
    assert [r["group"] for r in got["rows"]] == [g for g, _ in want]
    assert group == "key" or all("key_id" not in r and "key_name" not in r for r in got["rows"])
    for row, (g, u) in zip(got["rows"], want):
        check_usage(row, u, (span, query, g))
    check_usage(got["totals"], total, (span, query, "totals"))
    if span == "main" and query != "tag=env=pro":
        assert got["totals"]["requests"] > 5
    if span == "main" and query == "group=tag":
        tagged = [r for r in rows if r["key_id"] is not None and r["tags"] and
                  frm_e <= r["started_at"] // 1000 < to_e]
        assert got["totals"]["requests"] > len(tagged)    # rows with several tags


def test_summary_by_key_leaves_out_what_is_only_outside_the_range(tmp_path, kind):
    """A key (or a key's day) whose rows in a ragged end day all lie outside the range is
    added with that day and subtracted with its hours: it must not show up as a group of
    zeros."""
    db = tmp_path / "outside.db"
    tallyctl(db, "key", "create", "inside")
    tallyctl(db, "key", "create", "outside")
    con = sqlite3.connect(db)
    keys = dict(con.execute("SELECT name, id FROM keys"))
    con.close()
    at = [("outside", BASE + 2 * 3600), ("inside", BASE + 20 * 3600),
          ("inside", BASE + 86400 + 3600)]
    nd = tmp_path / "rows.ndjson"
    nd.write_text("".join(json.dumps(
        {"request_id": f"out-{i}", "key_id": keys[k], "model": "m", "provider": "p",
         "outcome": "complete", "usage_source": "response", "prompt_tokens": 10,
         "completion_tokens": 5, "started_at": t * 1000, "duration_ms": 30}) + "\n"
        for i, (k, t) in enumerate(at)))
    gen(db, "--ndjson", str(nd))
    q = Queryd(tmp_path, store_of(kind, db), name="queryd-outside")
    try:
        frm, to = BASE + 4 * 3600, BASE + 2 * 86400      # 20 hours of the first day
        got = q.get(f"/api/summary?from={frm}&to={to}&group=key")
        assert [(r["key_name"], r["requests"]) for r in got["rows"]] == [("inside", 2)]
        assert got["totals"]["requests"] == 2
        got = q.get(f"/api/summary?from={frm}&to={to}&group=day&key=outside")
        assert (got["rows"], got["totals"]["requests"]) == ([], 0)
        got = q.get(f"/api/summary?from={frm}&to={to}&group=day&key=inside")
        assert [(r["group"], r["requests"]) for r in got["rows"]] == [(BASE, 1),
                                                                     (BASE + 86400, 1)]
    finally:
        q.stop()


def fresh_store(kind, tmp_path, name):
    """A store that tools create and fill (kind: a STORES parameter): a SQLite path, or
    an empty PostgreSQL database; the options tally-gen and tallyctl need for it; and a
    function running one SQL statement on it (committed), returning its rows."""
    if kind.param == "sqlite":
        store, extra = tmp_path / f"{name}.db", []

        def sql(text):
            con = sqlite3.connect(store)
            try:
                with con:
                    return con.execute(text).fetchall()
            finally:
                con.close()
    else:
        pg = kind.getfixturevalue("pg_server")
        store = pg.create_db(f"queryd_{next(PG_DBS)}")
        extra = ["--secret", str(tmp_path / "secret")]

        def sql(text):
            return pg.query(store, text)
    return store, extra, sql


def late_rows(prefix, spans, n, seed, keys):
    """n rows of the given key ids or none, started at random in the given [from, to)
    spans (unix seconds)."""
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        lo, hi = rnd.choice(spans)
        cost = rnd.choice([None, rnd.randrange(0, 100000)])
        rows.append({"request_id": f"{prefix}-{i:04d}", "key_id": rnd.choice(keys + [None]),
                     "model": "m", "provider": "p", "stream": rnd.choice([True, False]),
                     "outcome": rnd.choice(["complete", "complete", "upstream_error"]),
                     "usage_source": "response", "prompt_tokens": rnd.randrange(0, 5000),
                     "completion_tokens": rnd.randrange(0, 3000), "cached_tokens": None,
                     "cache_creation_tokens": None, "reasoning_tokens": None, "cost_micros": cost,
                     "unpriced": False, "started_at": rnd.randrange(lo * 1000, hi * 1000),
                     "duration_ms": rnd.choice([None, 3, 120, 900, 7000]),
                     "estimated_tokens": None, "estimated_cost_micros": None})
    return rows


def write_rows(tmp_path, store, rows, name):
    """rows stored by tally-gen --ndjson: the agent's writer, its rollups included."""
    nd = tmp_path / f"{name}.ndjson"
    nd.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n"
                          for r in rows))
    gen(store, "--ndjson", str(nd))


def test_summary_by_key_kept_days_follow_late_rows(tmp_path, kind):
    """queryd keeps the sums of a summary by key's days before today (queryd/daycache.h)
    and checks them against their rows' fingerprint in each answer's snapshot: rows that
    arrive late into a kept day (a node's journal or spill, here through tally-gen and
    the agent's writer) show in the next answer, which equals the raw rows' sums."""
    store, extra, edit = fresh_store(kind, tmp_path, "late")
    for name in ("k1", "k2", "k3"):
        tallyctl(store, *extra, "key", "create", name)
    listed = json.loads(tallyctl(store, *extra, "key", "list", "--json"))
    keys = [k["id"] for k in sorted(listed, key=lambda k: k["name"])]
    # a head day read whole (20 of its hours in the range), kept days, today
    frm, to = BASE - 20 * 3600, NOW
    spans = [(BASE - 86400, BASE), (BASE, TODAY), (TODAY, NOW)]
    rows = late_rows("early", spans, 300, 11, keys)
    write_rows(tmp_path, store, rows, "early")
    queries = ["group=key", "group=day&key=k2", "group=key&key=k3"]
    q = Queryd(tmp_path, store, name="queryd-late")

    def check(what):
        for query in queries:
            args = dict(a.split("=") for a in query.split("&"))
            key_id = keys[int(args["key"][1]) - 1] if "key" in args else None
            for _ in range(2):      # read (or checked and kept), then kept
                got = q.get(f"/api/summary?from={frm}&to={to}&{query}&limit=1000")
                _, _, want, total = summary_expected(rows, frm, to, args["group"],
                                                     key_id=key_id)
                assert [r["group"] for r in got["rows"]] == [g for g, _ in want], (what, query)
                for row, (g, u) in zip(got["rows"], want):
                    check_usage(row, u, (what, query, g))
                check_usage(got["totals"], total, (what, query, "totals"))

    try:
        check("first")
        # late rows into kept days, one of them a new key, and into the head day's hours
        # outside the range (read with the day, subtracted with the hours)
        late = late_rows("late", [(BASE + 3600, BASE + 7200), (BASE - 86400, frm)], 40, 12,
                         keys)
        late[0].update(key_id=max(keys) + 1, started_at=(BASE + 2 * 86400) * 1000)
        rows += late
        write_rows(tmp_path, store, late, "late")
        check("late rows")
        # one late row alone: the smallest change the fingerprint must see
        one = late_rows("one", [(BASE + 86400, BASE + 90000)], 1, 13, keys)
        rows += one
        write_rows(tmp_path, store, one, "one")
        check("one late row")
        # the answers above came from the kept sums at least once: an edit that keeps the
        # fingerprint (which no writer makes) goes unseen
        edit(f"UPDATE key_daily SET cost_micros = cost_micros + 1 WHERE day = {BASE}")
        got = q.get(f"/api/summary?from={frm}&to={to}&group=key&limit=1000")
        assert got["totals"]["cost_micros"] == usage(
            [r for r in rows if frm - frm % 3600 <= r["started_at"] // 1000 < to]
        )["cost_micros"]
    finally:
        q.stop()


@pytest.mark.parametrize("kind", ["postgres"], indirect=True)
def test_summary_by_key_kept_days_after_a_restore(tmp_path, kind):
    """A PostgreSQL store restored under a running queryd (pg_restore --clean of an older
    dump), then refilled to exactly the kept days' count of rows and sum of requests with
    other rows: the next summary by key is the restored and new rows' sums, not the kept
    ones (the fingerprint holds key_daily's file, new after the restore)."""
    from pgserver import PG_BIN
    store, _, _ = fresh_store(kind, tmp_path, "restore")
    frm, to = BASE, TODAY
    rows = late_rows("base", [(BASE, TODAY)], 200, 21, [])     # no key: one row a day
    write_rows(tmp_path, store, rows, "base")
    dump = tmp_path / "tally.dump"
    subprocess.run([str(PG_BIN / "pg_dump"), "-Fc", "-f", str(dump), store], check=True,
                   timeout=60)

    def same_groups(prefix, seed):
        """5 rows into the days and keys rows[:5] are in: the same key_daily rows, each
        one request more; other costs at each seed."""
        more = late_rows(prefix, [(BASE, TODAY)], 5, seed, [])
        for m, r in zip(more, rows):
            m.update(key_id=r["key_id"], started_at=r["started_at"] + 1)
        return more

    q = Queryd(tmp_path, store, name="queryd-restore")
    try:
        after = same_groups("after", 22)
        write_rows(tmp_path, store, after, "after")
        for _ in range(2):
            got = q.get(f"/api/summary?from={frm}&to={to}&group=key")
            check_usage(got["totals"], usage(rows + after), "before the restore")
        subprocess.run([str(PG_BIN / "pg_restore"), "--clean", "--if-exists", "-d", store,
                        str(dump)], check=True, timeout=60)
        again = same_groups("again", 23)
        write_rows(tmp_path, store, again, "again")
        assert sum(r["cost_micros"] or 0 for r in again) != \
            sum(r["cost_micros"] or 0 for r in after)
        got = q.get(f"/api/summary?from={frm}&to={to}&group=key")
        check_usage(got["totals"], usage(rows + again), "after the restore")
    finally:
        q.stop()


def test_summary_filters_limit_and_defaults(world):
    q, rows, keys = world["q"], world["rows"], world["keys"]
    frm, to = BASE - 86400, BASE + 4 * 86400
    got = q.get(f"/api/summary?from={frm}&to={to}&group=model&key=alpha")
    _, _, want, total = summary_expected(rows, frm, to, "model", key_id=keys["alpha"])
    assert [r["group"] for r in got["rows"]] == [g for g, _ in want]
    check_usage(got["totals"], total, "key filter")
    got = q.get(f"/api/summary?from={frm}&to={to}&group=day&model=m-claude")
    _, _, want, total = summary_expected(rows, frm, to, "day", model="m-claude")
    assert [(r["group"], r["requests"]) for r in got["rows"]] == \
        [(g, u["requests"]) for g, u in want]
    # limit lists the first groups; totals still sum them all
    got = q.get(f"/api/summary?from={frm}&to={to}&group=key&limit=1")
    _, _, want, total = summary_expected(rows, frm, to, "key")
    assert len(got["rows"]) == 1 and got["rows"][0]["group"] == want[0][0]
    check_usage(got["totals"], total, "limit")
    # default: the last 24 hours, on hour boundaries
    got = q.get("/api/summary")
    assert got["to"] % 3600 == 0 and got["to"] - got["from"] == 86400
    assert got["to"] >= NOW
    status, _, body = q.request("/api/summary?key=nobody")
    assert status == 400 and json.loads(body)["param"] == "key"


def row_json(r):
    out = {k: r[k] for k in ("request_id", "key_id", "key_name", "model", "model_requested",
                             "provider", "verdict", "status", "stream", "prompt_tokens",
                             "completion_tokens", "cached_tokens", "cache_creation_tokens",
                             "reasoning_tokens", "cost_micros", "outcome", "usage_source",
                             "termination", "started_at", "duration_ms", "ttfb_ms",
                             "bytes_in", "bytes_out", "estimated_tokens",
                             "estimated_cost_micros")}
    out.update({k: r.get(k) for k in NEW_ROW_COLS})
    out.update({k: r.get(k) for k in ("team_id", "team_name", "end_user", "tags")})
    return out


def page_all(q, query, limit):
    ids, cursor, pages = [], None, 0
    while True:
        path = f"/api/requests?limit={limit}" + (f"&{query}" if query else "")
        if cursor:
            path += f"&before={cursor}"
        got = q.get(path)
        assert len(got["requests"]) <= limit
        ids += [r["request_id"] for r in got["requests"]]
        cursor = got["next"]
        pages += 1
        if cursor is None:
            return ids, pages


FILTERS = [
    ("", lambda r: True),
    ("key=alpha", lambda r: r["key_name"] == "alpha"),
    ("key_id=0", lambda r: r["key_id"] is None),
    ("model=m-claude", lambda r: r["model"] == "m-claude"),
    ("provider=p-anth", lambda r: r["provider"] == "p-anth"),
    ("status=429", lambda r: r["status"] == 429),
    ("status=5xx", lambda r: r["status"] is not None and 500 <= r["status"] <= 599),
    ("outcome=error", lambda r: r["outcome"] != "complete"),
    ("outcome=client_abort", lambda r: r["outcome"] == "client_abort"),
    ("stream=1", lambda r: r["stream"] is True),
    ("stream=0&key=beta", lambda r: r["stream"] is False and r["key_name"] == "beta"),
    (f"from={BASE}&to={BASE + 86400}", lambda r: BASE * 1000 <= r["started_at"] < (BASE + 86400) * 1000),
    (f"from={BASE}&status=4xx&key=alpha", lambda r: r["started_at"] >= BASE * 1000 and
     r["status"] is not None and 400 <= r["status"] <= 499 and r["key_name"] == "alpha"),
    ("team=platform", lambda r: r["team_name"] == "platform"),
    (f"team={HOSTILE_Q}", lambda r: r["team_name"] == HOSTILE),
    ("team_id=0", lambda r: r["team_id"] is None),
    ("team_id=0&model=m-claude", lambda r: r["team_id"] is None and r["model"] == "m-claude"),
    (f"team={HOSTILE_Q}&model=m-gpt", lambda r: r["team_name"] == HOSTILE and r["model"] == "m-gpt"),
    (f"key=alpha&team={HOSTILE_Q}", lambda r: r["key_name"] == "alpha" and r["team_name"] == HOSTILE),
    ("key_id=0&team_id=0", lambda r: r["key_id"] is None and r["team_id"] is None),
    ("end_user=u-1", lambda r: r["end_user"] == "u-1"),
    (f"end_user={Q(EU_FORMULA)}", lambda r: r["end_user"] == EU_FORMULA),
    (f"end_user={Q(EU_AT)}&key=alpha", lambda r: r["end_user"] == EU_AT and r["key_name"] == "alpha"),
    ("end_user=u-2&key_id=0", lambda r: r["end_user"] == "u-2" and r["key_id"] is None),
    (f"end_user={EU_LONG}&team=platform&status=2xx",
     lambda r: r["end_user"] == EU_LONG and r["team_name"] == "platform" and
     r["status"] is not None and 200 <= r["status"] <= 299),
    (f"end_user=-2%2B3&from={BASE}&to={BASE + 2 * 86400}&model=m-gpt",
     lambda r: r["end_user"] == "-2+3" and BASE * 1000 <= r["started_at"] < (BASE + 2 * 86400) * 1000
     and r["model"] == "m-gpt"),
    ("end_user=u-3", lambda r: False),      # an id no request named
    ("tag=env=prod", lambda r: has_tag(r, "env=prod")),
    ("tag=a_b=1", lambda r: has_tag(r, "a_b=1")),
    (f"tag=calc={Q('-2+3')}&key=alpha", lambda r: has_tag(r, "calc=-2+3") and r["key_name"] == "alpha"),
    ("tag=env=Prod&key_id=0", lambda r: has_tag(r, "env=Prod") and r["key_id"] is None),
    ("tag=feature=search&end_user=u-1", lambda r: has_tag(r, "feature=search") and r["end_user"] == "u-1"),
    ("tag=xenv=prod&team=platform&model=m-gpt",
     lambda r: has_tag(r, "xenv=prod") and r["team_name"] == "platform" and r["model"] == "m-gpt"),
    ("tag=env=prod&team_id=0&status=2xx", lambda r: has_tag(r, "env=prod") and
     r["team_id"] is None and r["status"] is not None and 200 <= r["status"] <= 299),
    (f"tag=a_b=1&from={BASE}&to={BASE + 86400}", lambda r: has_tag(r, "a_b=1") and
     BASE * 1000 <= r["started_at"] < (BASE + 86400) * 1000),
    ("tag=env=pro", lambda r: False),       # a prefix of a tag requests carry
]


def has_tag(r, tag):
    return tag in (r["tags"] or "").split(",")


@pytest.mark.parametrize("query,pred", FILTERS, ids=[f[0] or "all" for f in FILTERS])
def test_requests_filters_and_pages(world, query, pred):
    q, rows = world["q"], world["rows"]
    want = sorted((r for r in rows if pred(r)), key=lambda r: (r["started_at"], r["id"]),
                  reverse=True)
    got = q.get("/api/requests?limit=1000" + (f"&{query}" if query else ""))
    assert got["requests"] == [row_json(r) for r in want]
    assert got["next"] is None
    ids, pages = page_all(q, query, 7)
    assert ids == [r["request_id"] for r in want]
    assert pages == max(1, math.ceil(len(want) / 7))


def test_tag_filter_matches_whole_tags(world):
    """tag=env=prod keeps the rows carrying that tag and none that carry only env=prod2,
    env=Prod or xenv=prod (a part of a tag, another case, another name); a_b=1 is not
    axb=1 (LIKE's _); the page and both exports agree."""
    q, rows = world["q"], world["rows"]
    only = lambda tag: [r for r in rows if has_tag(r, tag) and not has_tag(r, "env=prod")]
    lookalikes = only("env=prod2") + only("xenv=prod") + only("env=Prod")
    assert only("env=prod2") and only("xenv=prod") and only("env=Prod")
    got = {r["request_id"] for r in q.get("/api/requests?tag=env=prod&limit=1000")["requests"]}
    assert got == {r["request_id"] for r in rows if has_tag(r, "env=prod")} and got
    assert not got & {r["request_id"] for r in lookalikes}
    got = {r["request_id"] for r in q.get("/api/requests?tag=a_b=1&limit=1000")["requests"]}
    assert got and not got & {r["request_id"] for r in rows if has_tag(r, "axb=1")
                              and not has_tag(r, "a_b=1")}
    frm, to = BASE - 86400, NOW + 60
    _, body = export(q, f"from={frm}&to={to}&tag=env=prod&format=ndjson")
    got = [json.loads(x) for x in body.decode().splitlines()]
    assert {r["request_id"] for r in got} == {r["request_id"] for r in rows if has_tag(r, "env=prod")
                                              and frm * 1000 <= r["started_at"] < to * 1000}
    assert all("env=prod" in r["tags"].split(",") for r in got)


def test_request_by_id(world):
    q, rows = world["q"], world["rows"]
    r = rows[42]
    assert q.get(f"/api/requests/{r['request_id']}") == {"request": row_json(r)}
    status, headers, body = q.request("/api/requests/no-such-id")
    assert status == 404 and json.loads(body) == {"error": "no request has this id"}
    assert headers["content-type"] == "application/json; charset=utf-8"


def month_start(t):
    tm = time.gmtime(t)
    return calendar.timegm((tm.tm_year, tm.tm_mon, 1, 0, 0, 0))


def test_keys_limits_and_spend(world):
    q, rows, keys = world["q"], world["rows"], world["keys"]
    got = {k["name"]: k for k in q.get("/api/keys")["keys"]}
    assert sorted(got) == ["alpha", "beta", "gamma"]
    a, b, g = got["alpha"], got["beta"], got["gamma"]
    assert a["id"] == keys["alpha"] and a["prefix"].startswith("tly_") and len(a["prefix"]) == 12
    assert a["models"] == [] and a["default_model"] is None and a["revoked_at"] is None
    assert a["limits"] == {"rpm": None, "tpm": None, "max_concurrent": None,
                           "budget_micros": 12500000, "budget_period": "total",
                           "time_zone": "UTC"}
    assert b["models"] == ["m-gpt"] and b["default_model"] == "m-gpt"
    assert b["limits"] == {"rpm": 60, "tpm": 1000, "max_concurrent": 3,
                           "budget_micros": 1000000, "budget_period": "day",
                           "time_zone": "UTC"}
    assert g["revoked_at"] is not None and g["limits"]["budget_period"] == "month"

    def spend(key_id, start):
        sel = [r for r in rows if r["key_id"] == key_id and r["started_at"] >= start * 1000]
        u = usage(sel)
        return {"cost_micros": u["cost_micros"],
                "estimated_cost_micros": u["estimated_cost_micros"],
                "charged_micros": u["cost_micros"] + u["estimated_cost_micros"],
                "requests": u["requests"], "total_tokens": u["total_tokens"]}
    assert a["spend"] == {"period": "total", "period_start": 0, **spend(keys["alpha"], 0)}
    # queryd's period is of its own now: a run that crosses midnight UTC (or a month's
    # end) after TODAY/NOW were taken sees the next period, empty.
    day = b["spend"]["period_start"]
    assert day in (TODAY, TODAY + 86400)
    assert b["spend"] == {"period": "day", "period_start": day, **spend(keys["beta"], day)}
    assert b["spend"]["requests"] == (30 if day == TODAY else 0)
    ms = g["spend"]["period_start"]
    assert ms in (month_start(NOW), month_start(NOW + 86400))
    assert g["spend"] == {"period": "month", "period_start": ms, **spend(keys["gamma"], ms)}


def test_keys_name_their_team(world):
    """Each key of /api/keys names its team (team_id, team_name), null for a key without
    one; the team's name is the operator's text and parses back exactly (HOSTILE)."""
    q, teams = world["q"], world["teams"]
    got = {k["name"]: (k["team_id"], k["team_name"]) for k in q.get("/api/keys")["keys"]}
    assert got == {"alpha": (teams["platform"], "platform"), "beta": (teams[HOSTILE], HOSTILE),
                   "gamma": (None, None)}


def test_keys_say_their_end_user_policy(world):
    """Each key of /api/keys says its end-user policy (keys.end_users, schema 15)."""
    got = {k["name"]: k["end_users"] for k in world["q"].get("/api/keys")["keys"]}
    assert got == {"alpha": "optional", "beta": "required", "gamma": "forbidden"}


def test_teams_limits_models_and_spend(world):
    """/api/teams lists every team in id order as /api/keys lists keys: limits, its
    allow-list, how many keys it has, whether they may read its usage, and its spend in
    its budget period from team_daily, which holds the rows recorded under the team (alpha's rows from before
    it moved count for HOSTILE, not for platform)."""
    q, rows, teams = world["q"], world["rows"], world["teams"]
    got = q.get("/api/teams")["teams"]
    assert [t["name"] for t in got] == ["platform", HOSTILE]
    p, h = got
    assert (p["id"], p["keys"], p["models"]) == (teams["platform"], 1, [])
    assert p["members_see_usage"] is False and h["members_see_usage"] is True
    assert p["limits"] == {"rpm": None, "tpm": None, "max_concurrent": None,
                           "budget_micros": None, "budget_period": "month",
                           "time_zone": "UTC"}
    assert (h["id"], h["keys"], sorted(h["models"])) == (teams[HOSTILE], 1, ["m-claude", "m-gpt"])
    assert h["limits"]["budget_micros"] == 5000000 and h["limits"]["budget_period"] == "total"

    def spend(team_id, start):
        u = usage([r for r in rows if r["team_id"] == team_id and r["started_at"] >= start * 1000])
        return {"cost_micros": u["cost_micros"],
                "estimated_cost_micros": u["estimated_cost_micros"],
                "charged_micros": u["cost_micros"] + u["estimated_cost_micros"],
                "requests": u["requests"], "total_tokens": u["total_tokens"]}
    assert h["spend"] == {"period": "total", "period_start": 0, **spend(teams[HOSTILE], 0)}
    assert h["spend"]["requests"] > 10
    ms = p["spend"]["period_start"]
    assert ms in (month_start(NOW), month_start(NOW + 86400))
    assert p["spend"] == {"period": "month", "period_start": ms, **spend(teams["platform"], ms)}


def test_team_name_is_data_in_json_csv_and_ndjson(world):
    """HOSTILE (a formula, quotes, a comma, a backslash, "},{", CR LF, a control
    character, U+2028) is a value everywhere: the JSON answers parse to it exactly, the
    NDJSON export is one line per row, and its CSV cells are quoted and behind a ' as a
    key name's would be (row.c: every text cell)."""
    q, rows, teams = world["q"], world["rows"], world["teams"]
    mine = [r for r in rows if r["team_id"] == teams[HOSTILE]]
    got = q.get(f"/api/requests?team={HOSTILE_Q}&limit=1")["requests"][0]
    assert got["team_name"] == HOSTILE and got["team_id"] == teams[HOSTILE]
    got = q.get(f"/api/summary?from={BASE - 86400}&to={NOW + 60}&team={HOSTILE_Q}")
    assert [(r["group"], r["team_name"], r["requests"]) for r in got["rows"]] == \
        [(teams[HOSTILE], HOSTILE, len(mine))]
    frm, to = BASE - 86400, NOW + 60
    _, body = export(q, f"from={frm}&to={to}&team={HOSTILE_Q}&format=ndjson")
    lines = body.split(b"\n")
    assert lines[-1] == b"" and len(lines) == len(mine) + 1
    assert all(json.loads(x)["team_name"] == HOSTILE for x in lines[:-1])
    _, body = export(q, f"from={frm}&to={to}&team={HOSTILE_Q}")
    table = list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))
    at = table[0].index("team_name")
    assert len(table) == len(mine) + 1
    assert {line[at] for line in table[1:]} == {"'" + HOSTILE}
    quoted = '"\'' + HOSTILE.replace('"', '""') + '"'
    assert body.count(quoted.encode()) == len(mine)


def test_line_separators_are_escaped(tmp_path, kind):
    """U+2028 and U+2029, valid in JSON strings but refused in a string literal by
    JavaScript before ES2019 (eval) and line ends to some NDJSON readers, leave queryd
    as \\u2028 and \\u2029 in every JSON answer and in the NDJSON export (a key's
    name, its allow-list, a row's model), never as their UTF-8 bytes; the body still
    parses to the original text."""
    store, extra, sql = fresh_store(kind, tmp_path, "seps")
    tallyctl(store, *extra, "key", "create", "sep")
    name, model = "a\u2028b\u2029c", "m\u2029\u2028"
    key_id = sql(f"UPDATE keys SET name = '{name}' RETURNING id")[0][0]
    sql(f"INSERT INTO key_models (key_id, model) VALUES ({key_id}, '{model}')")
    write_rows(tmp_path, store, [
        {"request_id": "sep-1", "key_id": key_id, "model": model, "provider": "p",
         "outcome": "complete", "usage_source": "response", "prompt_tokens": 10,
         "completion_tokens": 5, "started_at": BASE * 1000, "duration_ms": 30}], "seps")
    q = Queryd(tmp_path, store, name="queryd-seps")
    try:
        bodies = []
        for path in ("/api/keys", "/api/requests", "/api/requests/sep-1"):
            status, _, body = q.request(path)
            assert status == 200, (path, body)
            bodies.append((path, body))
        _, body = export(q, f"from={BASE - 60}&to={BASE + 60}&format=ndjson")
        bodies.append(("export", body))
        for path, body in bodies:
            assert b"\xe2\x80\xa8" not in body and b"\xe2\x80\xa9" not in body, (path, body)
            assert b"\\u2028" in body and b"\\u2029" in body, (path, body)
        keys = json.loads(bodies[0][1])["keys"]
        assert [(k["name"], k["models"]) for k in keys] == [(name, [model])]
        assert [(r["key_name"], r["model"]) for r in json.loads(bodies[1][1])["requests"]] == \
            [(name, model)]
        assert json.loads(bodies[2][1])["request"]["model"] == model
        lines = bodies[3][1].split(b"\n")
        assert len(lines) == 2 and lines[1] == b""
        assert (json.loads(lines[0])["key_name"], json.loads(lines[0])["model"]) == (name, model)
    finally:
        q.stop()


def test_models_prices_and_month(world):
    q, rows = world["q"], world["rows"]
    got = {m["name"]: m for m in q.get("/api/models")["models"]}
    assert sorted(got) == ["m-claude", "m-free", "m-gpt"]
    assert got["m-gpt"]["provider"] == "p-openai" and got["m-gpt"]["api"] == "openai"
    # every price of a card, null where unknown
    assert got["m-gpt"]["prices"] == [{
        "tier": "default", "above_tokens": 0, "input_micros_per_mtok": 150000,
        "cached_micros_per_mtok": 75000, "cache_write_micros_per_mtok": None,
        "cache_write_1h_micros_per_mtok": None, "output_micros_per_mtok": 600000,
        "reasoning_micros_per_mtok": None, "audio_input_micros_per_mtok": None,
        "audio_output_micros_per_mtok": None, "web_search_micros_per_call": None}]
    # 'default' first (by prompt size), then the other tiers by name
    c = CLAUDE_CARDS
    assert got["m-claude"]["prices"] == [card_json(x) for x in (c[2], c[1], c[3], c[0])]
    assert [(x["tier"], x["above_tokens"]) for x in got["m-claude"]["prices"]] == \
        [("default", 0), ("default", 200000), ("batch", 0), ("priority", 0)]
    assert got["m-free"]["prices"] == [] and got["m-free"]["month"]["requests"] == 0
    ms = month_start(NOW)
    for name, m in got.items():
        u = usage([r for r in rows if r["model"] == name and r["started_at"] >= ms * 1000])
        assert m["month"] == {"period_start": ms, "requests": u["requests"],
                              "total_tokens": u["total_tokens"], "cost_micros": u["cost_micros"],
                              "estimated_cost_micros": u["estimated_cost_micros"]}


def test_estimated_spend_beside_reported(world):
    """Estimates are summed beside the reported figures, never into them: the summary's
    groups and totals, a key's spend (charged = reported + estimated: what its budget
    counts), a model's month, one request, and its two export columns."""
    q, rows, keys = world["q"], world["rows"], world["keys"]
    est = [r for r in rows if r["estimated_tokens"] is not None]
    # the seeded rows hold every case: priced, unpriced (null cost), an estimate of 0
    assert any(r["estimated_cost_micros"] for r in est)
    assert any(r["estimated_cost_micros"] is None for r in est)
    assert any(r["estimated_tokens"] == 0 for r in est)
    assert all(r["usage_source"] in ("none", "partial") for r in est)

    frm, to = BASE - 86400, NOW + 60
    inside = [r for r in rows if r["started_at"] >= frm * 1000]
    got = q.get(f"/api/summary?from={frm}&to={to}&group=key&limit=1000")
    t = got["totals"]
    assert (t["estimated"], t["estimated_tokens"], t["estimated_cost_micros"]) == (
        sum(r["estimated_tokens"] is not None for r in inside),
        sum(r["estimated_tokens"] or 0 for r in inside),
        sum(r["estimated_cost_micros"] or 0 for r in inside))
    assert t["estimated_cost_micros"] > 0 and t["cost_micros"] == \
        sum(r["cost_micros"] or 0 for r in inside)
    by_key = {g["group"]: g for g in got["rows"]}
    a = [r for r in inside if r["key_id"] == keys["alpha"]]
    assert by_key[keys["alpha"]]["estimated_cost_micros"] == \
        sum(r["estimated_cost_micros"] or 0 for r in a)

    spend = {k["name"]: k["spend"] for k in q.get("/api/keys")["keys"]}["alpha"]
    alpha = [r for r in rows if r["key_id"] == keys["alpha"]]          # budget: total
    reported = sum(r["cost_micros"] or 0 for r in alpha)
    estimated = sum(r["estimated_cost_micros"] or 0 for r in alpha)
    assert estimated > 0
    assert (spend["cost_micros"], spend["estimated_cost_micros"], spend["charged_micros"]) == \
        (reported, estimated, reported + estimated)

    priced = next(r for r in est if r["estimated_cost_micros"])
    unpriced = next(r for r in est if r["estimated_cost_micros"] is None)
    plain = next(r for r in rows if r["estimated_tokens"] is None)
    for r in (priced, unpriced, plain):
        one = q.get(f"/api/requests/{r['request_id']}")["request"]
        assert (one["estimated_tokens"], one["estimated_cost_micros"]) == \
            (r["estimated_tokens"], r["estimated_cost_micros"]), r["request_id"]

    _, body = export(q, f"from={frm}&to={to}")
    table = list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))
    at = table[0].index("estimated_tokens")
    assert table[0][at:at + 2] == ["estimated_tokens", "estimated_cost_micros"]
    cells = {line[0]: line[at:at + 2] for line in table[1:]}
    assert cells[priced["request_id"]] == [str(priced["estimated_tokens"]),
                                           str(priced["estimated_cost_micros"])]
    assert cells[unpriced["request_id"]] == [str(unpriced["estimated_tokens"]), ""]
    assert cells[plain["request_id"]] == ["", ""]


def insert_rollup(con, table, values):
    """A rollup row: 0 in every sum not given (the writer's rows, written here)."""
    cols = {c[1]: 0 for c in con.execute(f"PRAGMA table_info({table})") if c[3]}
    cols.update(values)
    con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                list(cols.values()))


def test_usage_classes_in_rows_and_summaries(tmp_path, kind):
    """The classes schema 7 added: each request column in a request row, a page (with and
    without a key), the export (CSV and NDJSON), and the three new sums in every summary
    (daily and hourly rollups, with and without keys), each with its own value."""
    db = tmp_path / "classes.db"
    con = sqlite3.connect(db)
    con.executescript((ROOT / "sql" / "schema.sql").read_text())
    con.execute("INSERT INTO providers (name, api, backend, created_at) VALUES ('p', 'openai', 'be', 0)")
    con.execute("INSERT INTO keys (id, name, prefix, hash, created_at) VALUES (7, 'k7', 'tly_k7', ?, 0)",
                (bytes(32),))
    t0 = (BASE + 3600) * 1000
    full = {"cache_creation_1h_tokens": 200, "audio_input_tokens": 120, "audio_output_tokens": 80,
            "accepted_prediction_tokens": 30, "rejected_prediction_tokens": 7,
            "web_search_calls": 3, "service_tier": "priority"}
    rows = [
        {"request_id": "cls-1", "key_id": 7, "prompt_tokens": 1000, "completion_tokens": 500,
         "cache_creation_tokens": 300, "started_at": t0 + 1, **full},
        {"request_id": "cls-2", "key_id": 7, "prompt_tokens": 10, "completion_tokens": 5,
         "started_at": t0 + 2},
        {"request_id": "cls-3", "key_id": None, "prompt_tokens": 10, "completion_tokens": 5,
         "started_at": t0 + 3, "audio_input_tokens": 0, "web_search_calls": 0,
         "service_tier": "default"},
    ]
    with con:
        for r in rows:
            r.update(model="m-a", provider="p", outcome="complete", usage_source="response")
            con.execute(f"INSERT INTO requests ({', '.join(r)}) VALUES ({', '.join('?' * len(r))})",
                        list(r.values()))
        sums = {"requests": 3, "prompt_tokens": 1020, "completion_tokens": 510,
                "audio_input_tokens": 120, "audio_output_tokens": 80, "web_search_calls": 3,
                "model": "m-a", "provider": "p"}
        insert_rollup(con, "usage_daily", {"day": BASE, "key_id": 7, **sums})
        insert_rollup(con, "usage_hourly", {"hour": BASE + 3600, "key_id": 7, **sums})
        insert_rollup(con, "model_daily", {"day": BASE, **sums})
        insert_rollup(con, "model_hourly", {"hour": BASE + 3600, **sums})
        del sums["model"], sums["provider"]
        insert_rollup(con, "key_daily", {"day": BASE, "key_id": 7, **sums})
        insert_rollup(con, "key_hourly", {"hour": BASE + 3600, "key_id": 7, **sums})
        insert_rollup(con, "total_hourly", {"hour": BASE + 3600, **sums})
        insert_rollup(con, "tag_daily", {"day": BASE, "tag": "env=a", "key_id": 7, **sums})
        insert_rollup(con, "tag_total_daily", {"day": BASE, "tag": "env=a", **sums})
    con.close()
    ids = {r["request_id"]: r for r in rows}
    want = {rid: {k: r.get(k) for k in NEW_ROW_COLS} for rid, r in ids.items()}
    q = Queryd(tmp_path, store_of(kind, db))
    try:
        frm, to = BASE, BASE + 86400
        # (the tags' summaries read tag_total_daily, or tag_daily with a key)
        for query in ("group=day", "group=hour", "group=model&key=k7", "group=key",
                      "group=hour&key=k7", "group=tag", "group=tag&key=k7",
                      "group=day&tag=env=a", "group=key&tag=env=a"):
            got = q.get(f"/api/summary?from={frm}&to={to}&{query}")
            for u in (got["rows"][0], got["totals"]):
                assert {k: u[k] for k in NEW_SUMS} == \
                    {"audio_input_tokens": 120, "audio_output_tokens": 80,
                     "web_search_calls": 3}, (query, u)
        for rid in ids:
            one = q.get(f"/api/requests/{rid}")["request"]
            assert {k: one[k] for k in NEW_ROW_COLS} == want[rid], rid
        page = q.get(f"/api/requests?from={frm}&to={to}")["requests"]
        assert [{k: r[k] for k in NEW_ROW_COLS} for r in page] == \
            [want[rid] for rid in ("cls-3", "cls-2", "cls-1")]
        page = q.get(f"/api/requests?from={frm}&to={to}&key=k7")["requests"]
        assert [r["request_id"] for r in page] == ["cls-2", "cls-1"]
        assert {k: page[1][k] for k in NEW_ROW_COLS} == want["cls-1"]
        _, body = export(q, f"from={frm}&to={to}")
        table = list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))
        at = table[0].index(NEW_ROW_COLS[0])
        assert table[0][at:at + len(NEW_ROW_COLS)] == NEW_ROW_COLS
        assert [line[at:at + len(NEW_ROW_COLS)] for line in table[1:]] == [
            ["200", "120", "80", "30", "7", "3", "priority"],
            ["", "", "", "", "", "", ""],
            ["", "0", "", "", "", "0", "default"]]
        _, body = export(q, f"from={frm}&to={to}&format=ndjson")
        assert [{k: json.loads(x)[k] for k in NEW_ROW_COLS} for x in body.decode().splitlines()] == \
            [want[rid] for rid in ("cls-1", "cls-2", "cls-3")]
    finally:
        q.stop()


def test_export_csv_cells_are_not_formulas(tmp_path):
    """Text the client chose (the model it asked for, the end user it named, ...) that a
    spreadsheet would run as a formula is exported behind a ': =, +, -, @, tab or CR
    first (an end user's id is printable ASCII: no tab or CR); the NDJSON export and
    numbers (a negative count) stay as they are. Filtered by an end user too."""
    db = tmp_path / "formula.db"
    con = sqlite3.connect(db)
    con.executescript((ROOT / "sql" / "schema.sql").read_text())
    con.execute("INSERT INTO providers (name, api, backend, created_at) VALUES ('p', 'openai', 'be', 0)")
    t0 = (BASE + 3600) * 1000
    asked = ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)", "\tx", "\r=1", "a=1", "m-gpt"]
    users = [m if m.isprintable() else None for m in asked]     # an end user's bytes
    with con:
        for i, m in enumerate(asked):
            con.execute("INSERT INTO requests (request_id, model, model_requested, provider, "
                        "outcome, usage_source, started_at, prompt_tokens, end_user, tags) "
                        "VALUES (?, 'm', ?, 'p', 'complete', 'response', ?, ?, ?, ?)",
                        (f"f-{i}", m, t0 + i, -5 if i == 0 else 1, users[i],
                         "calc=@x,n=-2+3" if i == 1 else None))
    con.close()
    cell = lambda m: "" if m is None else "'" + m if m[0] in "=+-@\t\r" else m
    q = Queryd(tmp_path, db)
    try:
        _, body = export(q, f"from={BASE}&to={BASE + 86400}")
        table = list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))
        at, eu = table[0].index("model_requested"), table[0].index("end_user")
        assert [line[at] for line in table[1:]] == [cell(m) for m in asked]
        assert [line[eu] for line in table[1:]] == [cell(m) for m in users]
        assert (table[1][eu], table[4][eu]) == ("'" + asked[0], "'@SUM(A1)")
        assert table[1][table[0].index("prompt_tokens")] == "-5"
        # a tags cell starts with a name (a letter): never a formula, kept as it is
        tg = table[0].index("tags")
        assert [line[tg] for line in table[1:]] == ["", "calc=@x,n=-2+3"] + [""] * 6
        _, body = export(q, f"from={BASE}&to={BASE + 86400}&format=ndjson")
        assert [json.loads(x)["model_requested"] for x in body.decode().splitlines()] == asked
        assert [json.loads(x)["end_user"] for x in body.decode().splitlines()] == users
        for i in (0, 3):     # by the end user: its own index, the same cells
            _, body = export(q, f"from={BASE}&to={BASE + 86400}&end_user={Q(asked[i])}")
            table = list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))
            assert [(line[0], line[eu]) for line in table[1:]] == [(f"f-{i}", cell(asked[i]))]
    finally:
        q.stop()


def test_live_agent_down_shows_stored_counters(world):
    """Without an agent to ask (on PostgreSQL there is no default control socket), the
    counters come from the accounting rows."""
    got = world["q"].get("/api/live")
    assert got["agent"] == "down", got
    assert ("cannot connect" if world["kind"] == "sqlite" else "--control") in got["error"]
    con = sqlite3.connect(world["db"])
    con.row_factory = sqlite3.Row
    stored = dict(con.execute("SELECT received, written, dropped, duplicates, timed_out, "
                              "unpriced, updated_at, unauthenticated, pending_overflow "
                              "FROM accounting").fetchone())
    con.close()
    assert got["stored"] == stored
    assert stored["written"] == len(world["rows"])
    assert (stored["unauthenticated"], stored["pending_overflow"]) == (0, 0)


def forged_record():
    """A record as HAProxy's log-format writes it (REAL_OPENAI_UNARY of
    tests/unit/record_lines.h, read from there so that it follows the format), whose
    MACs were not made with the gateway secret."""
    text = (ROOT / "tests" / "unit" / "record_lines.h").read_text()
    macros = {}
    for m in re.finditer(r"#define (\w+)((?:[^\n]*\\\n)*[^\n]*)", text):
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"|(\w+)', m.group(2))
        macros[m.group(1)] = "".join(lit if lit else macros.get(name, "")
                                     for lit, name in parts)
    return macros["REAL_OPENAI_UNARY"].encode()


def test_live_agent_up(tmp_path):
    s = Stack(tmp_path)
    ctl = tmp_path / "agent.ctl"
    try:
        s.seed()
        s.start_agent(extra=["--control", str(ctl)])
        q = Queryd(tmp_path, s.db, args=["--control", str(ctl)])
        try:
            got = q.get("/api/live")
            assert got["agent"] == "up", got
            assert set(got["counters"]) >= {"received", "written", "dropped", "duplicates",
                                             "timed_out", "unpriced", "unauthenticated",
                                             "pending_overflow"}
            assert got["counters"]["written"] == s.counters()["written"]
            assert (got["counters"]["unauthenticated"], got["counters"]["pending_overflow"]) \
                == (0, 0)
            # two forged records, as a stranger on the records port would send them
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                for _ in range(2):
                    u.sendto(forged_record(), ("127.0.0.1", s.records_port))
            deadline = time.time() + 10
            while got["counters"]["unauthenticated"] < 2 and time.time() < deadline:
                time.sleep(0.05)
                got = q.get("/api/live")
            assert got["counters"]["unauthenticated"] == 2, got
            assert got["counters"]["received"] == s.counters()["received"]
            assert got["queue_capacity"] > 0 and got["version"].startswith("tally-agent")
            assert got["pid"] == s.procs["agent"].pid or VALGRIND
            assert "ok" not in got
            # stopped, the agent leaves its counters in the accounting row: shown stored
            assert s.stop_agent() == 0
            got = q.get("/api/live")
            assert got["agent"] == "down", got
            assert (got["stored"]["unauthenticated"], got["stored"]["pending_overflow"]) == \
                (2, 0), got
        finally:
            q.stop()
    finally:
        s.close()


def export(q, query):
    status, headers, body = q.request(f"/api/export?{query}")
    assert status == 200, body
    assert headers["cache-control"] == "no-store"
    return headers, body


@pytest.mark.parametrize("query,pred", [FILTERS[0], FILTERS[1], FILTERS[6], FILTERS[10],
                                        FILTERS[13], FILTERS[14], FILTERS[15], FILTERS[18],
                                        FILTERS[20], FILTERS[21], FILTERS[22], FILTERS[23],
                                        FILTERS[27], FILTERS[29], FILTERS[30], FILTERS[33]],
                         ids=["all", "key", "status", "stream-key", "team", "team-hostile",
                              "no-team", "key-team", "end-user", "end-user-formula",
                              "end-user-key", "end-user-no-key", "tag", "tag-formula-key",
                              "tag-no-key", "tag-none"])
def test_export_csv_and_ndjson(world, query, pred):
    q, rows = world["q"], world["rows"]
    frm, to = BASE - 86400, NOW + 60
    want = sorted((r for r in rows if pred(r) and frm * 1000 <= r["started_at"] < to * 1000),
                  key=lambda r: (r["started_at"], r["id"]))
    base = f"from={frm}&to={to}" + (f"&{query}" if query else "")
    headers, body = export(q, base)
    assert headers["content-type"] == "text/csv; charset=utf-8"
    assert headers["content-disposition"] == f'attachment; filename="tally-{frm}-{to}.csv"'
    table = list(csv.reader(io.StringIO(body.decode("utf-8"), newline="")))
    cols = list(row_json(rows[0]))
    assert table[0] == cols and len(table) == len(want) + 1

    def cell(v):
        if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
            return "'" + v   # not a formula (test_export_csv_cells_are_not_formulas)
        return "" if v is None else str(int(v)) if isinstance(v, bool) else str(v)
    assert table[1:] == [[cell(r.get(c)) for c in cols] for r in want]
    assert b'"m-gpt,""x"""' in body or not any(r["model_requested"] == 'm-gpt,"x"' for r in want)
    headers, body = export(q, base + "&format=ndjson")
    assert headers["content-type"] == "application/x-ndjson"
    assert headers["content-disposition"].endswith('.ndjson"')
    # lines end at LF only: a team name's U+2028 is JSON text, not a line break
    lines = body.decode("utf-8").split("\n")
    assert lines.pop() == ""
    assert [json.loads(x) for x in lines] == [row_json(r) for r in want]


BAD = [
    ("/api/summary?limit=0", "limit"), ("/api/summary?limit=1001", "limit"),
    ("/api/summary?limit=1x", "limit"), ("/api/summary?group=week", "group"),
    ("/api/summary?from=abc", "from"), ("/api/summary?from=-5", "from"),
    ("/api/summary?from=100&to=50", "to"), ("/api/summary?from=0&to=40000000", "to"),
    ("/api/summary?status=200", "status"), ("/api/summary?bogus=1", "bogus"),
    ("/api/summary?from=1&from=2", "from"), ("/api/summary?model=", "model"),
    ("/api/requests?before=12", "before"), ("/api/requests?before=1.2.3", "before"),
    ("/api/requests?before=-1.2", "before"), ("/api/requests?before=01.2", "before"),
    ("/api/requests?before=99999999999999999999.1", "before"),
    ("/api/requests?status=600", "status"), ("/api/requests?status=4xy", "status"),
    ("/api/requests?status=42", "status"), ("/api/requests?outcome=ok", "outcome"),
    ("/api/requests?stream=true", "stream"), ("/api/requests?key_id=x", "key_id"),
    ("/api/requests?key=alpha&key_id=1", "key_id"), ("/api/requests?format=csv", "format"),
    ("/api/requests?group=key", "group"), ("/api/requests?key=nobody", "key"),
    ("/api/export?to=5", "from"), ("/api/export?from=5", "to"),
    ("/api/export?from=1&to=5&format=xml", "format"), ("/api/export?from=1&to=5&limit=3", "limit"),
    ("/api/keys?x=1", "x"), ("/api/live?verbose", "verbose"),
    ("/api/summary?group=key&team=platform", "group"),
    ("/api/summary?team=platform&group=provider", "group"),
    ("/api/summary?team=platform&key=alpha", "key"), ("/api/summary?group=team&key=alpha", "key"),
    ("/api/summary?group=team&model=m-gpt", "model"), ("/api/summary?team_id=1", "team_id"),
    ("/api/summary?team=nobody", "team"), ("/api/requests?team=nobody", "team"),
    ("/api/requests?team=platform&team_id=1", "team_id"), ("/api/requests?team_id=-1", "team_id"),
    ("/api/export?from=1&to=5&team=", "team"), ("/api/teams?x=1", "x"),
    ("/api/summary?end_user=u-1&group=hour", "group"),
    ("/api/summary?end_user=u-1&group=provider", "group"),
    ("/api/summary?group=end_user&model=m-gpt", "model"),
    ("/api/summary?end_user=u-1&team=platform", "team"),
    ("/api/summary?group=end_user&team=platform", "team"),
    ("/api/summary?group=team&end_user=u-1", "group"),
    ("/api/summary?group=end_user&key=nobody", "key"),
    ("/api/summary?group=end_user&limit=1001", "limit"),
    (f"/api/summary?group=end_user&from={BASE}&to={BASE + 400 * 86400 + 3600}", "to"),
    ("/api/summary?end_user=a&end_user=b", "end_user"), ("/api/requests?end_user=", "end_user"),
    ("/api/export?from=1&to=5&end_user", "end_user"), ("/api/keys?end_user=u-1", "end_user"),
    ("/api/requests?tag=env", "tag"), ("/api/requests?tag=env=", "tag"),
    ("/api/requests?tag==prod", "tag"), ("/api/requests?tag=Env=prod", "tag"),
    ("/api/requests?tag=env=prod,x=1", "tag"), ("/api/requests?tag=env=pr%20od", "tag"),
    ("/api/requests?tag=env=prod%25", "tag"), ("/api/requests?tag=" + "n" * 33 + "=1", "tag"),
    ("/api/requests?tag=n=" + "v" * 65, "tag"), ("/api/export?from=1&to=5&tag=e=%27x", "tag"),
    ("/api/summary?tag=env&group=tag", "tag"), ("/api/requests?tag=a=1&tag=b=2", "tag"),
    ("/api/summary?tag=env=prod&group=hour", "group"),
    ("/api/summary?group=tag&model=m-gpt", "model"),
    ("/api/summary?tag=env=prod&team=platform", "team"),
    ("/api/summary?group=tag&end_user=u-1", "end_user"),
    ("/api/summary?group=end_user&tag=env=prod", "group"),
    ("/api/summary?group=team&tag=env=prod", "group"),
    (f"/api/summary?group=tag&from={BASE}&to={BASE + 400 * 86400 + 3600}", "to"),
]


@pytest.mark.parametrize("path,param", BAD, ids=[p for p, _ in BAD])
def test_bad_parameters_name_the_parameter(world, path, param):
    status, headers, body = world["q"].request(path)
    assert status == 400, (path, body)
    got = json.loads(body)
    assert got["param"] == param and got["error"]
    assert headers["content-type"] == "application/json; charset=utf-8"


def test_http_methods_bodies_and_paths(world):
    q = world["q"]
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        status, headers, body = q.request("/api/keys", method=method)
        assert status == 405 and headers["allow"] == "GET, HEAD", method
        assert q.request("/", method=method, token=None)[0] == 405
    status, _, body = q.request("/api/keys", body=b"{}")
    assert status == 400 and "body" in json.loads(body)["error"]
    status, headers, body = q.request("/api/keys", method="HEAD")
    assert status == 200 and body == b"" and headers["content-type"].startswith("application/json")
    for path in ("/api/nope", "/api/", "/api/requests/", "/api/keys/1"):
        status, headers, body = q.request(path)
        assert status == 404 and json.loads(body) == {"error": "not found"}, path
        assert headers["cache-control"] == "no-store"


def test_static_files(world, tmp_path):
    q = world["q"]
    status, headers, body = q.request("/", token=None)
    index = (ROOT / "queryd" / "dashboard" / "public" / "index.html").read_bytes()
    assert status == 200 and body == index
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["content-security-policy"] == \
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'"
    assert headers["x-content-type-options"] == "nosniff"
    etag = headers["etag"]
    status, _, body = q.request("/", token=None, headers={"If-None-Match": etag})
    assert status == 304 and body == b""
    assert q.request("/index.html", token=None)[2] == index
    dist = ROOT / "queryd" / "dashboard" / "node_modules" / "uplot" / "dist"
    status, headers, body = q.request("/vendor/uPlot.iife.min.js", token=None)
    assert status == 200 and body == (dist / "uPlot.iife.min.js").read_bytes()
    assert headers["content-type"] == "text/javascript; charset=utf-8"
    status, headers, body = q.request("/vendor/uPlot.min.css", token=None)
    assert status == 200 and headers["content-type"] == "text/css; charset=utf-8"
    assert q.request("/vendor/uPlot.min.css", method="HEAD", token=None)[0] == 200
    for path in ("/nope.html", "/../../etc/passwd", "/%2e%2e/etc/passwd", "/vendor/../index.html",
                 "//etc/passwd", "/.hidden", "/index.html/", "/a%00b", "/x?y"):
        status, _, body = q.request(path, token=None)
        assert status == 404 and b"root:" not in body, path
    # --static DIR serves the same paths from a directory, with the same refusals
    site = tmp_path / "site"
    (site / "vendor").mkdir(parents=True)
    (site / "index.html").write_text("<p>mine</p>")
    (site / "vendor" / "app.js").write_text("1;")
    (tmp_path / "secret.txt").write_text("root:x")
    (site / ".env").write_text("root:x")
    qs = Queryd(tmp_path, world["store"], name="queryd-static", args=["--static", str(site)])
    try:
        assert qs.request("/", token=None)[2] == b"<p>mine</p>"
        status, headers, body = qs.request("/vendor/app.js", token=None)
        assert status == 200 and body == b"1;" and headers["content-type"].startswith("text/javascript")
        for path in ("/../secret.txt", "/vendor/../../secret.txt", "/.env", "/%2e%2e/secret.txt",
                     "/vendor", "/missing.js"):
            status, _, body = qs.request(path, token=None)
            assert status == 404 and b"root:" not in body, path
    finally:
        qs.stop()


def test_refuses_missing_or_old_database(tmp_path):
    port = free_port()
    r = subprocess.run([str(binary("tally-queryd")), "--db", str(tmp_path / "none.db"),
                        "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True,
                       timeout=30, env={"TALLY_OPERATOR_TOKEN": TOKEN})
    assert r.returncode == 1 and "none.db: No such file" in r.stderr, r.stderr
    old = tmp_path / "old.db"
    con = sqlite3.connect(old)
    con.executescript((ROOT / "tests" / "integration" / "schema_v1.sql").read_text())
    con.close()
    r = subprocess.run([str(binary("tally-queryd")), "--db", str(old),
                        "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True,
                       timeout=30, env={"TALLY_OPERATOR_TOKEN": TOKEN})
    assert r.returncode == 1 and f"older than {SCHEMA}" in r.stderr, r.stderr
    v4 = tmp_path / "v4.db"         # the schema before estimates
    con = sqlite3.connect(v4)
    con.executescript((ROOT / "sql" / "schema.sql").read_text())
    con.execute("PRAGMA user_version = 4")
    con.close()
    r = subprocess.run([str(binary("tally-queryd")), "--db", str(v4),
                        "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True,
                       timeout=30, env={"TALLY_OPERATOR_TOKEN": TOKEN})
    assert r.returncode == 1 and f"schema version 4 is older than {SCHEMA}" in r.stderr, r.stderr
    r = subprocess.run([str(binary("tally-queryd")), "--threads", "0"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "--threads" in r.stderr
    r = subprocess.run([str(binary("tally-queryd")), "--help"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "--token-file" in r.stdout


def test_pages_while_the_writer_inserts(tmp_path, kind):
    """Keyset pages visit every row present when the first page was read exactly once,
    while tally-gen's writer keeps inserting (rows stamped with the current time); on
    PostgreSQL through the writer's own path there too."""
    store, extra, read = fresh_store(kind, tmp_path, "live")
    gen(store, "--rows", "300", "--keys", "3", "--days", "1", *extra)
    writer = Proc("tally-gen", [str(binary("tally-gen")), "--db", str(store), "--duration", "30",
                                "--rate", "400", "--keys", "3", *extra], tmp_path)
    q = Queryd(tmp_path, store, name="queryd-live")
    try:
        key = read("SELECT name FROM keys ORDER BY id LIMIT 1")[0][0]
        deadline = time.time() + 20
        while read("SELECT count(*) FROM requests")[0][0] < 600:
            assert time.time() < deadline and writer.alive(), writer.output()
            time.sleep(0.05)
        for query in ("", f"key={key}"):
            where = "" if not query else \
                f"WHERE key_id = (SELECT id FROM keys WHERE name = '{key}')"
            before = {r for (r,) in read(f"SELECT request_id FROM requests {where}")}
            seen, cursor, pages = [], None, 0
            while True:
                path = "/api/requests?limit=40" + (f"&{query}" if query else "") + \
                    (f"&before={cursor}" if cursor else "")
                got = q.get(path)
                seen += [r["request_id"] for r in got["requests"]]
                cursor, pages = got["next"], pages + 1
                if cursor is None:
                    break
                time.sleep(0.01)
            after = read("SELECT count(*) FROM requests")[0][0]
            assert len(seen) == len(set(seen)), "a row came twice"
            assert before <= set(seen), f"{len(before - set(seen))} rows missed"
            assert pages > 5 and after > len(before), (pages, after, len(before))
    finally:
        q.stop()
        writer.stop()


def test_query_plans_walk_the_indexes():
    """The request pages and the export read the started_at indexes in order: no sort
    (temp b-tree), whatever the filters; the summary reads rollup rows by their keys."""
    con = sqlite3.connect(":memory:")
    con.executescript((ROOT / "sql" / "schema.sql").read_text())

    def plan(name):
        sql = (ROOT / "sql" / "queries" / f"{name}.sql").read_text()
        names = set(re.findall(r":(\w+)", re.sub(r"--[^\n]*", "", sql)))
        return "\n".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql,
                                                   {n: None for n in names}))
    for name, index in (("requests_page", "INDEX requests_started_at"),
                        ("requests_page_key", "INDEX requests_key_started_at"),
                        ("requests_page_nokey", "INDEX requests_key_started_at"),
                        ("requests_page_model", "INDEX requests_model_started_at"),
                        ("requests_page_team", "INDEX requests_team_started_at"),
                        ("requests_page_end_user", "INDEX requests_end_user_started_at"),
                        ("export", "INDEX requests_started_at"),
                        ("export_end_user", "INDEX requests_end_user_started_at"),
                        ("requests_page_tag", "PRIMARY KEY"),
                        ("export_tag", "PRIMARY KEY")):
        p = plan(name)
        assert f"USING {index}" in p and "TEMP B-TREE" not in p, (name, p)
    # the partial index, its end user and range
    for name in ("requests_page_end_user", "export_end_user"):
        assert "requests_end_user_started_at (end_user=? AND started_at>? AND started_at<?)" \
            in plan(name), plan(name)
    assert "started_at<?" in plan("requests_page"), "the cursor must bound the index walk"
    # a tag's page and export walk its rows of request_tags, the cursor bounding the
    # page's walk, and fetch each row by its id
    p = plan("requests_page_tag")
    assert "SEARCH g USING PRIMARY KEY (tag=? AND started_at>? AND (started_at,id)<(?,?))" in p, p
    assert "SEARCH r USING INTEGER PRIMARY KEY (rowid=?)" in p, p
    p = plan("export_tag")
    assert "SEARCH g USING PRIMARY KEY (tag=? AND started_at>? AND started_at<?)" in p, p
    assert "SEARCH r USING INTEGER PRIMARY KEY (rowid=?)" in p, p
    p = plan("summary")
    assert "SEARCH usage_daily USING PRIMARY KEY (day>? AND day<?)" in p, p
    assert "SEARCH usage_hourly USING PRIMARY KEY (hour>? AND hour<?)" in p, p
    p = plan("summary_keys")
    assert "SEARCH key_daily USING PRIMARY KEY (day>? AND day<?)" in p, p
    assert "SEARCH key_hourly USING PRIMARY KEY (hour>? AND hour<?)" in p, p
    assert "SEARCH total_hourly USING PRIMARY KEY (hour>? AND hour<?)" in plan("summary_totals")
    p = plan("summary_teams")
    assert "SEARCH team_daily USING PRIMARY KEY (day>? AND day<?)" in p, p
    assert "SEARCH team_hourly USING PRIMARY KEY (hour>? AND hour<?)" in p, p
    assert "SEARCH total_hourly USING PRIMARY KEY (hour>? AND hour<?)" in p, p
    # a key's end users: the key's range of the primary key (key, end user, day: its
    # days filtered as read); every key's: the table (no index leads with the day),
    # grouped and ranked in a temporary b-tree
    p = plan("summary_end_users")
    assert "SEARCH end_user_daily USING PRIMARY KEY (key_id=?)" in p, p
    assert "SCAN end_user_daily" in p, p
    # a tag's days are a range of either tag rollup's primary key (tag, day[, key_id])
    p = plan("summary_tags")
    assert "SEARCH tag_daily USING PRIMARY KEY (tag=? AND day>? AND day<?)" in p, p
    assert "SEARCH tag_total_daily USING PRIMARY KEY (tag=? AND day>? AND day<?)" in p, p
    con.close()


def empty_db(path):
    """A SQLite database on the current schema, without rows."""
    con = sqlite3.connect(path)
    con.executescript((ROOT / "sql" / "schema.sql").read_text())
    con.close()
    return path


ACCOUNTING = ["received", "written", "dropped", "duplicates", "timed_out", "unpriced",
              "updated_at", "unauthenticated", "pending_overflow"]


def test_live_sums_the_nodes_counters(tmp_path, kind):
    """Several agents share a store, a row of counters each: with no agent to ask,
    /api/live shows their sums (updated_at: the newest); a store no agent has written
    to shows zeros."""
    db = empty_db(tmp_path / "nodes.db")
    con = sqlite3.connect(db)
    with con:
        con.execute("DELETE FROM accounting")
    con.close()
    store = store_of(kind, db)
    q = Queryd(tmp_path, store, args=["--control", str(tmp_path / "none.ctl")])
    try:
        got = q.get("/api/live")
        assert got["agent"] == "down" and got["stored"] == dict.fromkeys(ACCOUNTING, 0), got
        nodes = {"local": [10, 7, 3, 1, 2, 4, 1700000000, 5, 0],
                 "node-b": [20, 20, 0, 0, 0, 1, 1700000100, 0, 2]}
        sql = (f"INSERT INTO accounting (node, {', '.join(ACCOUNTING)}) VALUES "
               f"({', '.join(['%s'] * 10)})")
        for node, v in nodes.items():
            if kind.param == "sqlite":
                con = sqlite3.connect(db)
                with con:
                    con.execute(sql.replace("%s", "?"), [node, *v])
                con.close()
            else:
                kind.getfixturevalue("pg_server").query(store, sql, [node, *v])
        want = {k: a + b for k, a, b in zip(ACCOUNTING, *nodes.values())}
        want["updated_at"] = 1700000100
        assert q.get("/api/live")["stored"] == want
    finally:
        q.stop()


def test_tag_pages_hold_rows_without_a_key(tmp_path, kind):
    """A row without a key is in no tag rollup, so the last day tag_total_daily has a
    tag on bounds no page that may hold one: a tag's page, its page of rows without a
    key and an end user's page and export all find such a row days after the tag's last
    row with a key (it was cut from the last two before); a key's page still starts at
    that day."""
    db = empty_db(tmp_path / "keyless.db")
    day = (int(time.time()) // 86400 - 3) * 86400
    con = sqlite3.connect(db)
    with con:
        key = con.execute("INSERT INTO keys (name, prefix, hash, created_at) VALUES"
                          " ('k', 'tly_k', zeroblob(32), 0)").lastrowid
        tg = "INSERT INTO tag_total_daily (day, tag, " + ", ".join(
            c[1] for c in con.execute("PRAGMA table_info(tag_total_daily)")
            if c[1] not in ("day", "tag")) + ") SELECT ?, 'env=prod', " + ", ".join(
            ["1"] * (len(con.execute("PRAGMA table_info(tag_total_daily)").fetchall()) - 2))
        con.execute(tg, (day,))       # the keyed row's day, as the writer sums it
        con.executemany("INSERT INTO requests (request_id, key_id, outcome, usage_source,"
                        " started_at, end_user, tags) VALUES (?, ?, 'complete', 'none', ?,"
                        " 'u-1', 'env=prod')",
                        [("keyed", key, day * 1000 + 5),
                         ("keyless", None, (day + 2 * 86400) * 1000 + 5)])
    con.close()
    q = Queryd(tmp_path, store_of(kind, db))
    try:
        frm = day - 86400
        ids = lambda path: [r["request_id"] for r in q.get(path)["requests"]]
        assert ids(f"/api/requests?tag=env=prod&from={frm}") == ["keyless", "keyed"]
        assert ids(f"/api/requests?tag=env=prod&key_id=0&from={frm}") == ["keyless"]
        assert ids(f"/api/requests?tag=env=prod&end_user=u-1&from={frm}") == ["keyless", "keyed"]
        assert ids(f"/api/requests?tag=env=prod&key=k&from={frm}") == ["keyed"]
        _, body = export(q, f"from={frm}&to={int(time.time()) + 60}&tag=env=prod"
                            "&end_user=u-1&format=ndjson")
        assert [json.loads(x)["request_id"] for x in body.decode().splitlines()] == \
            ["keyed", "keyless"]
    finally:
        q.stop()


def test_postgres_start_refusals_and_password(pg_server, tmp_path):
    """A PostgreSQL store is refused like a file: without the schema, or at an older
    version; a URL's password never reaches the log."""
    port = free_port()
    env = {"TALLY_OPERATOR_TOKEN": TOKEN}
    url = pg_server.create_db("queryd_empty")
    r = subprocess.run([str(binary("tally-queryd")), "--db", url, "--listen",
                        f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 1 and "queryd_empty" in r.stderr, r.stderr
    old = pg_store(pg_server, "queryd_old", empty_db(tmp_path / "old.db"))
    pg_server.query(old, "UPDATE meta SET value = %s WHERE name = 'schema_version'",
                    (SCHEMA - 1,))
    r = subprocess.run([str(binary("tally-queryd")), "--db", old, "--listen",
                        f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 1 and f"older than {SCHEMA}" in r.stderr, r.stderr
    store = pg_store(pg_server, "queryd_secret", empty_db(tmp_path / "secret.db"))
    with_password = store.replace("postgres@", "postgres:s3cret-pw@")
    q = Queryd(tmp_path, with_password, name="queryd-password")
    try:
        assert q.get("/api/health")["schema_version"] == SCHEMA
        assert q.get("/api/requests")["requests"] == []
    finally:
        q.stop()
    assert "s3cret-pw" not in q.output() and "queryd_secret" in q.output()


def test_postgres_outage_costs_answers_not_the_server(tmp_path):
    """PostgreSQL stops under a running queryd: answers are 503 while it is away, and
    once it is back every thread's connection (and the export's) works again without a
    restart of queryd."""
    from pgserver import PgServer

    db = empty_db(tmp_path / "outage.db")
    con = sqlite3.connect(db)
    with con:
        con.execute("INSERT INTO requests (request_id, outcome, usage_source, started_at)"
                    " VALUES ('out-1', 'complete', 'none', ?)", (BASE * 1000,))
    con.close()
    pg = PgServer(tmp_path / "pg")
    try:
        pg.start()
        store = pg_store(pg, "outage", db)
        q = Queryd(tmp_path, store, name="queryd-outage")
        try:
            path = f"/api/requests?from={BASE - 60}&to={BASE + 60}"
            for _ in range(4):      # both threads' connections
                assert [r["request_id"] for r in q.get(path)["requests"]] == ["out-1"]
            pg.stop()
            for _ in range(4):
                status, _, body = q.request(path)
                assert status == 503, body
                assert json.loads(body) == {"error": "the database cannot be read"}
            pg.start()
            deadline, ok = time.time() + 20, 0
            while ok < 4:           # in a row: every thread back
                assert time.time() < deadline, "queryd did not reconnect"
                ok = ok + 1 if q.request(path)[0] == 200 else 0
            _, body = export(q, f"from={BASE - 60}&to={BASE + 60}&format=ndjson")
            assert [json.loads(x)["request_id"] for x in body.decode().splitlines()] == ["out-1"]
        finally:
            q.stop()
    finally:
        pg.close()


def pg_text(sql):
    """A query as common/db.c sends it to PostgreSQL: :name numbered $N by first
    appearance (comments dropped first). Also its parameter names, in that order."""
    names = []

    def number(m):
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"
    sql = re.sub(r"--[^\n]*", "", sql)
    return re.sub(r"(?<!:):(\w+)", number, sql).strip().rstrip(";"), names


def test_postgres_plans_walk_the_indexes(pg_url):
    """On PostgreSQL, with the custom plans queryd asks for (main.c, PGOPTIONS) and
    enough rows that the planner weighs them: the pages and the export (enable_sort off,
    export.c) read their index in order (no sort of the range), the summaries read their
    rollups through their keys, and no query reads a whole large table."""
    schema = (ROOT / "sql" / "pg" / "schema.sql").read_text()
    con = psycopg2.connect(pg_url)
    con.autocommit = True
    cur = con.cursor()
    cur.execute(schema)
    cur.execute("INSERT INTO providers (name, api, backend, created_at) VALUES ('p', 'openai', 'b', 0)")
    cur.execute("INSERT INTO keys (name, prefix, hash, created_at) SELECT 'k' || i, 'tly_k' || i,"
                " sha256(int8send(i)), 0 FROM generate_series(1, 50) i")
    cur.execute("INSERT INTO models (name, provider_id, created_at, updated_at)"
                " SELECT 'm' || i, (SELECT id FROM providers), 0, 0 FROM generate_series(1, 12) i")
    cur.execute("INSERT INTO teams (name, created_at) SELECT 't' || i, 0 FROM generate_series(1, 20) i")
    end = BASE * 1000
    # end users: a third of the rows name none, the others one of 5000 (12 rows each);
    # tags: half the rows carry env=prod or env=dev and one of 500 others (the trigger
    # fills request_tags)
    cur.execute("""INSERT INTO requests (request_id, key_id, model, provider, status, stream,
                       outcome, usage_source, started_at, team_id, end_user, tags)
                   SELECT 'r' || i, CASE WHEN i %% 20 = 0 THEN NULL ELSE 1 + i %% 50 END,
                          CASE WHEN i %% 1000 = 0 THEN 'rare' ELSE 'm' || (1 + i %% 12) END,
                          'p', 200, i %% 2, 'complete', 'response',
                          %s - CAST(i AS BIGINT) * 60000,
                          CASE WHEN i %% 8 = 0 THEN NULL ELSE 1 + i %% 20 END,
                          CASE WHEN i %% 3 = 0 THEN NULL ELSE 'u' || (i %% 5000) END,
                          CASE WHEN i %% 2 = 0 THEN NULL ELSE 'env=' ||
                               CASE WHEN i %% 3 = 0 THEN 'prod' ELSE 'dev' END ||
                               ',t=' || (i %% 500) END
                   FROM generate_series(1, 60000) i""", (end,))
    # the rollups: a row per period and group, 0 in every sum (NOT NULL, no default)
    groups = {"key_id, model, provider": ("1 + k % 50, 'm' || (1 + k % 12), 'p'", 60),
              "model, provider": ("'m' || (1 + k), 'p'", 12), "key_id": ("1 + k", 50),
              "team_id": ("1 + k", 20), "": ("", 1)}
    for table, t, step, group in (
            ("usage_hourly", "hour", 3600, "key_id, model, provider"),
            ("usage_daily", "day", 86400, "key_id, model, provider"),
            ("model_hourly", "hour", 3600, "model, provider"),
            ("model_daily", "day", 86400, "model, provider"),
            ("key_hourly", "hour", 3600, "key_id"), ("key_daily", "day", 86400, "key_id"),
            ("team_hourly", "hour", 3600, "team_id"), ("team_daily", "day", 86400, "team_id"),
            ("total_hourly", "hour", 3600, "")):
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s"
                    " AND is_nullable = 'NO' AND column_default IS NULL", (table,))
        given = [t] + [c.strip() for c in group.split(",") if c.strip()]
        zeros = [c for (c,) in cur.fetchall() if c not in given]
        exprs, n = groups[group]
        cur.execute(f"INSERT INTO {table} ({', '.join(given + zeros)})"
                    f" SELECT {BASE - BASE % step} - i * {step}, {exprs + ', ' if exprs else ''}"
                    f"{', '.join(['0'] * len(zeros))}"
                    f" FROM generate_series(0, 2000) i, generate_series(0, {n - 1}) k")
    # end_user_daily: 100 days of 2000 end users, each under one of the 50 keys
    cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name ="
                " 'end_user_daily' AND is_nullable = 'NO' AND column_default IS NULL"
                " AND column_name NOT IN ('day', 'key_id', 'end_user')")
    zeros = [c for (c,) in cur.fetchall()]
    cur.execute(f"INSERT INTO end_user_daily (day, key_id, end_user, {', '.join(zeros)})"
                f" SELECT {BASE - BASE % 86400} - i * 86400, 1 + k % 50, 'u' || k,"
                f" {', '.join(['1'] * len(zeros))}"
                f" FROM generate_series(0, 99) i, generate_series(0, 1999) k")
    # tag_daily: 100 days of 40 tags, each under 10 of the 50 keys
    cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name ="
                " 'tag_daily' AND is_nullable = 'NO' AND column_default IS NULL"
                " AND column_name NOT IN ('day', 'key_id', 'tag')")
    zeros = [c for (c,) in cur.fetchall()]
    cur.execute(f"INSERT INTO tag_daily (day, tag, key_id, {', '.join(zeros)})"
                f" SELECT {BASE - BASE % 86400} - i * 86400, 't=' || (k % 40), 1 + k / 40,"
                f" {', '.join(['1'] * len(zeros))}"
                f" FROM generate_series(0, 99) i, generate_series(0, 399) k")
    cur.execute(f"INSERT INTO tag_total_daily (day, tag, {', '.join(zeros)})"
                f" SELECT day, tag, {', '.join(f'sum({c})' for c in zeros)}"
                f" FROM tag_daily GROUP BY day, tag")
    cur.execute("ANALYZE")
    cur.execute("SET plan_cache_mode = force_custom_plan")
    day = BASE - BASE % 86400
    base = {"from_ms": end - 7 * 86400000, "to_ms": end, "before_ms": end,
            "before_id": -2 ** 63, "limit": 101, "errors_only": 0, "has_key": 0,
            "key_id": None, "has_team": 0, "team_id": None, "model": None, "provider": None, "status_lo": None,
            "status_hi": None, "outcome": None, "stream": None, "request_id": "r5",
            "name": "k1", "id": 1, "day_start": day, "week_start": day - 3 * 86400,
            "month_start": day - 20 * 86400,
            "from": BASE - 7 * 86400 - 1800, "to": BASE, "day_from": day - 6 * 86400,
            "day_to": day, "cache_to": day - 86400, "fp_rows": -1, "fp_requests": -1,
            "fp_file": -1, "end_user": None, "by_day": 0, "by_end_user": 1, "tag": None,
            "by_tag": 1, "per_key": 0}

    def plan(name, **values):
        path = ROOT / "sql" / "pg" / "queries" / f"{name}.sql"
        if not path.exists():
            path = ROOT / "sql" / "queries" / f"{name}.sql"
        sql, names = pg_text(path.read_text())
        # as export.c sets it on the export's own connection
        cur.execute(f"SET enable_sort = {'off' if name.startswith('export') else 'on'}")
        cur.execute("DEALLOCATE ALL")
        cur.execute(f"PREPARE q AS {sql}")
        args = [dict(base, **values)[n] for n in names]
        cur.execute(f"EXPLAIN EXECUTE q ({', '.join(['%s'] * len(args))})" if args else
                    "EXPLAIN EXECUTE q", args)
        return "\n".join(r[0] for r in cur.fetchall())

    for name, index, values in (
            ("requests_page", "requests_started_at", {}),
            ("requests_page", "requests_started_at", {"status_lo": 200, "status_hi": 299,
                                                      "stream": 1, "outcome": "complete"}),
            ("requests_page_key", "requests_key_started_at", {"key_id": 7}),
            ("requests_page_nokey", "requests_", {}),   # either walk suits 5% of rows
            ("requests_page_model", "requests_model_started_at", {"model": "rare"}),
            ("requests_page_team", "requests_team_started_at", {"team_id": 3}),
            ("requests_page", "requests_started_at", {"has_team": 1}),   # rows without a team
            # a tag: its own rows in request_tags, whatever else narrows them
            ("requests_page_tag", "request_tags_pkey", {"tag": "env=prod"}),
            ("requests_page_tag", "request_tags_pkey",
             {"tag": "env=prod", "has_team": 1, "team_id": 3, "model": "m8"}),
            ("export_tag", "request_tags_pkey", {"tag": "env=prod"}),
            ("export_tag", "request_tags_pkey", {"tag": "env=prod", "has_key": 1, "key_id": 7}),
            ("export", "requests_started_at", {}),
            # a team's export: its own index, in order, or the time's
            ("export", "requests_(team_)?started_at", {"has_team": 1, "team_id": 3}),
            ("export", "requests_started_at", {"has_key": 1, "key_id": 7}),
            # an end user's page and export: its own index, whatever else narrows it
            ("requests_page_end_user", "requests_end_user_started_at", {"end_user": "u7"}),
            ("requests_page_end_user", "requests_end_user_started_at",
             {"end_user": "u7", "has_key": 1, "key_id": 8}),
            ("requests_page_end_user", "requests_end_user_started_at",
             {"end_user": "u7", "has_team": 1, "team_id": 8, "model": "m8"}),
            ("export_end_user", "requests_end_user_started_at", {"end_user": "u7"}),
            ("export_end_user", "requests_end_user_started_at",
             {"end_user": "u7", "has_key": 1, "key_id": 8})):
        p = plan(name, **values)
        # a few rows (a rare model's, an end user's) may be fetched through the index
        # and sorted
        assert re.search(f"(Index (Only )?Scan (Backward )?using|Bitmap Index Scan on) {index}",
                         p), (name, p)
        assert "Seq Scan on requests" not in p, (name, p)
        # a full sort, not an incremental one of the rows of one started_at (an index
        # on started_at alone: its order is the walk's, but for ties)
        full_sort = re.search(r"(^|->  )Sort  \(", p, re.M)
        assert not full_sort or name in ("requests_page_model", "requests_page_end_user") \
            or values.get("model"), (name, p)
    assert "Seq Scan on requests" not in plan("request_one"), plan("request_one")
    for name, values in (("summary", {"key_id": 7}), ("summary", {"model": "m3"}),
                         ("summary_keys", {}), ("summary_keys", {"key_id": 7}),
                         ("summary_models", {}), ("summary_totals", {}), ("keys", {}),
                         ("models", {}), ("summary_teams", {}), ("summary_teams", {"team_id": 3}),
                         ("teams", {})):
        p = plan(name, **values)
        assert not re.search(r"Seq Scan on (requests|usage_hourly|usage_daily|model_hourly|"
                             r"model_daily|key_hourly|key_daily|team_hourly|team_daily|"
                             r"total_hourly)\b", p), (name, values, p)
    # a key's end users: a range of end_user_daily's primary key, the other branch not
    # run; every key's: the whole table (no index leads with the day)
    for values in ({"key_id": 7}, {"key_id": 7, "end_user": "u7"},
                   {"key_id": 7, "by_day": 1, "by_end_user": 0}):
        p = plan("summary_end_users", **values)
        assert re.search(r"(Index (Only )?Scan using|Bitmap Index Scan on) end_user_daily_pkey", p) \
            and "Seq Scan on end_user_daily" not in p, (values, p)
    p = plan("summary_end_users")
    assert "Seq Scan on end_user_daily" in p, p
    # a tag's days: a range of a tag rollup's primary key, per key where the key
    # matters, else across keys; every tag's: the whole table
    for values in ({"tag": "t=7"}, {"tag": "t=7", "by_day": 1, "by_tag": 0},
                   {"tag": "t=7", "key_id": 8, "per_key": 1},
                   {"tag": "t=7", "by_day": 0, "by_tag": 0, "per_key": 1}):
        table = "tag_daily" if values.get("per_key") else "tag_total_daily"
        p = plan("summary_tags", **values)
        assert re.search(r"(Index (Only )?Scan using|Bitmap Index Scan on) %s_pkey" % table, p) \
            and "Seq Scan on tag" not in p, (values, p)
    con.close()


def test_both_stores_answer_byte_for_byte(seeded, pg_server, tmp_path):
    """The same rows on SQLite and on PostgreSQL give the same bytes on every endpoint:
    numbers as numbers (PostgreSQL's sums are NUMERIC), nulls, names in byte order."""
    frm, to = BASE - 2 * 3600 - 1234, BASE + 3 * 86400 + 2 * 3600
    paths = [f"/api/summary?from={frm}&to={to}&group={g}&limit=1000{f}"
             for g in ("key", "model", "provider", "hour", "day")
             for f in ("", "&key=alpha", "&model=m-claude")]
    paths += [f"/api/summary?from={frm}&to={to}&limit=1000&{query}" for query in TEAM_QUERIES]
    paths += [f"/api/summary?from={frm}&to={to}&limit=1000&{query}" for query in EU_QUERIES]
    # the first groups, ties at the cut included, are the same (end users in byte order)
    paths += [f"/api/summary?from={frm}&to={to}&group=end_user&limit={n}" for n in (3, 9)]
    paths += [f"/api/summary?from={frm}&to={to}&limit=1000&{query}" for query in TAG_QUERIES]
    paths += [f"/api/summary?from={frm}&to={to}&group=tag&limit={n}" for n in (3, 9)]
    paths += ["/api/requests?limit=1000" + (f"&{query}" if query else "") for query, _ in FILTERS]
    paths += ["/api/requests?limit=7&before=" + str(BASE * 1000 + 5000) + ".99999",
              "/api/requests/req-00042", "/api/requests/nope", "/api/keys", "/api/models",
              "/api/teams", f"/api/export?from={BASE - 86400}&to={NOW + 60}&team={HOSTILE_Q}",
              f"/api/export?from={BASE - 86400}&to={NOW + 60}",
              f"/api/export?from={BASE - 86400}&to={NOW + 60}&format=ndjson&key_id=0",
              f"/api/export?from={BASE - 86400}&to={NOW + 60}&end_user={Q(EU_FORMULA)}",
              "/api/summary?key=nobody"]
    store = pg_store(pg_server, "queryd_bytes", seeded["db"])
    ql = Queryd(tmp_path, seeded["db"], name="queryd-bytes-sqlite")
    try:
        qp = Queryd(tmp_path, store, name="queryd-bytes-pg")
        try:
            for path in paths:
                got = [q.request(path) for q in (ql, qp)]
                assert got[0][0] == got[1][0], (path, got[0][0], got[1][0])
                assert got[0][2] == got[1][2], (path, got[0][2][:300], got[1][2][:300])
        finally:
            qp.stop()
    finally:
        ql.stop()
