"""Budgets per model through the real HAProxy and agent (docs/limits.md, "Budgets per
model"): a key or a team may cap what it spends on one model per period, beside its
budget for every model (tallyctl modelbudget). A request routed to that model passes
only if the budget admits it too, refused with 402 naming the model and the level; the
spend counts the rows of the model and of the dated snapshots the provider answered
with, survives an agent restart, and across nodes on PostgreSQL stops at the budget."""
import concurrent.futures
import json
import signal
import time

from stack import BOTH_STORES, store  # noqa: F401 (a fixture)
from test_limits import error_code, retried, stack  # noqa: F401 (a fixture)
from test_shared_limits import cluster  # noqa: F401 (a fixture)
from test_teams import COST, COSTLY, RELOAD_S, message, team
from test_usage_endpoint import usage_when

CHAT = "/v1/chat/completions"


def other_model(stack):
    """mock-gpt-2: the same provider and prices as mock-gpt, another budget."""
    stack.tallyctl("model", "set", "mock-gpt-2", "--provider", "mock-openai",
                   "--input-micros", "1000000", "--output-micros", "2000000")


def ask(stack, key, model="mock-gpt", headers=None):
    body = {"model": model, "messages": [], "max_tokens": 1}
    status, h, text = retried(lambda: stack.gateway("POST", CHAT, body, key=key,
                                                    headers={**COSTLY, **(headers or {})}))
    row = stack.row(h["x-request-id"])
    return status, h, text, row


def statuses(stack, key, n, model="mock-gpt"):
    return [ask(stack, key, model)[0] for _ in range(n)]


@BOTH_STORES
def test_a_keys_budget_for_a_model_refuses_that_model_alone_and_survives_a_restart(stack):
    """$0.50 a month on mock-gpt for the key, whose requests cost $0.20 each: spent
    before the budget was set (one answered as a dated snapshot) counts, the crossing
    request is refused with the model named, mock-gpt-2 still passes, and after a
    restart the spend is read again from the rollups."""
    other_model(stack)
    key = stack.create_key("k", "--default-model", "mock-gpt")
    time.sleep(RELOAD_S)
    status, _, _, row = ask(stack, key, headers={"x-mock-model": "mock-gpt-2026-01-02"})
    assert status == 200 and row["model"] == "mock-gpt-2026-01-02", row
    assert row["cost_micros"] == COST
    stack.tallyctl("modelbudget", "set", "mock-gpt", "--key", "k", "--budget-usd", "0.5")
    time.sleep(RELOAD_S)
    assert statuses(stack, key, 2) == [200, 200]                 # 0.4, then 0.6
    status, h, body, row = ask(stack, key)
    assert status == 402 and error_code(body) == "model_budget_exceeded", body
    assert "for the model 'mock-gpt', has spent its budget of $0.500000 for this month" \
        in message(body), body
    assert 0 < int(h["retry-after"]) <= 31 * 86400
    assert row["verdict"] == "model_budget_exceeded" and row["outcome"] == "denied"
    # Another model of the key has no budget; another key's mock-gpt is its own.
    assert statuses(stack, key, 2, "mock-gpt-2") == [200, 200]
    assert statuses(stack, stack.key, 1) == [200]
    stack.kill_agent(signal.SIGTERM)
    stack.start_agent()
    stack.wait_agent_state("UP")
    assert statuses(stack, key, 1) == [402]
    assert statuses(stack, key, 1, "mock-gpt-2") == [200]
    # Raised, it admits again at the next reload; deleted, the model is free.
    stack.tallyctl("modelbudget", "set", "mock-gpt", "--key", "k", "--budget-usd", "0.9")
    time.sleep(RELOAD_S)
    assert statuses(stack, key, 3) == [200, 200, 402]
    stack.tallyctl("modelbudget", "delete", "mock-gpt", "--key", "k")
    time.sleep(RELOAD_S)
    assert statuses(stack, key, 1) == [200]


