"""Teams above keys through the real HAProxy and agent (docs/limits.md, "Teams"): a
request passes only if its key and its key's team admit it; a team's budget, rates,
slots and allow-list hold across its keys, refused with the team named in the error and
in the row's verdict; a team's refusal costs the key nothing; rows record the team they
were made under, which stays theirs when the key moves; a team's budget survives an
agent restart; and across nodes on PostgreSQL a team's budget stops at the budget."""
import concurrent.futures
import json
import signal
import time

from stack import BOTH_STORES, store  # noqa: F401 (a fixture)
from test_accounting import metrics
from test_limits import chat, error_code, stack  # noqa: F401 (a fixture)
from test_shared_limits import cluster  # noqa: F401 (a fixture)

RELOAD_S = 0.6        # the agent reloads keys and teams within 250 ms
COSTLY = {"x-mock-prompt-tokens": "200000", "x-mock-completion-tokens": "1"}
COST = 200002         # micro-dollars: 200 000 prompt tokens at $1/Mtok, 1 at $2/Mtok


def team(stack, name, *limits):
    stack.tallyctl("team", "create", name, *limits)
    return stack.scalar("SELECT id FROM teams WHERE name = ?", (name,))


def member(stack, name, team_name, *limits):
    key = stack.create_key(name, "--default-model", "mock-gpt", "--team", team_name, *limits)
    time.sleep(RELOAD_S)
    return key


def message(body):
    return json.loads(body)["error"]["message"]


def team_gauges(stack):
    """The agent's tally_team_* series and their values."""
    return {k: v for k, v in metrics(stack).items() if k.startswith("tally_team_")}


@BOTH_STORES
def test_a_team_budget_is_spent_by_all_its_keys_and_survives_a_restart(stack):
    """$0.50 a month for the team, none for its keys: each request costs $0.20 and
    reserves far less, so the third is admitted on what the team spent ($0.40) and the
    fourth, from either key, is refused at the team; a key outside it is not."""
    atlas = team(stack, "atlas", "--budget-usd", "0.5", "--budget-period", "month")
    a = member(stack, "a", "atlas")
    b = member(stack, "b", "atlas")
    outsider = stack.create_key("outsider", "--default-model", "mock-gpt")
    time.sleep(RELOAD_S)
    got = []
    for key in (a, b, a, b):
        status, h, body = chat(stack, key, 1, COSTLY)
        got.append(status)
        if status == 200:
            stack.row(h["x-request-id"])
    assert got == [200, 200, 200, 402]
    assert error_code(body) == "team_budget_exceeded"
    assert "The team 'atlas' of key" in message(body) and "$0.500000 for this month" in message(body)
    assert 0 < int(h["retry-after"]) <= 31 * 86400
    refused = stack.row(h["x-request-id"])
    assert refused["verdict"] == "team_budget_exceeded" and refused["outcome"] == "denied"
    assert refused["team_id"] == atlas
    assert all(r["team_id"] == atlas for r in stack.rows("key_id IS NOT NULL"))
    assert chat(stack, outsider, 1, COSTLY)[0] == 200
    assert stack.scalar("SELECT sum(cost_micros) FROM team_hourly WHERE team_id = ?",
                        (atlas,)) == 3 * COST
    # Prometheus has the team's spend and what is left, from the rollups (read every 5 s).
    spent = 'tally_team_spent_micros{team="atlas",period="month"}'
    deadline = time.time() + 8
    while team_gauges(stack).get(spent) != 3 * COST:
        assert time.time() < deadline, team_gauges(stack)
        time.sleep(0.5)
    assert team_gauges(stack)['tally_team_budget_left_micros{team="atlas",period="month"}'] \
        == 500000 - 3 * COST
    # The team's spend is read again from its rollups at start.
    stack.kill_agent(signal.SIGTERM)
    stack.start_agent()
    stack.wait_agent_state("UP")
    assert chat(stack, a, 1, COSTLY)[0] == 402
    # Moved to another team, a key spends under that one's limits; what it spent under
    # atlas stays atlas's.
    other = team(stack, "other")
    stack.tallyctl("key", "set", "a", "--team", "other")
    time.sleep(RELOAD_S)
    status, h, _ = chat(stack, a, 1, COSTLY)
    assert status == 200 and stack.row(h["x-request-id"])["team_id"] == other
    assert chat(stack, b, 1, COSTLY)[0] == 402
    assert stack.scalar("SELECT sum(cost_micros) FROM team_hourly WHERE team_id = ?",
                        (atlas,)) == 3 * COST
    # Raised while running: admitted again at once.
    stack.tallyctl("team", "set", "atlas", "--budget-usd", "5")
    time.sleep(RELOAD_S)
    assert chat(stack, b, 1, COSTLY)[0] == 200


def test_a_team_refusal_costs_the_key_nothing(stack):
    """Key a may make 5 requests a minute, its team 3: the team refuses the fourth,
    and once the team's limit is lifted a still has the 3 it did not use."""
    team(stack, "t", "--rpm", "3")
    a = member(stack, "a", "t", "--rpm", "5")
    b = member(stack, "b", "t")
    assert [chat(stack, k)[0] for k in (a, a, b)] == [200, 200, 200]
    status, h, body = chat(stack, a)
    assert status == 429 and error_code(body) == "team_rate_limit_requests"
    assert "The team 't' of key" in message(body) and "3 requests per minute" in message(body)
    assert 1 <= int(h["retry-after"]) <= 20
    assert stack.row(h["x-request-id"])["verdict"] == "team_rate_limit_requests"
    stack.tallyctl("team", "set", "t", "--rpm", "none")
    time.sleep(RELOAD_S)
    got = [chat(stack, a) for _ in range(4)]
    assert [s for s, _, _ in got] == [200, 200, 200, 429]
    assert error_code(got[-1][2]) == "rate_limit_requests"


