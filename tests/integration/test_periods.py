"""Budget periods through the real HAProxy and agent (docs/limits.md, "Budgets"): a
weekly budget of a key, a team or a tag runs from Monday 00:00 UTC; a refusal says so
and counts Retry-After to that Monday; a change of period keeps what was spent in the
new period; tallyctl, GET /tally/v1/usage and queryd report the week; and on a fake
clock (libfaketime: the agents', and the store's for several nodes) the budget resets
exactly at the boundary, on every node."""
import contextlib
import datetime
import glob
import json
import os
import sqlite3
import time

import pytest

from cluster import Cluster
from conftest import binary
from stack import BOTH_STORES, Stack, store  # noqa: F401 (a fixture)
from test_limits import chat, error_code, stack  # noqa: F401 (a fixture)
from test_queryd import Queryd
from test_tallyctl import TAG_TOTAL_COLS
from test_teams import COST, COSTLY, RELOAD_S, member, team
from test_usage_endpoint import usage, usage_when

WEEK_S = 7 * 86400
LEAD_S = 20           # the fake clock starts this long before Monday: a start, 9 requests
CLUSTER_LEAD_S = 45   # and for two nodes and their PostgreSQL


def week_start(t):
    """Unix seconds of the Monday 00:00 UTC at or before t."""
    day = int(t) // 86400
    return (day - (day + 3) % 7) * 86400


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def spend_until_refused(stack, key, headers=COSTLY):
    """Requests of COST each until one is refused: the statuses and the refusal."""
    got = []
    for _ in range(6):
        status, h, body = chat(stack, key, 1, headers)
        got.append(status)
        if status != 200:
            return got, h, body
        stack.row(h["x-request-id"])   # settled once its row exists
    raise AssertionError(got)


@BOTH_STORES
def test_a_weekly_budget_refuses_until_monday_and_a_new_period_keeps_the_spend(stack):
    """$0.50 a week at $0.20 a request: the third is admitted on the $0.40 spent and the
    fourth refused, naming the week, until the next Monday; the key reads its week; a
    change to a day or to total re-reads what was spent in the new period (today's
    rows are in both), so nothing is forgiven by it."""
    key = stack.create_key("weekly", "--default-model", "mock-gpt", "--budget-usd", "0.5",
                           "--budget-period", "week")
    time.sleep(RELOAD_S)
    got, h, body = spend_until_refused(stack, key)
    now = time.time()
    assert got == [200, 200, 200, 402]
    assert error_code(body) == "budget_exceeded"
    assert "for this week" in json.loads(body)["error"]["message"]
    monday = week_start(now) + WEEK_S
    assert abs(int(h["retry-after"]) - (monday - now)) <= 2, (h["retry-after"], monday - now)
    k = usage_when(stack, key, lambda u: u["key"]["spent_micros"] == 3 * COST)["key"]
    assert k["period"] == {"kind": "week", "time_zone": "UTC", "start": iso(week_start(now)), "end": iso(monday)}
    assert k["budget_left_micros"] == 0
    lst = json.loads(stack.tallyctl("key", "list", "--json").stdout)
    assert [x["budget_period"] for x in lst if x["name"] == "weekly"] == ["week"]
    for period in ("day", "total"):
        stack.tallyctl("key", "set", "weekly", "--budget-period", period)
        time.sleep(RELOAD_S)
        status, _, body = chat(stack, key, 1)
        assert status == 402 and error_code(body) == "budget_exceeded", (period, body)
    stack.tallyctl("key", "set", "weekly", "--budget-period", "week", "--budget-usd", "5")
    deadline = time.time() + 2
    while chat(stack, key, 1)[0] != 200:
        assert time.time() < deadline
        time.sleep(0.1)