@BOTH_STORES
def test_a_teams_budget_for_a_model_is_spent_by_all_its_keys(stack):
    """$0.50 a day on mock-gpt for the team: its two keys spend it together; the team
    is named in the refusal; mock-gpt-2 and a key outside the team pass; a refusal at
    the team's model budget holds nothing at the key (its rpm of 3 is not spent)."""
    other_model(stack)
    team(stack, "t")
    a = stack.create_key("a", "--default-model", "mock-gpt", "--team", "t", "--rpm", "3")
    b = stack.create_key("b", "--default-model", "mock-gpt", "--team", "t")
    out = stack.create_key("out", "--default-model", "mock-gpt")
    stack.tallyctl("modelbudget", "set", "mock-gpt", "--team", "t", "--budget-usd", "0.5",
                   "--budget-period", "day")
    time.sleep(RELOAD_S)
    assert [ask(stack, k)[0] for k in (a, b, a)] == [200, 200, 200]
    status, _, body, row = ask(stack, b)
    assert status == 402 and error_code(body) == "team_model_budget_exceeded", body
    assert "The team 't' of key" in message(body)
    assert "for the model 'mock-gpt', has spent its budget of $0.500000 for this day" \
        in message(body), body
    assert row["verdict"] == "team_model_budget_exceeded" and row["team_id"] is not None
    assert ask(stack, a)[0] == 402                                # not one of a's 3
    assert ask(stack, a, "mock-gpt-2")[0] == 200                  # a's 3rd
    status, _, body, _ = ask(stack, a, "mock-gpt-2")
    assert status == 429 and error_code(body) == "rate_limit_requests", body
    assert statuses(stack, out, 2) == [200, 200]


def test_a_teams_budget_for_a_model_holds_across_nodes(cluster):
    """Three keys of one team driven through three nodes at once: the team's $1.00 a
    day on mock-gpt stops at the budget plus the requests the nodes had in flight
    (docs/limits.md, "Shared limits"); the pool is seeded from what the team spent on
    the model before the budget was set."""
    n0 = cluster[0]
    team(n0, "t")
    keys = [n0.create_key(f"k{i}", "--default-model", "mock-gpt", "--team", "t")
            for i in range(3)]
    time.sleep(RELOAD_S)
    assert ask(n0, keys[0])[0] == 200                    # spent before the budget
    n0.tallyctl("modelbudget", "set", "mock-gpt", "--team", "t", "--budget-usd", "1",
                "--budget-period", "day")
    time.sleep(RELOAD_S)

    def drive(i):
        got = []
        for _ in range(6):
            status, _, body, _ = ask(cluster[i], keys[i])
            got.append(status)
            if status != 200:
                assert status == 402 and error_code(body) == "team_model_budget_exceeded", body
        return got

    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        got = list(ex.map(drive, range(3)))
    spent = sum(r["cost_micros"] for r in n0.rows("cost_micros IS NOT NULL"))
    assert 1000000 <= spent <= 1000000 + 3 * COST, got
    assert all(g[-1] == 402 for g in got)


def test_a_key_reads_its_budgets_per_model_and_its_teams(stack):
    """GET /tally/v1/usage lists the key's budgets per model with their spend and
    period, and its team's when the team shows its figures; a key of another team sees
    none of them."""
    other_model(stack)
    team(stack, "t")
    stack.tallyctl("team", "set", "t", "--members-see-usage", "yes")
    team(stack, "u")
    key = stack.create_key("k", "--default-model", "mock-gpt", "--team", "t")
    stranger = stack.create_key("s", "--default-model", "mock-gpt", "--team", "u")
    stack.tallyctl("modelbudget", "set", "mock-gpt-2", "--key", "k", "--budget-usd", "1",
                   "--budget-period", "week")
    stack.tallyctl("modelbudget", "set", "mock-gpt", "--key", "k", "--budget-usd", "0.5",
                   "--budget-period", "total")
    stack.tallyctl("modelbudget", "set", "mock-gpt", "--team", "t", "--budget-usd", "2")
    time.sleep(RELOAD_S)
    assert ask(stack, key)[0] == 200
    assert ask(stack, key, "mock-gpt-2")[0] == 200
    assert ask(stack, stranger)[0] == 200
    got = usage_when(stack, key, lambda u: u["key"]["model_budgets"][0]["spent_micros"] == COST)
    gpt, gpt2 = got["key"]["model_budgets"]
    assert gpt["model"] == "mock-gpt" and gpt["budget_micros"] == 500000
    assert gpt["period"] == {"kind": "total", "time_zone": "UTC", "start": None, "end": None}
    assert gpt["budget_left_micros"] == 500000 - COST
    assert gpt2["model"] == "mock-gpt-2" and gpt2["period"]["kind"] == "week"
    assert gpt2["spent_micros"] == COST and gpt2["budget_left_micros"] == 1000000 - COST
    team_budget, = got["team"]["model_budgets"]
    assert team_budget["model"] == "mock-gpt" and team_budget["period"]["kind"] == "month"
    assert team_budget["spent_micros"] == COST and team_budget["budget_micros"] == 2000000
    theirs = usage_when(stack, stranger, lambda u: u["key"]["spent_micros"] == COST)
    assert theirs["key"]["model_budgets"] == [] and theirs["team"] == {"name": "u", "shown": False}


