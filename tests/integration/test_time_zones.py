"""Budget periods in a stated time zone (docs/limits.md, "Time zones") through the real
HAProxy and agent: a key's or team's day, week and month begin at 00:00 in its zone;
GET /tally/v1/usage, queryd and tallyctl report that period; a zone the agent's tzdata
lacks keeps the configuration it had and says why; and on a fake clock (libfaketime) a
zoned budget resets exactly at the zone's midnight, on one node and on every node of a
cluster. Python's zoneinfo, a reader of the same tzdata written apart from ours, says
where each period begins."""
import json
import sqlite3
import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from stack import BOTH_STORES, store  # noqa: F401 (a fixture)
from test_limits import chat, error_code, stack  # noqa: F401 (a fixture)
from test_periods import (fake_cluster, fake_gateway, iso, shared_budget_crosses,
                          spend_until_refused)
from test_queryd import Queryd
from test_teams import COST, COSTLY, RELOAD_S, member, team
from test_usage_endpoint import usage_when

LEAD_S = 20
CLUSTER_LEAD_S = 45
KOLKATA = ZoneInfo("Asia/Kolkata")     # +05:30: its midnight is 18:30 UTC
NEW_YORK = ZoneInfo("America/New_York")


def local_start(zone, t, kind="day"):
    """Unix seconds of the start of the zone's day (or month) containing t."""
    d = datetime.fromtimestamp(t, zone).replace(hour=0, minute=0, second=0, microsecond=0)
    if kind == "month":
        d = d.replace(day=1)
    return int(d.timestamp())


def next_local_midnight(zone, real, lead):
    """The first midnight of zone at least lead + 5 s after real."""
    d = datetime.fromtimestamp(real, zone).replace(hour=0, minute=0, second=0, microsecond=0)
    while d.timestamp() - real < lead + 5:
        d = (d + timedelta(days=1, hours=3)).replace(hour=0)
    return int(d.timestamp())


@BOTH_STORES
def test_a_zoned_budget_counts_and_reports_the_zones_period(stack):
    """A key whose day is Kolkata's and a team whose month is New York's refuse at their
    budgets and report their periods from the zone's midnight: the usage endpoint (with
    the zone named), tallyctl's lists; a zone that is no zone is refused by tallyctl."""
    key = stack.create_key("kolkata", "--default-model", "mock-gpt", "--budget-usd", "0.5",
                           "--budget-period", "day", "--budget-tz", "Asia/Kolkata")
    team(stack, "nyc", "--budget-usd", "0.3", "--budget-tz", "America/New_York",
         "--members-see-usage", "yes")
    other = member(stack, "nyc-svc", "nyc")
    time.sleep(RELOAD_S)
    got, _, body = spend_until_refused(stack, key)
    now = time.time()
    assert got == [200, 200, 200, 402] and error_code(body) == "budget_exceeded"
    start = local_start(KOLKATA, now)
    k = usage_when(stack, key, lambda u: u["key"]["spent_micros"] == 3 * COST)["key"]
    assert k["period"] == {"kind": "day", "time_zone": "Asia/Kolkata", "start": iso(start),
                           "end": iso(local_start(KOLKATA, start + 86400 + 3600))}
    assert iso(start).endswith("T18:30:00Z")
    got, _, body = spend_until_refused(stack, other)
    assert got == [200, 200, 402] and error_code(body) == "team_budget_exceeded"
    u = usage_when(stack, other, lambda u: u["team"]["spent_micros"] == 2 * COST)
    assert u["key"]["period"]["time_zone"] == "UTC"   # the key's own: no zone
    month = local_start(NEW_YORK, now, "month")
    assert u["team"]["period"]["time_zone"] == "America/New_York"
    assert u["team"]["period"]["start"] == iso(month)

    keys = json.loads(stack.tallyctl("key", "list", "--json").stdout)
    assert [k["budget_tz"] for k in keys if k["name"] in ("kolkata", "nyc-svc")] == \
        ["Asia/Kolkata", None]
    teams = json.loads(stack.tallyctl("team", "list", "--json").stdout)
    assert [t["budget_tz"] for t in teams if t["name"] == "nyc"] == ["America/New_York"]
    for bad, says in (("../../etc/passwd", "not a zone name"), ("Mars/Olympus", "no such zone"),
                      ("zone.tab", "not a TZif file")):
        r = stack.tallyctl("key", "set", "kolkata", "--budget-tz", bad, check=False)
        assert r.returncode == 2 and says in r.stderr, (bad, r.stderr)
    # Back to UTC: stored as NULL, the budget's day UTC's again.
    stack.tallyctl("key", "set", "kolkata", "--budget-tz", "UTC")
    keys = json.loads(stack.tallyctl("key", "list", "--json").stdout)
    assert [k["budget_tz"] for k in keys if k["name"] == "kolkata"] == [None]
    u = usage_when(stack, key, lambda u: u["key"]["period"]["time_zone"] == "UTC", seconds=10)
    assert u["key"]["period"]["start"].endswith("T00:00:00Z")
    # what was spent today is spent in UTC's day too: nothing forgiven
    assert chat(stack, key, 1)[0] == 402