def test_a_team_holds_its_slots_across_its_keys(stack):
    team(stack, "t", "--max-concurrent", "2")
    keys = [member(stack, name, "t") for name in ("a", "b", "c")]
    slow = {"x-mock-frames": "20", "x-mock-frame-delay-ms": "40"}
    with concurrent.futures.ThreadPoolExecutor(9) as ex:
        results = list(ex.map(lambda i: chat(stack, keys[i % 3], headers=slow, stream=True),
                              range(9)))
    statuses = sorted(r[0] for r in results)
    assert statuses.count(200) == 2 and statuses.count(429) == 7
    assert all(error_code(b) == "team_concurrency_limit" for s, _, b in results if s == 429)
    # The slots come back when the records arrive, at the team as at the keys.
    deadline = time.time() + 5
    while chat(stack, keys[0])[0] != 200:
        assert time.time() < deadline
        time.sleep(0.1)


def test_a_team_allow_list_narrows_its_keys(stack):
    stack.tallyctl("model", "set", "mock-gpt-2", "--provider", "mock-openai")
    stack.tallyctl("team", "create", "t", "--models", "mock-gpt")
    a = member(stack, "a", "t")
    b = stack.create_key("b", "--team", "t", "--models", "mock-gpt-2")
    time.sleep(RELOAD_S)
    assert stack.gateway("POST", "/v1/chat/completions", {"model": "mock-gpt", "messages": []},
                         key=a)[0] == 200
    status, _, body = stack.gateway("POST", "/v1/chat/completions",
                                    {"model": "mock-gpt-2", "messages": []}, key=a)
    assert status == 403 and error_code(body) == "team_model_not_allowed"
    # b allows mock-gpt-2 and its team does not: refused at the team; mock-gpt at the key.
    status, _, body = stack.gateway("POST", "/v1/chat/completions",
                                    {"model": "mock-gpt-2", "messages": []}, key=b)
    assert status == 403 and error_code(body) == "team_model_not_allowed"
    status, _, body = stack.gateway("POST", "/v1/chat/completions",
                                    {"model": "mock-gpt", "messages": []}, key=b)
    assert status == 403 and error_code(body) == "model_not_allowed"
    # The model list a key sees is what both allow.
    status, _, body = stack.gateway("GET", "/v1/models", key=a)
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["mock-gpt"]


def test_a_team_budget_holds_across_nodes(cluster):
    """A team of three keys, each driven through its own node at once: the team's $1.00
    a day stops at the budget plus the estimate errors the nodes had not reported yet
    (docs/limits.md, "Shared limits": a request in flight per node here)."""
    n0 = cluster[0]
    team(n0, "t", "--budget-usd", "1", "--budget-period", "day")
    keys = [n0.create_key(f"k{i}", "--default-model", "mock-gpt", "--team", "t")
            for i in range(3)]
    time.sleep(RELOAD_S)

    def drive(i):
        got = []
        for _ in range(6):
            status, h, body = chat(cluster[i], keys[i], 1, COSTLY)
            got.append(status)
            if status == 200:
                cluster[i].row(h["x-request-id"])
            else:
                assert status == 402 and error_code(body) == "team_budget_exceeded", body
        return got

    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        got = list(ex.map(drive, range(3)))
    spent = sum(r["cost_micros"] for r in n0.rows("cost_micros IS NOT NULL"))
    admitted = sum(g.count(200) for g in got)
    assert spent == admitted * COST
    assert 1000000 <= spent <= 1000000 + 3 * COST, got
    assert all(g[-1] == 402 for g in got)


def test_tally_stress_with_a_team_in_the_mix_stays_exact(stack):
    """tally-stress at 4 connections on a key whose team admits 12 requests in flight
    and 30 a minute: refused requests are 429s, every admitted one is exactly one row,
    and received = written."""
    from test_stress import stress
    team(stack, "t", "--rpm", "30", "--max-concurrent", "12")
    key = member(stack, "stress", "t")
    r, levels = stress(stack, "--key", key, "--refused-status", "429",
                       "--refused-pause-ms", "20", levels="4", requests=60)
    assert r.returncode == 0, r.stderr + r.stdout + stack.logs()
    (lv,) = levels
    assert lv["errors"]["total"] == 0, lv
    assert lv["ok"] + lv["refused"] == 60 and 30 <= lv["ok"] <= 33, lv
    acct = lv["accounting"]
    assert acct["exact"] and acct["rows"] == lv["ok"], acct
    assert acct["received"] == acct["written"] and acct["dropped_total"] == 0
    assert all(r["team_id"] is not None for r in stack.rows("key_id IS NOT NULL"))


@BOTH_STORES
def test_a_deleted_team_id_is_never_given_again(stack):
    """Rows and rollups keep a deleted team's id, and its limits are counted under it:
    a new team must not inherit them (SQLite reused the highest id before AUTOINCREMENT)."""
    team(stack, "a")
    b = team(stack, "b")
    stack.tallyctl("team", "delete", "b")
    assert team(stack, "c") > b