def test_a_model_past_the_cut_is_the_route_or_refused(stack):
    """A body longer than the agent sees (1.2 MB: past what 3.4's agent reads whole),
    whose "model" comes after the cut, is held at the budgets of the model it was routed
    to (the key's default): naming another model there is refused, whatever the key may
    use, so that a spent budget cannot be reached by naming its model late."""
    other_model(stack)
    key = stack.create_key("k", "--default-model", "mock-gpt-2")
    stack.tallyctl("modelbudget", "set", "mock-gpt", "--key", "k", "--budget-usd", "0.1")
    time.sleep(RELOAD_S)
    assert ask(stack, key)[0] == 200
    assert ask(stack, key)[0] == 402                      # the budget is spent

    def long_body(model):
        return json.dumps({"messages": [{"role": "user", "content": "x" * 1200000}],
                           "max_tokens": 1, "model": model}).encode()

    status, h, body = stack.gateway("POST", CHAT, long_body("mock-gpt"), key=key,
                                    headers=COSTLY)
    assert status == 403 and error_code(body) == "model_not_allowed", body[:300]
    row = stack.row(h["x-request-id"])
    assert (row["verdict"], row["outcome"]) == ("model_not_allowed", "denied"), row
    status, h, body = stack.gateway("POST", CHAT, long_body("mock-gpt-2"), key=key,
                                    headers=COSTLY)
    assert status == 200, body[:300]
    row = stack.row(h["x-request-id"])
    assert (row["model"], row["cost_micros"]) == ("mock-gpt-2", COST), row
    # Without a default model there is no route to hold it at: too large to judge.
    bare = stack.create_key("bare")
    stack.tallyctl("modelbudget", "set", "mock-gpt", "--key", "bare", "--budget-usd", "1")
    time.sleep(RELOAD_S)
    status, _, body = stack.gateway("POST", CHAT, long_body("mock-gpt-2"), key=bare)
    assert status == 413 and error_code(body) == "body_too_large", body[:300]


def test_tally_stress_with_a_budget_per_model_stays_exact(stack):
    """tally-stress at 4 connections on a key whose budget for mock-gpt runs out midway:
    refusals are the budget's 402s, every admitted request is exactly one row,
    received = written, and the spend passes the budget by at most the 4 requests in
    flight when it ran out (a request is refused once what was spent and its estimate,
    larger than what it uses, pass the budget: the spend may stop below it)."""
    from test_stress import stress
    key = stack.create_key("stress", "--default-model", "mock-gpt")
    stack.tallyctl("modelbudget", "set", "mock-gpt", "--key", "stress", "--budget-usd",
                   "0.002")
    time.sleep(RELOAD_S)
    r, levels = stress(stack, "--key", key, "--refused-status", "402",
                       "--refused-pause-ms", "20", levels="4", requests=60)
    assert r.returncode == 0, r.stderr + r.stdout + stack.logs()
    (lv,) = levels
    assert lv["errors"]["total"] == 0, lv
    assert lv["ok"] > 0 and lv["refused"] > 0 and lv["ok"] + lv["refused"] == 60, lv
    acct = lv["accounting"]
    assert acct["exact"] and acct["rows"] == lv["ok"], acct
    assert acct["received"] == acct["written"] and acct["dropped_total"] == 0
    refused = stack.rows("status = 402")
    assert len(refused) == lv["refused"]
    assert {r["verdict"] for r in refused} == {"model_budget_exceeded"}
    costs = [r["cost_micros"] for r in stack.rows("status = 200")]
    assert sum(costs) <= 2000 + 4 * max(costs), (sum(costs), max(costs))