def store_exec(stack, sql, args=()):
    """Runs sql ("?" parameters) on the stack's store, SQLite or PostgreSQL, and returns
    its rows."""
    if stack.store == "postgres":
        return stack.pg.query(stack.db, sql.replace("?", "%s"), tuple(args))
    con = sqlite3.connect(stack.db)
    try:
        with con:
            return con.execute(sql, args).fetchall()
    finally:
        con.close()


def columns(stack, table):
    if stack.store == "postgres":
        return [r[0] for r in store_exec(stack, "SELECT column_name FROM information_schema"
                                         ".columns WHERE table_name = ? ORDER BY"
                                         " ordinal_position", (table,))]
    return [r[1] for r in store_exec(stack, f"PRAGMA table_info({table})")]


@BOTH_STORES
def test_queryd_reports_a_zoned_spend_from_the_zones_midnight(stack, tmp_path):
    """queryd's keys: a zoned key's spend counts from its zone's midnight, a row of the
    second before it left out though it shares its UTC hour and day with one of the
    midnight itself; the limits name the zone. The two rows are the request's row copied
    to those instants, with the rollup the writer would have made of them."""
    key = stack.create_key("kolkata", "--default-model", "mock-gpt", "--budget-usd", "5",
                           "--budget-period", "day", "--budget-tz", "Asia/Kolkata")
    time.sleep(RELOAD_S)
    now = time.time()
    start = local_start(KOLKATA, now)
    status, h, _ = chat(stack, key, 1, COSTLY)
    assert status == 200
    stack.row(h["x-request-id"])
    q = Queryd(tmp_path, stack.db)
    try:
        deadline = time.time() + 5
        while True:
            k = [k for k in q.get("/api/keys")["keys"] if k["name"] == "kolkata"][0]
            if k["spend"]["cost_micros"] == COST or time.time() > deadline:
                break
            time.sleep(0.2)
        assert k["limits"]["time_zone"] == "Asia/Kolkata"
        assert k["spend"]["period_start"] == start
        assert k["spend"]["cost_micros"] == COST and k["spend"]["requests"] == 1
        cols = [c for c in columns(stack, "requests") if c != "id"]
        sel = ", ".join("?" if c in ("request_id", "started_at") else c for c in cols)
        hcols = columns(stack, "key_hourly")
        for i, at in enumerate((start - 1, start)):
            store_exec(stack, f"INSERT INTO requests ({', '.join(cols)}) SELECT {sel}"
                       " FROM requests WHERE request_id = ?",
                       [f"tz-{i}", at * 1000, h["x-request-id"]]
                       if cols.index("request_id") < cols.index("started_at")
                       else [at * 1000, f"tz-{i}", h["x-request-id"]])
            vals = {"hour": at // 3600 * 3600, "requests": 1, "cost_micros": COST,
                    "key_id": k["id"]}
            store_exec(stack, f"INSERT INTO key_hourly ({', '.join(hcols)}) VALUES"
                       f" ({', '.join('?' * len(hcols))}) ON CONFLICT (hour, key_id) DO UPDATE"
                       " SET requests = key_hourly.requests + 1,"
                       " cost_micros = key_hourly.cost_micros + ?",
                       [vals.get(c, 0) for c in hcols] + [COST])
        k = [k for k in q.get("/api/keys")["keys"] if k["name"] == "kolkata"][0]
        assert k["spend"]["cost_micros"] == 2 * COST and k["spend"]["requests"] == 2, k
        assert k["spend"]["charged_micros"] == 2 * COST
        # The agent reads the same split in its own SQL (spoa/spend.c): the key's usage
        # says the same spend.
        usage_when(stack, key, lambda u: u["key"]["spent_micros"] == 2 * COST)
    finally:
        q.stop()


