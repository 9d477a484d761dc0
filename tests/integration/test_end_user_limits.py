"""End users' limits through the real HAProxy and agent (docs/limits.md, "End users"): a
key or a team gives the end users its requests name a budget, rpm and tpm (a default and
overrides per end user, set with tallyctl enduser), counted per key and end user without
issuing a key; a request passes only if its key, its team and its end user all admit it,
refused with the end user named in the error and the row's verdict; an end user's spend
survives an agent restart; no key can spend or exhaust another key's end user; and
across nodes on PostgreSQL an end user's budget stops at the budget."""
import concurrent.futures
import json
import signal
import time

from stack import BOTH_STORES, store  # noqa: F401 (a fixture)
from test_limits import chat, error_code, stack  # noqa: F401 (a fixture)
from test_shared_limits import cluster  # noqa: F401 (a fixture)
from test_teams import COST, COSTLY, RELOAD_S, message, team


def ask(stack, key, user=None, headers=None):
    h = {**(headers or {})}
    if user is not None:
        h["X-Tally-User"] = user
    status, hdrs, body = chat(stack, key, 1, h)
    if status == 200:
        stack.row(hdrs["x-request-id"])
    return status, hdrs, body


def statuses(stack, key, user, n, headers=None):
    return [ask(stack, key, user, headers)[0] for _ in range(n)]


@BOTH_STORES
def test_an_end_users_budget_is_its_own_and_survives_a_restart(stack):
    """$0.50 a month for each end user of the key, none for the key: each request costs
    $0.20, so alice's fourth is refused at her budget while bob, a request naming no
    one, and alice under another key all pass."""
    key = stack.create_key("app", "--default-model", "mock-gpt")
    other = stack.create_key("other", "--default-model", "mock-gpt")
    time.sleep(RELOAD_S)
    assert statuses(stack, key, "dave", 2, COSTLY) == [200, 200]   # before any limit
    stack.tallyctl("enduser", "set", "--key", "app", "--budget-usd", "0.5")
    time.sleep(RELOAD_S)
    # A budget set while running counts what dave spent before in the period.
    assert statuses(stack, key, "dave", 2, COSTLY) == [200, 402]
    assert statuses(stack, key, "alice", 3, COSTLY) == [200, 200, 200]
    status, h, body = ask(stack, key, "alice", COSTLY)
    assert status == 402 and error_code(body) == "end_user_budget_exceeded", body
    assert "The end user 'alice' of key" in message(body)
    assert "$0.500000 for this month" in message(body)
    assert 0 < int(h["retry-after"]) <= 31 * 86400
    refused = stack.row(h["x-request-id"])
    assert refused["verdict"] == "end_user_budget_exceeded"
    assert refused["outcome"] == "denied" and refused["end_user"] == "alice"
    # A refusal at the end user costs the key nothing; bob has his own budget.
    assert ask(stack, key, "bob", COSTLY)[0] == 200
    # No end user named: no end user's limit (a key that must say whom it serves
    # requires end users, docs/limits.md).
    assert ask(stack, key, None, COSTLY)[0] == 200
    # Another key's alice is another end user: nothing of app's alice is hers, and
    # nothing she does reaches app's.
    assert statuses(stack, other, "alice", 4, COSTLY) == [200] * 4
    # The spend is read again from the rollups at start.
    stack.kill_agent(signal.SIGTERM)
    stack.start_agent()
    stack.wait_agent_state("UP")
    assert ask(stack, key, "alice", COSTLY)[0] == 402
    assert ask(stack, key, "bob", COSTLY)[0] == 200
    # Raised, the budget admits alice again at once (the next reload).
    stack.tallyctl("enduser", "set", "alice", "--key", "app", "--budget-usd", "0.7")
    time.sleep(RELOAD_S)
    assert statuses(stack, key, "alice", 2, COSTLY) == [200, 402]