def test_weekly_team_and_tag_budgets_and_their_reports(stack, tmp_path):
    """A team's and a tag's weekly budgets refuse at their level; the agent, tallyctl's
    lists and queryd's keys and teams count their spend from the Monday (a tag's spend
    of the Sunday before is in no one's week)."""
    team(stack, "atlas", "--budget-usd", "0.5", "--budget-period", "week")
    key = member(stack, "svc", "atlas")
    got, _, body = spend_until_refused(stack, key)
    assert got == [200, 200, 200, 402] and error_code(body) == "team_budget_exceeded"
    assert "for this week" in json.loads(body)["error"]["message"]

    # Spent on the Sunday before this week: the week's budget, seeded from tag_total_daily
    # when it is set, and tag list leave it out.
    con = sqlite3.connect(stack.db)
    with con:
        con.execute(f"INSERT INTO tag_total_daily ({TAG_TOTAL_COLS}) VALUES (?, 'project=orion'"
                    + ", 0" * 8 + ", 900000" + ", 0" * 18 + ", 0)",
                    (week_start(time.time()) - 86400,))
    con.close()
    stack.tallyctl("tag", "set", "project=orion", "--budget-usd", "0.3", "--budget-period",
                   "week")
    tagged = stack.create_key("tagged", "--default-model", "mock-gpt", "--tags",
                              "project=orion")
    time.sleep(RELOAD_S)
    got, _, body = spend_until_refused(stack, tagged)
    assert got == [200, 200, 402] and error_code(body) == "tag_budget_exceeded"
    tags = json.loads(stack.tallyctl("tag", "list", "--json").stdout)
    assert [(t["tag"], t["budget_period"], t["spent_micros"]) for t in tags] == \
        [("project=orion", "week", 2 * COST)]
    teams = json.loads(stack.tallyctl("team", "list", "--json").stdout)
    assert [t["budget_period"] for t in teams if t["name"] == "atlas"] == ["week"]

    q = Queryd(tmp_path, stack.db)
    try:
        monday = week_start(time.time())
        t = [t for t in q.get("/api/teams")["teams"] if t["name"] == "atlas"][0]
        assert t["spend"]["period"] == "week" and t["spend"]["period_start"] == monday
        assert t["spend"]["cost_micros"] == 3 * COST
        stack.tallyctl("key", "set", "tagged", "--budget-usd", "9", "--budget-period", "week")
        k = [k for k in q.get("/api/keys")["keys"] if k["name"] == "tagged"][0]
        assert k["spend"]["period"] == "week" and k["spend"]["period_start"] == monday
        assert k["spend"]["cost_micros"] == 2 * COST
    finally:
        q.stop()


def next_monday(real, lead):
    """The first Monday 00:00 UTC at least lead + 5 s after real."""
    monday = week_start(real) + WEEK_S
    return monday if monday - real >= lead + 5 else monday + WEEK_S


def skip_without_fake_clock():
    """libfaketime's start hangs an ASan build (its dlsym under the sanitizer's
    interceptors) and valgrind cannot keep to the lead: those runs skip these tests."""
    if os.environ.get("TALLY_VALGRIND") == "1":
        pytest.skip("valgrind cannot keep to the fake clock's lead")
    if b"__asan_init" in binary("tally-agent").read_bytes():
        pytest.skip("libfaketime hangs an ASan build at its start")


def fake_clock(offset):
    """The environment that runs a process on a clock offset seconds ahead (libfaketime;
    CLOCK_MONOTONIC, which timeouts use, stays true, and so do the timed waits on it:
    libfaketime's "monotonic fix" would end them early, and a node would stop waiting
    for its lease round at once)."""
    libs = glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")
    assert libs, "libfaketime is missing: make deps installs the faketime package"
    return {"LD_PRELOAD": libs[0], "FAKETIME": f"+{offset}",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_FORCE_MONOTONIC_FIX": "0"}


@contextlib.contextmanager
def fake_gateway(tmp_path, boundary_after, lead):
    """A gateway whose agent's clock (libfaketime, a fixed offset; HAProxy and the store
    keep the real one) reads lead seconds before boundary_after(real, lead) when it
    starts: the Stack, the boundary and the offset, unix seconds on that clock."""
    skip_without_fake_clock()
    real = time.time()
    boundary = boundary_after(real, lead)
    offset = int(boundary - lead - real)
    s = Stack(tmp_path, agent_env=fake_clock(offset))
    try:
        s.seed()
        s.tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai",
                   "--input-micros", "1000000", "--output-micros", "2000000")
        s.start(seed=False)
        yield s, boundary, offset
    finally:
        s.close()