def test_a_zone_the_agent_cannot_read_keeps_the_configuration_it_had(stack):
    """A budget_tz written into the store by hand that this machine's tzdata lacks: the
    agent refuses the new configuration, names the row and the zone, and goes on with the
    one it had (the key's UTC budget); a later good change loads."""
    key = stack.create_key("k", "--default-model", "mock-gpt", "--budget-usd", "0.3",
                           "--budget-period", "day")
    time.sleep(RELOAD_S)
    con = sqlite3.connect(stack.db)
    with con:
        con.execute("UPDATE keys SET budget_tz = 'Mars/Olympus', budget_micros = 9000000"
                    " WHERE name = 'k'")
    con.close()
    deadline = time.time() + 10
    while "Mars/Olympus" not in stack.procs["agent"].output():
        assert time.time() < deadline, stack.logs()
        time.sleep(0.2)
    assert "no such zone" in stack.procs["agent"].output()
    got, _, body = spend_until_refused(stack, key)
    assert got == [200, 200, 402] and error_code(body) == "budget_exceeded"
    stack.tallyctl("key", "set", "k", "--budget-tz", "Asia/Kolkata")
    u = usage_when(stack, key, lambda u: u["key"]["period"]["time_zone"] == "Asia/Kolkata",
                   seconds=10)
    assert u["key"]["budget_micros"] == 9000000


def kolkata_midnight_after(real, lead):
    return next_local_midnight(KOLKATA, real, lead)


@pytest.fixture
def fake_kolkata_midnight(tmp_path):
    """A gateway whose agent's clock reads LEAD_S before Kolkata's next midnight."""
    with fake_gateway(tmp_path, kolkata_midnight_after, LEAD_S) as g:
        yield g


def test_a_zoned_budget_resets_at_the_zones_midnight_on_a_fake_clock(fake_kolkata_midnight):
    """Spent in the last seconds of Kolkata's day (18:30 UTC on the agent's clock), a day
    budget in Kolkata refuses with Retry-After counting to that midnight and admits from
    it; a UTC day budget spent alike stays refused (its day turns at 00:00 UTC)."""
    stack, midnight, offset = fake_kolkata_midnight
    keys = {tz: stack.create_key(f"k-{tz.replace('/', '-')}", "--default-model", "mock-gpt",
                                 "--budget-usd", "0.3", "--budget-period", "day",
                                 "--budget-tz", tz) for tz in ("Asia/Kolkata", "UTC")}
    time.sleep(RELOAD_S)
    for tz, key in keys.items():
        got, h, _ = spend_until_refused(stack, key)
        assert got == [200, 200, 402], tz
        if tz != "UTC":
            assert 1 <= int(h["retry-after"]) <= LEAD_S, h["retry-after"]
    assert time.time() + offset < midnight - 2, "the spending outlasted the fake clock's lead"
    while time.time() + offset < midnight - 1.5:
        time.sleep(0.1)
    assert [chat(stack, key, 1)[0] for key in keys.values()] == [402, 402]
    while time.time() + offset < midnight + 0.5:
        time.sleep(0.1)
    status, h, _ = chat(stack, keys["Asia/Kolkata"], 1, COSTLY)
    assert status == 200
    assert stack.row(h["x-request-id"])["cost_micros"] == COST
    assert chat(stack, keys["UTC"], 1)[0] == 402


@pytest.fixture
def fake_kolkata_cluster(tmp_path):
    """Two nodes whose clocks read CLUSTER_LEAD_S before Kolkata's next midnight."""
    with fake_cluster(tmp_path, kolkata_midnight_after, CLUSTER_LEAD_S) as c:
        yield c


def test_a_shared_zoned_budget_resets_at_the_zones_midnight_on_every_node(fake_kolkata_cluster):
    """A team's day budget in Kolkata spent through two nodes refuses on both until
    Kolkata's midnight on their clocks, and from then admits on both."""
    nodes, midnight, offset = fake_kolkata_cluster
    team(nodes[0], "ops", "--budget-usd", "0.3", "--budget-period", "day",
         "--budget-tz", "Asia/Kolkata")
    key = member(nodes[0], "svc", "ops")
    shared_budget_crosses(nodes, key, midnight, offset, "team_budget_exceeded")