def test_overrides_team_defaults_and_exemptions(stack):
    """The key's row for an end user, else its team's, else the key's default, else the
    team's; a row whose limits are none exempts; rpm and tpm refuse with 429."""
    team(stack, "t")
    stack.tallyctl("enduser", "set", "--team", "t", "--rpm", "1")
    stack.tallyctl("enduser", "set", "vip", "--team", "t", "--rpm", "3")
    key = stack.create_key("k", "--default-model", "mock-gpt", "--team", "t")
    plain = stack.create_key("plain", "--default-model", "mock-gpt", "--team", "t")
    stack.tallyctl("enduser", "set", "--key", "k", "--rpm", "2")
    stack.tallyctl("enduser", "set", "boss", "--key", "k", "--rpm", "none")
    stack.tallyctl("enduser", "set", "tok", "--key", "k", "--tpm", "100")
    time.sleep(RELOAD_S)
    # The key and its team have no rpm: the headers show the end user's.
    status, h, _ = ask(stack, key, "carol")
    assert status == 200 and h["x-ratelimit-limit-requests"] == "2", h
    assert h["x-ratelimit-remaining-requests"] == "1"
    assert statuses(stack, key, "carol", 2) == [200, 429]             # the key's default
    status, h, body = ask(stack, key, "carol")
    assert status == 429 and error_code(body) == "end_user_rate_limit_requests"
    assert "The end user 'carol' of key" in message(body)
    assert "2 requests per minute" in message(body)
    assert stack.row(h["x-request-id"])["verdict"] == "end_user_rate_limit_requests"
    assert statuses(stack, key, "vip", 4) == [200, 200, 200, 429]    # the team's own
    assert statuses(stack, key, "boss", 5) == [200] * 5              # exempt
    assert statuses(stack, plain, "carol", 2) == [200, 429]          # the team's default
    # 100 tokens a minute: the first request uses 30 (the mock's usage), and the next
    # may use more than the 70 left.
    assert chat(stack, key, 60, {"X-Tally-User": "tok"})[0] == 200
    status, _, body = chat(stack, key, 90, {"X-Tally-User": "tok"})
    assert status == 429 and error_code(body) == "end_user_rate_limit_tokens", body
    assert chat(stack, plain, 90, {"X-Tally-User": "tok"})[0] == 200
    # An end user named in the body (OpenAI's user), with quotes and non-ASCII letters,
    # is counted and named as it was sent.
    name = "J\u00f6rg \"J\""
    body = {"model": "mock-gpt", "messages": [], "max_tokens": 1, "user": name}
    got = [stack.gateway("POST", "/v1/chat/completions", body, key=key) for _ in range(3)]
    assert [g[0] for g in got] == [200, 200, 429]
    assert f"The end user '{name}' of key" in message(got[2][2])
    # Deleting the key's default falls back to the team's.
    stack.tallyctl("enduser", "delete", "--key", "k")
    time.sleep(RELOAD_S)
    assert statuses(stack, key, "erin", 2) == [200, 429]


def test_a_refusal_at_the_end_user_holds_nothing_elsewhere(stack):
    """The key's rpm of 3 is not spent by requests its end user refused: levels admit
    all or none."""
    key = stack.create_key("k", "--default-model", "mock-gpt", "--rpm", "3")
    stack.tallyctl("enduser", "set", "--key", "k", "--rpm", "1")
    time.sleep(RELOAD_S)
    assert statuses(stack, key, "a", 4) == [200, 429, 429, 429]
    assert statuses(stack, key, "b", 1) == [200]
    assert statuses(stack, key, "c", 1) == [200]
    status, _, body = ask(stack, key, "d")
    assert status == 429 and error_code(body) == "rate_limit_requests", body


