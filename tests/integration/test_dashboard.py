"""The dashboard end to end: a database seeded with known rows through tally-gen (the
agent's own writer, so the rollups are the real ones), tally-queryd serving it with the
dashboard's files, and headless Chromium (Debian's package) driven by playwright-core
(tests/browser/dashboard.mjs) signing in and reading what the page shows; once on the
SQLite database, once on PostgreSQL holding the same rows.

The browser script only observes; every expectation is computed here from the rows read
back from the database. The screenshots land in $TALLY_ARTIFACTS (default
build/artifacts): dashboard.png (full page, light), dashboard-dark.png,
dashboard-login.png, dashboard-drawer.png, dashboard-end-users.png (the requests of a
key's end user, under that key's top end users), dashboard-tags.png (the requests of the
top tag, under the top tags), and dashboard-failure.png when a step fails.
"""
import calendar
import http.client
import json
import os
import pathlib
import secrets
import shutil
import sqlite3
import subprocess
import time

import pytest

from conftest import ROOT, binary, free_port
from pgcopy import pg_store
from rollups import LATENCY_BOUNDS
from stack import Proc, wait_port

DASH = ROOT / "queryd" / "dashboard"
SCRIPT = ROOT / "tests" / "browser" / "dashboard.mjs"
CHROMIUM = os.environ.get("TALLY_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = pathlib.Path(os.environ.get("TALLY_ARTIFACTS", ROOT / "build" / "artifacts"))

PROVIDERS = {"openai": "openai", "anthropic": "anthropic"}
MODELS = {  # name: (provider, input and output micro-dollars per Mtok)
    "gpt-4o": ("openai", 2500000, 10000000),
    "claude-sonnet-4": ("anthropic", 3000000, 15000000),
    "gpt-4o-mini": ("openai", 150000, 600000),
}
# Cards beside each model's default one: (tier, above_tokens, input, output).
OTHER_CARDS = {
    "gpt-4o": [("priority", 0, 4250000, 17000000)],
    "claude-sonnet-4": [("default", 200000, 6000000, 22500000)],
}
# A web search price on one model's default card, micro-dollars per call.
WEB_SEARCH = {"gpt-4o": 10000}
KEYS = ["team-search", "ci-bot", "research"]
RECENT = 130      # rows in the last 15 hours: table pages of 50, 50 and 30
OLDER = 20        # rows 3 to 5 days old: in the 7-day range only
FILTER_MODEL = "claude-sonnet-4"
# Teams (schema 13) of the first two keys; the third is in none. A name that reads as a
# formula and carries markup: the page must show it as text.
TEAMS = {KEYS[0]: "search", KEYS[1]: '=ops,"<b>x</b>"'}
FILTER_TEAM = TEAMS[KEYS[1]]
# End users the requests name (schema 15), in turn; one reads as a formula with markup.
END_USERS = ["alice", "bob", '=1+2<b>x</b>', None]
FILTER_KEY = KEYS[0]     # whose top end users the page lists
# Tags the requests carry (schema 16), in turn: env=prod beside lookalikes, a value
# starting like a formula.
TAGS = ["env=prod,feature=search", "env=prod2", "feature=chat", None, "calc=-2+3,env=prod",
        "xenv=prod"]
PAGE = 50         # the dashboard's default page size


def fmt_usd(micros):
    """The dashboard's money format (app.js fmtUSD)."""
    sign = "-" if micros < 0 else ""
    m = abs(micros)
    if m >= 1_000_000:
        cents = (m + 5000) // 10000
        return f"{sign}${cents // 100:,}.{cents % 100:02d}"
    frac = f"{(m + 50) // 100:04d}" if m >= 10000 else f"{m:06d}"
    if frac == "10000":
        return f"{sign}$1.00"
    frac = frac.rstrip("0").ljust(2, "0")
    return f"{sign}$0.{frac}"


def assemble_static(dest):
    """The directory `tally-queryd --static DIR` serves, laid out as the build embeds it
    (build/dashboard/): the files of queryd/dashboard/public/ at the top (URL /<file>),
    and vendor/ with uPlot from queryd/dashboard/node_modules (URL /vendor/<file>)."""
    dist = DASH / "node_modules" / "uplot" / "dist"
    if not dist.is_dir():
        pytest.fail(f"{dist} is missing: run `make deps` (npm ci in queryd/dashboard)")
    shutil.copytree(DASH / "public", dest)
    (dest / "vendor").mkdir()
    for name in ("uPlot.iife.min.js", "uPlot.min.css"):
        shutil.copy2(dist / name, dest / "vendor" / name)
    return dest


def tallyctl(db, *args):
    r = subprocess.run([str(binary("tallyctl")), "--db", str(db), *args],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"tallyctl {args} -> {r.returncode}: {r.stderr}"
    return r.stdout


def seed_config(db):
    for name, api in PROVIDERS.items():
        tallyctl(db, "provider", "set", name, "--api", api, "--backend", f"be_{name}")
    con = sqlite3.connect(db)
    with con:
        for name, (provider, pin, pout) in MODELS.items():
            con.execute("INSERT INTO models (name, provider_id, created_at, updated_at)"
                        " SELECT ?, id, 0, 0 FROM providers WHERE name = ?", (name, provider))
            cards = [("default", 0, pin, pout)] + OTHER_CARDS.get(name, [])
            con.executemany("INSERT INTO model_prices (model_id, tier, above_tokens,"
                            " input_micros_per_mtok, output_micros_per_mtok)"
                            " SELECT id, ?, ?, ?, ? FROM models WHERE name = ?",
                            [c + (name,) for c in cards])
            if name in WEB_SEARCH:
                con.execute("UPDATE model_prices SET web_search_micros_per_call = ? WHERE"
                            " tier = 'default' AND above_tokens = 0 AND model_id ="
                            " (SELECT id FROM models WHERE name = ?)", (WEB_SEARCH[name], name))
    con.close()
    tallyctl(db, "key", "create", KEYS[0], "--budget-usd", "5")
    tallyctl(db, "key", "create", KEYS[1], "--models", "gpt-4o-mini,gpt-4o", "--rpm", "60")
    tallyctl(db, "key", "create", KEYS[2], "--budget-usd", "50", "--budget-period", "week")
    key_ids = {k["name"]: k["id"] for k in json.loads(tallyctl(db, "key", "list", "--json"))}
    con = sqlite3.connect(db)
    with con:
        for key, team in TEAMS.items():
            con.execute("INSERT INTO teams (name, created_at) VALUES (?, 0)", (team,))
            con.execute("UPDATE keys SET team_id = (SELECT id FROM teams WHERE name = ?)"
                        " WHERE id = ?", (team, key_ids[key]))
    con.close()
    return key_ids


def team_ids(db):
    """Each key's team id (None: none), as the agent would record it on its rows."""
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT id, team_id FROM keys"))
    finally:
        con.close()


def seed_rows(now_ms, key_ids, teams):
    """Known rows: RECENT in the last 15 hours, OLDER 3 to 5 days ago. Keys weigh 3:1:1,
    models 2:1:1; some upstream errors (no usage) and client aborts (partial usage), which
    carry the agent's estimate of what went unreported (some of them unpriced)."""
    rows = []
    for i in range(RECENT + OLDER):
        if i < RECENT:
            started = now_ms - 90_000 - i * 397_000
        else:
            started = now_ms - 3 * 86_400_000 - (i - RECENT) * 7_200_000
        key = KEYS[(0, 0, 0, 1, 2)[i % 5]]
        model = ("gpt-4o", "gpt-4o", "claude-sonnet-4", "gpt-4o-mini")[i % 4]
        provider, pin, pout = MODELS[model]
        stream = i % 3 == 0
        outcome, status, termination = "complete", 200, "--"
        prompt, completion = 2000 + (i * 377) % 18000, 200 + (i * 53) % 1500
        source = "stream" if stream else "response"
        est_tokens = est_cost = None
        if i % 13 == 5:                 # cut after the upstream had it: all estimated
            outcome, status, termination = "upstream_error", 502, "SH"
            prompt = completion = None
            source = "none"
            est_tokens = 1000 + i
            est_cost = None if i % 26 == 18 else (1000 * pin + i * pout + 500_000) // 1_000_000
        elif i % 17 == 3:               # the completion never reported
            outcome, termination, source = "client_abort", "CD", "partial"
            est_tokens, est_cost = 4096, (4096 * pout + 500_000) // 1_000_000
        cost = None if prompt is None else (prompt * pin + (completion if est_tokens is None else 0) * pout
                                            + 500_000) // 1_000_000
        if est_tokens is not None and source == "partial":
            completion = None
        rows.append({
            "request_id": f"{started}-{i:04x}-d4-{secrets.token_hex(4)}",
            "key_id": key_ids[key], "model": model, "model_requested": model,
            "provider": provider, "verdict": "allow", "status": status, "stream": stream,
            "prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": None,
            "cost_micros": cost, "outcome": outcome, "usage_source": source,
            "termination": termination, "started_at": started,
            "duration_ms": 120 + (i * 97) % 3000, "ttfb_ms": 40 + (i * 13) % 300,
            "bytes_in": 800 + i, "bytes_out": 2000 + 3 * i,
            "estimated_tokens": est_tokens, "estimated_cost_micros": est_cost,
            "team_id": teams[key_ids[key]],
        })
    return rows


def read_db(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    con.row_factory = sqlite3.Row
    try:
        rows = [dict(r) for r in con.execute(
            "SELECT r.*, k.name AS key_name, t.name AS team_name FROM requests r"
            " LEFT JOIN keys k ON k.id = r.key_id LEFT JOIN teams t ON t.id = r.team_id"
            " ORDER BY r.started_at DESC, r.id DESC")]
        acct = dict(con.execute("SELECT * FROM accounting").fetchone())
        return rows, acct
    finally:
        con.close()


def http_get(port, path, token=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type") or "", r.read()
    finally:
        conn.close()


def totals(rows):
    return {
        "requests": len(rows),
        "cost_micros": sum(r["cost_micros"] or 0 for r in rows),
        "estimated_cost_micros": sum(r["estimated_cost_micros"] or 0 for r in rows),
        "errors": sum(r["outcome"] != "complete" for r in rows),
        "tokens": sum((r["prompt_tokens"] or 0) + (r["completion_tokens"] or 0) for r in rows),
    }


def fmt_ms(ms):
    """The dashboard's duration format (app.js fmtMs)."""
    if ms < 1000:
        return f"{round(ms)} ms"
    if ms < 60000:
        return f"{ms / 1000:.2f} s"
    return f"{ms / 60000:.1f} min"


def latency_bucket(rows, q):
    """The rollups' bucket that holds the q-quantile of rows' durations: (over, at most),
    at most None past the last bound."""
    counts = [0] * (len(LATENCY_BOUNDS) + 1)
    for r in rows:
        counts[next((i for i, b in enumerate(LATENCY_BOUNDS) if r["duration_ms"] <= b),
                    len(LATENCY_BOUNDS))] += 1
    rank, below = max(1, q * len(rows)), 0
    for i, c in enumerate(counts[:-1]):
        if c and below + c >= rank:
            return (LATENCY_BOUNDS[i - 1] if i else 0, LATENCY_BOUNDS[i])
        below += c
    return (LATENCY_BOUNDS[-1], None)


def latency_text(rows, q):
    """What the dashboard shows of the q-quantile of rows' durations: the range of the
    rollups' bucket that holds it (app.js fmtBucket), never a figure inside it."""
    lo, hi = latency_bucket(rows, q)
    if hi is None:
        return f"> {fmt_ms(lo)}"
    return f"≤ {fmt_ms(hi)}" if not lo else f"{fmt_ms(lo)}–{fmt_ms(hi)}"


def ranking(rows, field):
    """Names by cost, then requests, descending (the API's order for top lists); acc:
    name -> [reported cost, requests, estimated cost]."""
    acc = {}
    for r in rows:
        a = acc.setdefault(r[field], [0, 0, 0])
        a[0] += r["cost_micros"] or 0
        a[1] += 1
        a[2] += r["estimated_cost_micros"] or 0
    return [name for name, _ in sorted(acc.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))], acc


@pytest.fixture(params=["sqlite", "postgres"])
def queryd(tmp_path, request):
    """A seeded database and tally-queryd serving it with the dashboard's files; stopped
    (by PID) on every exit path. On PostgreSQL queryd reads a copy of the seeded SQLite
    database (pgcopy.py), which the expectations still read."""
    db = tmp_path / "tally.db"
    key_ids = seed_config(db)
    now_ms = int(time.time() * 1000)
    seeded = seed_rows(now_ms, key_ids, team_ids(db))
    for i, row in enumerate(seeded):
        row["end_user"] = END_USERS[i % len(END_USERS)]
        row["tags"] = TAGS[i % len(TAGS)]
    ndjson = tmp_path / "rows.ndjson"
    ndjson.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n"
                              for r in seeded))
    r = subprocess.run([str(binary("tally-gen")), "--db", str(db), "--ndjson", str(ndjson)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"tally-gen --ndjson -> {r.returncode}: {r.stderr}{r.stdout}"

    store = db if request.param == "sqlite" else \
        pg_store(request.getfixturevalue("pg_server"), "dashboard", db)
    static = assemble_static(tmp_path / "static")
    token = "op-" + secrets.token_urlsafe(24)
    port = free_port()
    env = dict(os.environ, TALLY_OPERATOR_TOKEN=token)
    proc = Proc("queryd", [str(binary("tally-queryd")), "--db", str(store),
                           "--listen", f"127.0.0.1:{port}", "--static", str(static),
                           # no agent runs: the live view must say so (and show the
                           # stored counters) rather than find some other agent's socket
                           "--control", str(tmp_path / "no-agent.sock")],
                tmp_path, env=env)
    try:
        wait_port(port, proc)
        yield {"db": db, "port": port, "token": token, "seeded": seeded, "now_ms": now_ms,
               "proc": proc, "tmp": tmp_path}
    finally:
        proc.stop()


def test_dashboard_in_chromium(queryd):
    port, token, tmp = queryd["port"], queryd["token"], queryd["tmp"]
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: run `make deps` (chromium)"
    node = shutil.which("node") or shutil.which("nodejs")
    assert node, "node is missing: run `make deps`"

    # What the browser will load, checked over plain HTTP first for clearer failures.
    status, ctype, body = http_get(port, "/")
    assert status == 200 and "text/html" in ctype and b'id="login"' in body, (status, ctype)
    for path in ("/app.js", "/style.css", "/vendor/uPlot.iife.min.js", "/vendor/uPlot.min.css"):
        status, _, body = http_get(port, path)
        assert status == 200 and body, f"{path}: {status}"
    status, _, _ = http_get(port, "/api/summary")
    assert status == 401

    rows, acct = read_db(queryd["db"])
    assert len(rows) == RECENT + OLDER, "tally-gen did not store every seeded row"
    cutoff_ms = queryd["now_ms"] - 2 * 86_400_000
    recent = [r for r in rows if r["started_at"] > cutoff_ms]       # newest first
    assert len(recent) == RECENT
    want24, want7d = totals(recent), totals(rows)
    tm = time.gmtime(queryd["now_ms"] // 1000)
    month_ms = calendar.timegm((tm.tm_year, tm.tm_mon, 1, 0, 0, 0)) * 1000
    keys_rank, key_acc = ranking(recent, "key_name")
    models_rank, _ = ranking(recent, "model")
    filtered = [r["request_id"] for r in recent if r["model"] == FILTER_MODEL]
    teams_rank, _ = ranking(recent, "team_name")
    by_team = [r["request_id"] for r in recent if r["team_name"] == FILTER_TEAM]
    assert None in teams_rank and len(teams_rank) == 3
    # a row with a priced estimate on the first page of the table
    estimated = next(r for r in recent[:PAGE] if r["estimated_cost_micros"])
    assert {r["end_user"] for r in recent if r["key_name"] == FILTER_KEY} == set(END_USERS)
    assert want24["estimated_cost_micros"] > 0
    assert any(r["estimated_tokens"] and r["estimated_cost_micros"] is None for r in rows)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    spec = tmp / "browser-spec.json"
    spec.write_text(json.dumps({"url": f"http://127.0.0.1:{port}/", "token": token,
                                "wrong_token": "not-" + token, "filter_model": FILTER_MODEL,
                                "filter_team": FILTER_TEAM, "filter_key": FILTER_KEY,
                                "estimated_request_id": estimated["request_id"],
                                "artifacts": str(ARTIFACTS)}))
    r = subprocess.run([node, str(SCRIPT), str(spec)], capture_output=True, text=True,
                       timeout=240, env=dict(os.environ, TALLY_CHROMIUM=CHROMIUM), cwd=ROOT)
    lines = r.stdout.strip().splitlines()
    assert lines, f"no output from the browser script ({r.returncode}):\n{r.stderr}\n" \
                  f"{queryd['proc'].output()}"
    seen = json.loads(lines[-1])
    assert r.returncode == 0 and seen.get("ok"), \
        f"browser step failed: {json.dumps(seen, indent=1)}\n{r.stderr}\n{queryd['proc'].output()}"

    # Sign-in: the login screen first, a wrong token refused with a message, no data.
    assert seen["login_visible"] and not seen["app_visible_before_login"]
    assert seen["wrong_token_error"] and not seen["app_visible_after_wrong_token"]
    assert not seen["login_visible_after_sign_in"]

    # Charts: uPlot canvases, one point per hour of the 24-hour range (25 whole hours).
    for name, c in seen["charts"].items():
        assert c["canvases"] >= 1 and c["width"] > 200, (name, c)
        assert c["points"] == 25, (name, c)

    # The latency chart plots each hour's p95 bucket at its bound "at most" (the last
    # bound past it), hours without rows empty: never a figure inside a bucket.
    hours = {}
    for r in recent:
        hours.setdefault(r["started_at"] // 3_600_000, []).append(r)
    tops = [latency_bucket(hours[h], 0.95) for h in sorted(hours)]
    assert [v for v in seen["latency_p95"] if v is not None] == \
        [hi if hi is not None else lo for lo, hi in tops]

    # Headline figures: exactly the seeded rows of the range.
    k = seen["kpi_24h"]
    assert k["requests"] == want24["requests"] == RECENT
    assert k["requests_text"] == f"{RECENT:,}"
    assert k["cost_micros"] == want24["cost_micros"]
    assert k["cost_text"] == fmt_usd(want24["cost_micros"])
    # estimated spend beside the reported figure, never merged into it
    assert k["estimated_micros"] == want24["estimated_cost_micros"]
    assert k["estimated_text"] == f"reported · {fmt_usd(want24['estimated_cost_micros'])} estimated"
    assert k["tokens"] == want24["tokens"]
    assert k["errors"] == want24["errors"]
    assert k["error_rate_text"].endswith("%")
    # latency: the bucket's range, which is all the rollups know
    assert (k["p50_text"], k["p95_text"], k["p99_text"]) == \
        (latency_text(recent, 0.50), latency_text(recent, 0.95),
         "p99 " + latency_text(recent, 0.99))

    # Top lists: by spend.
    assert seen["top_keys"] == keys_rank, (seen["top_keys"], keys_rank)
    # by team beside by key: rows without a team are "(no team)", not a filter
    assert seen["top_teams"] == ["" if n is None else n for n in teams_rank], seen["top_teams"]
    assert seen["top_team_labels"] == ["(no team)" if n is None else n for n in teams_rank]
    assert seen["top_team_markup"] == 0
    assert seen["top_key_cost_text"] == fmt_usd(key_acc[keys_rank[0]][0])
    assert seen["top_key_estimated"] == [key_acc[n][2] for n in keys_rank]
    top_est = key_acc[keys_rank[0]][2]
    assert seen["top_key_est_text"] == (f"+ {fmt_usd(top_est)} estimated" if top_est else None)
    assert seen["top_models"] == models_rank, (seen["top_models"], models_rank)
    _, model_acc = ranking(recent, "model")
    assert seen["top_model_estimated"] == [model_acc[n][2] for n in models_rank]
    # the spend chart stacks the estimate on the reported bars
    assert seen["spend_legend"] == ["Time", "Estimated", "Reported"], seen["spend_legend"]

    # The table: newest first, every row of the range once, pages of 50.
    want_ids = [r["request_id"] for r in recent]
    got_ids = [i for p in seen["pages"] for i in p]
    assert [len(p) for p in seen["pages"]] == [PAGE, PAGE, RECENT - 2 * PAGE]
    assert len(set(got_ids)) == len(got_ids), "a row shown twice"
    assert got_ids == want_ids
    assert seen["newer_disabled_on_first"]
    assert seen["page_back"] == seen["pages"][-2]
    assert seen["page_latest"] == seen["pages"][0] == seen["after_clear"]
    assert seen["page_info"][1].startswith("Page 2 · rows 51–100")
    newest = recent[0]
    cells = seen["first_row_cells"]
    assert cells[1] == newest["request_id"] and cells[2] == newest["key_name"]
    assert cells[3] == (newest["end_user"] or "–")
    assert cells[4] == (newest["tags"] or "–").replace(",", ", ")
    assert cells[5] == newest["model"] and cells[6] == newest["provider"]
    if newest["cost_micros"] is not None and newest["estimated_tokens"] is None:
        assert cells[11] == fmt_usd(newest["cost_micros"])
    est_cost = fmt_usd(estimated["estimated_cost_micros"])
    rep_cost = fmt_usd(estimated["cost_micros"]) if estimated["cost_micros"] is not None else "–"
    assert seen["estimated_row_cost_cell"] == f"{rep_cost} + {est_cost} est."
    # a count the provider did not report is unknown, never 0
    tok = [f"{v:,}" if v is not None else "?" for v in
           (estimated["prompt_tokens"], estimated["completion_tokens"])]
    assert None in (estimated["prompt_tokens"], estimated["completion_tokens"])
    assert seen["estimated_row_tokens_cell"] == f"{tok[0]} → {tok[1]}"

    # The drawer of a row with an estimate shows it; one without has none.
    e = seen["drawer_estimated"]
    assert e["request_id"] == estimated["request_id"]
    assert e["estimated_tokens"] == f"{estimated['estimated_tokens']:,}"
    assert e["estimated_cost_micros"].startswith(est_cost + " ")
    assert seen["drawer_other"] is None, "estimates must not land under Other"

    # The detail drawer of the newest row.
    d = seen["drawer"]
    assert d["request_id"] == newest["request_id"] and d["model"] == newest["model"]
    assert d["key_name"] == newest["key_name"] and d["status"] == str(newest["status"])
    if newest["cost_micros"] is not None:
        assert d["cost_micros"].startswith(fmt_usd(newest["cost_micros"]))

    # A filter narrows the table; the export follows the filters.
    assert [i for p in seen["filtered"]["pages"] for i in p] == filtered
    assert seen["filtered"]["models"] == [FILTER_MODEL]
    assert seen["export_csv"]["lines"] == 1 + len(filtered), seen["export_csv"]
    assert "request_id" in seen["export_csv"]["header"]
    assert ",estimated_tokens,estimated_cost_micros," in seen["export_csv"]["header"]
    assert seen["export_csv"]["header"].endswith(
        ",web_search_calls,service_tier,team_id,team_name,end_user,tags")
    # the team filter: that team's rows, every page, in its export too
    assert [i for p in seen["by_team"]["pages"] for i in p] == by_team
    assert seen["by_team"]["drawer_team"] == FILTER_TEAM
    assert seen["by_team"]["export_lines"] == 1 + len(by_team)
    # a key's top end users: over whole UTC days holding the range (the rollup is daily),
    # by spend, the ids shown as text; one picked filters the table and its export
    eu = seen["end_users"]
    assert eu["from"] % 86400 == 0 and eu["to"] % 86400 == 0
    assert eu["from"] <= queryd["now_ms"] // 1000 - 86400 and eu["to"] > queryd["now_ms"] // 1000
    acc = {}
    for r in rows:
        if r["key_name"] == FILTER_KEY and r["end_user"] is not None and \
                eu["from"] * 1000 <= r["started_at"] < eu["to"] * 1000:
            a = acc.setdefault(r["end_user"], [0, 0])
            a[0] += r["cost_micros"] or 0
            a[1] += 1
    want_eu = sorted(acc, key=lambda n: (-acc[n][0], -acc[n][1], n))
    assert eu["names"] == eu["labels"] == want_eu and eu["markup"] == 0, (eu, want_eu)
    time_text = lambda t: time.strftime("%Y-%m-%d", time.gmtime(t))
    assert eu["range_text"] == \
        f"by spend · whole UTC days {time_text(eu['from'])} – {time_text(eu['to'] - 86400)}"
    picked = [r for r in recent if r["key_name"] == FILTER_KEY and r["end_user"] == want_eu[0]]
    assert [i for p in eu["pages"] for i in p] == [r["request_id"] for r in picked]
    assert eu["first_cell"] == want_eu[0] and eu["drawer"] == want_eu[0]
    assert eu["export_lines"] == 1 + len(picked) and eu["hidden_after_clear"]
    # the top tags, every key's: over whole UTC days, by spend, a row with two tags in
    # both; the first picked filters the table (whole tags: env=prod2 and xenv=prod are
    # not env=prod), its drawer and its export
    tg = seen["tags"]
    assert tg["from"] % 86400 == 0 and tg["to"] % 86400 == 0
    assert tg["from"] <= queryd["now_ms"] // 1000 - 86400 and tg["to"] > queryd["now_ms"] // 1000
    acc = {}
    for r in rows:
        if r["key_id"] is not None and r["tags"] and \
                tg["from"] * 1000 <= r["started_at"] < tg["to"] * 1000:
            for t in r["tags"].split(","):
                a = acc.setdefault(t, [0, 0])
                a[0] += r["cost_micros"] or 0
                a[1] += 1
    want_tags = sorted(acc, key=lambda n: (-acc[n][0], -acc[n][1], n))
    assert tg["names"] == tg["labels"] == want_tags, (tg, want_tags)
    assert tg["range_text"] == \
        f"by spend · whole UTC days {time_text(tg['from'])} – {time_text(tg['to'] - 86400)}"
    picked = [r for r in recent if want_tags[0] in (r["tags"] or "").split(",")]
    assert [i for p in tg["pages"] for i in p] == [r["request_id"] for r in picked]
    assert tg["first_cell"] == tg["drawer"] == picked[0]["tags"].replace(",", ", ")
    assert tg["export_lines"] == 1 + len(picked)

    # Live accounting: no agent, so the stored counters.
    live = seen["live"]
    assert live["agent"] == "down"
    assert (live["received"], live["written"], live["dropped"]) == \
        (acct["received"], acct["written"], acct["dropped"])
    assert (live["unauthenticated"], live["pending_overflow"]) == \
        (acct["unauthenticated"], acct["pending_overflow"]) == (0, 0)

    # Keys: reported and estimated spend in the budget period (research's a week from
    # Monday, the others' a month), charged = both, against the budget.
    day = queryd["now_ms"] // 86_400_000
    week_ms = (day - (day + 3) % 7) * 86_400_000
    budgets = {KEYS[0]: (5_000_000, month_ms, "this month"), KEYS[1]: (None, month_ms, "this month"),
               KEYS[2]: (50_000_000, week_ms, "this week")}
    for name in KEYS:
        budget, since, period = budgets[name]
        mine = [r for r in rows if r["key_name"] == name and r["started_at"] >= since]
        rep_k = sum(r["cost_micros"] or 0 for r in mine)
        est_k = sum(r["estimated_cost_micros"] or 0 for r in mine)
        got = seen["keys"][name]
        assert (got["cost"], got["estimated"], got["charged"]) == (rep_k, est_k, rep_k + est_k)
        assert got["spend_text"] == f"{fmt_usd(rep_k)} reported · {fmt_usd(est_k)} estimated"
        assert got["budget_text"] == (f"{fmt_usd(rep_k + est_k)} of {fmt_usd(budget)} charged {period}"
                                      if budget else f"{fmt_usd(rep_k + est_k)} charged {period}")
    # Models: both columns.
    for name in MODELS:
        mine = [r for r in rows if r["model"] == name and r["started_at"] >= month_ms]
        assert seen["models"][name] == [fmt_usd(sum(r["cost_micros"] or 0 for r in mine)),
                                        fmt_usd(sum(r["estimated_cost_micros"] or 0 for r in mine))]
    # Models: the default card in the price columns, the others beside them.
    for name, (_, pin, pout) in MODELS.items():
        got = seen["model_cards"][name]
        assert (got["input"], got["output"]) == (fmt_usd(pin), fmt_usd(pout))
        assert got["web_search"] == (fmt_usd(WEB_SEARCH[name]) if name in WEB_SEARCH
                                     else "unset"), name
        assert got["cards"] == [
            [tier, above, (f"{tier} above {above:,} tokens" if above else tier) +
             f" in {fmt_usd(i)} · out {fmt_usd(o)}"]
            for tier, above, i, o in OTHER_CARDS.get(name, [])], name
    assert acct["written"] == RECENT + OLDER

    # The range selector: the 7-day range holds every seeded row, by day.
    assert seen["kpi_7d"]["requests"] == want7d["requests"] == RECENT + OLDER
    assert seen["kpi_7d"]["cost_micros"] == want7d["cost_micros"]
    assert seen["kpi_7d"]["cost_text"] == fmt_usd(want7d["cost_micros"])
    assert seen["kpi_7d"]["estimated_micros"] == want7d["estimated_cost_micros"]
    assert 7 <= seen["chart_points_7d"] <= 9
    assert seen["kpi_24h_again"] == RECENT

    # A token refused later sends the operator back to the login screen.
    assert seen["expired_message"] and seen["token_kept_after_401"] is None

    # Nothing from elsewhere, no script errors (the refused token's 401s aside).
    assert seen["foreign_requests"] == []
    assert seen["page_errors"] == []
    assert [m for m in seen["console_errors"] if "401" not in m] == []

    shot = pathlib.Path(seen["screenshot"])
    assert shot.exists() and shot.stat().st_size > 20_000
    print(f"dashboard screenshot: {shot}")