@contextlib.contextmanager
def fake_cluster(tmp_path, boundary_after, lead):
    """Two nodes on a PostgreSQL of their own whose clock, like both agents', reads lead
    seconds before boundary_after(real, lead) when it starts (leases count budget
    periods on the store's clock): the nodes, the boundary and the offset."""
    from pgserver import PgServer
    skip_without_fake_clock()
    real = time.time()
    boundary = boundary_after(real, lead)
    offset = int(boundary - lead - real)
    env = fake_clock(offset)
    pg = PgServer(tmp_path / "pg", env=env)
    try:
        pg.start()
        with Cluster(tmp_path, pg, pg.create_db("periods"), 2, agent_env=env,
                     agent_args=("--lease-wait-ms", "1000")) as c:
            c.nodes[0].tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai",
                                "--input-micros", "1000000", "--output-micros", "2000000")
            yield c.nodes, boundary, offset
    finally:
        pg.close()


def shared_budget_crosses(nodes, key, boundary, offset, code):
    """Spends key's budget through both nodes until each refuses it (code), then checks
    that both still refuse just before boundary on their clocks and both admit after."""
    got = []
    for i in range(8):
        status, h, body = chat(nodes[i % 2], key, 1, COSTLY)
        got.append(status)
        if status == 200:
            nodes[i % 2].row(h["x-request-id"])
        else:
            assert status == 402 and error_code(body) == code, body
    assert got[0] == 200 and got[-2:] == [402, 402], got
    assert time.time() + offset < boundary - 2, "the spending outlasted the fake clock's lead"
    while time.time() + offset < boundary - 1.5:
        time.sleep(0.1)
    assert [chat(n, key, 1)[0] for n in nodes] == [402, 402]
    while time.time() + offset < boundary + 0.5:
        time.sleep(0.1)
    for n in nodes:
        status, h, _ = chat(n, key, 1, COSTLY)
        assert status == 200
        assert n.row(h["x-request-id"])["cost_micros"] == COST


@pytest.fixture
def fake_monday(tmp_path):
    """A gateway whose agent's clock reads LEAD_S before the next Monday 00:00 UTC."""
    with fake_gateway(tmp_path, next_monday, LEAD_S) as g:
        yield g


def test_budgets_reset_exactly_at_the_boundary_on_a_fake_clock(fake_monday):
    """Spent on Sunday evening (the agent's clock), a weekly and a daily budget refuse
    with Retry-After counting to midnight; from Monday 00:00 they admit again, and a
    monthly one only if that Monday is the 1st."""
    stack, monday, offset = fake_monday
    keys = {p: stack.create_key(p, "--default-model", "mock-gpt", "--budget-usd", "0.3",
                                "--budget-period", p) for p in ("week", "day", "month")}
    time.sleep(RELOAD_S)
    for p, key in keys.items():
        got, h, _ = spend_until_refused(stack, key)
        assert got == [200, 200, 402], p
        assert 1 <= int(h["retry-after"]) <= LEAD_S or p == "month", (p, h["retry-after"])
    assert time.time() + offset < monday - 2, "the spending outlasted the fake clock's lead"
    # Just before Monday on the agent's clock: still refused.
    while time.time() + offset < monday - 1.5:
        time.sleep(0.1)
    assert all(chat(stack, key, 1)[0] == 402 for key in keys.values())
    while time.time() + offset < monday + 0.5:
        time.sleep(0.1)
    month_resets = time.gmtime(monday).tm_mday == 1
    for p, key in keys.items():
        status, h, _ = chat(stack, key, 1, COSTLY)
        assert status == (200 if p != "month" or month_resets else 402), (p, status)
        if status == 200:
            assert stack.row(h["x-request-id"])["cost_micros"] == COST


@pytest.fixture
def fake_monday_cluster(tmp_path):
    """Two nodes whose clocks read CLUSTER_LEAD_S before the next Monday 00:00 UTC."""
    with fake_cluster(tmp_path, next_monday, CLUSTER_LEAD_S) as c:
        yield c


def test_a_shared_weekly_budget_resets_at_the_boundary_on_every_node(fake_monday_cluster):
    """A weekly budget spent through two nodes refuses on both until Monday 00:00 on
    their clocks, and from then admits on both (the new period's lease, a round away)."""
    nodes, monday, offset = fake_monday_cluster
    key = nodes[0].create_key("weekly", "--default-model", "mock-gpt", "--budget-usd", "0.3",
                              "--budget-period", "week")
    time.sleep(RELOAD_S)
    shared_budget_crosses(nodes, key, monday, offset, "budget_exceeded")