@BOTH_STORES
def test_tallyctl_enduser_and_its_errors(stack):
    team(stack, "t")
    stack.create_key("k", "--default-model", "mock-gpt")
    stack.tallyctl("enduser", "set", "--key", "k", "--budget-usd", "2", "--rpm", "5")
    stack.tallyctl("enduser", "set", "al ice", "--team", "t", "--tpm", "9",
                   "--budget-period", "week")
    stack.tallyctl("enduser", "set", "al ice", "--team", "t", "--rpm", "4")
    rows = json.loads(stack.tallyctl("enduser", "list", "--json").stdout)
    assert rows == [
        {"key": "k", "team": None, "end_user": None, "rpm": 5, "tpm": None,
         "budget_micros": 2000000, "budget_period": "month", "created_at": rows[0]["created_at"]},
        {"key": None, "team": "t", "end_user": "al ice", "rpm": 4, "tpm": 9,
         "budget_micros": None, "budget_period": "week", "created_at": rows[1]["created_at"]},
    ]
    assert [r["team"] for r in json.loads(
        stack.tallyctl("enduser", "list", "--team", "t", "--json").stdout)] == ["t"]
    for args, want in (
            (("enduser", "set", "x", "--rpm", "1"), "--key KEY"),
            (("enduser", "set", "x", "--key", "k", "--team", "t", "--rpm", "1"), "one of the two"),
            (("enduser", "set", "x", "--key", "k"), "nothing to set"),
            (("enduser", "set", "a\tb", "--key", "k", "--rpm", "1"), "control characters"),
            (("enduser", "set", "u" * 257, "--key", "k", "--rpm", "1"), "1 to 256 bytes"),
            (("enduser", "set", "x", "--key", "k", "--max-concurrent", "1"), "unknown option"),
            (("enduser", "set", "x", "--key", "nosuch", "--rpm", "1"), "no key named 'nosuch'"),
            (("enduser", "set", "x", "--team", "nosuch", "--rpm", "1"), "no team named"),
            (("enduser", "set", "x", "--key", "k", "--rpm", "0"), "--rpm"),
            (("enduser", "delete", "x", "--key", "k"), "x of key k has no limits of its own"),
            # a period alone would make a row without limits, which exempts
            (("enduser", "set", "y", "--key", "k", "--budget-period", "day"),
             "y has no limits of its own yet")):
        r = stack.tallyctl(*args, check=False)
        assert r.returncode != 0 and want in r.stderr, (args, r.stderr)
    gen = stack.scalar("SELECT value FROM meta WHERE name = 'config_generation'")
    stack.tallyctl("enduser", "delete", "al ice", "--team", "t")
    assert stack.scalar("SELECT value FROM meta WHERE name = 'config_generation'") > gen
    stack.tallyctl("team", "delete", "t")
    assert len(json.loads(stack.tallyctl("enduser", "list", "--json").stdout)) == 1


def test_an_end_user_budget_holds_across_nodes(cluster):
    """One end user of one key driven through three nodes at once: its $1.00 a day stops
    at the budget plus the estimate errors of the requests the nodes had in flight
    (docs/limits.md, "Shared limits"), and the pool is seeded from what it spent
    before its limit was set."""
    n0 = cluster[0]
    key = n0.create_key("k", "--default-model", "mock-gpt")
    time.sleep(RELOAD_S)
    assert ask(n0, key, "alice", COSTLY)[0] == 200       # spent before any limit
    n0.tallyctl("enduser", "set", "--key", "k", "--budget-usd", "1", "--budget-period", "day")
    time.sleep(RELOAD_S)

    def drive(i):
        got = []
        for _ in range(6):
            status, _, body = ask(cluster[i], key, "alice", COSTLY)
            got.append(status)
            if status != 200:
                assert status == 402 and error_code(body) == "end_user_budget_exceeded", body
        return got

    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        got = list(ex.map(drive, range(3)))
    spent = sum(r["cost_micros"] for r in n0.rows("cost_micros IS NOT NULL"))
    assert 1000000 <= spent <= 1000000 + 3 * COST, got
    assert all(g[-1] == 402 for g in got)
    # bob of the same key has his own budget on every node.
    bob = [ask(cluster[i], key, "bob", COSTLY) for i in range(3)]
    assert [b[0] for b in bob] == [200, 200, 200], [b[2] for b in bob]


def test_tally_stress_with_end_users_limits_stays_exact(stack):
    """tally-stress at 4 connections, a third of its requests naming no end user and the
    rest one of 8 (header or body), on a key whose end users may make 3 requests a
    minute each: refusals are the end users' 429s, every admitted request is exactly one
    row, and received = written."""
    from test_stress import stress
    key = stack.create_key("stress", "--default-model", "mock-gpt")
    stack.tallyctl("enduser", "set", "--key", "stress", "--rpm", "3")
    time.sleep(RELOAD_S)
    r, levels = stress(stack, "--key", key, "--refused-status", "429",
                       "--refused-pause-ms", "20", levels="4", requests=60)
    assert r.returncode == 0, r.stderr + r.stdout + stack.logs()
    (lv,) = levels
    assert lv["errors"]["total"] == 0, lv
    # 20 name no one; 8 end users, 3 each and what a minute's bucket refills meanwhile
    assert lv["ok"] + lv["refused"] == 60 and 20 + 8 * 3 <= lv["ok"] <= 20 + 8 * 4, lv
    acct = lv["accounting"]
    assert acct["exact"] and acct["rows"] == lv["ok"], acct
    assert acct["received"] == acct["written"] and acct["dropped_total"] == 0
    refused = stack.rows("status = 429")
    assert len(refused) == lv["refused"]
    assert {r["verdict"] for r in refused} == {"end_user_rate_limit_requests"}
    assert all(r["end_user"] for r in refused)
