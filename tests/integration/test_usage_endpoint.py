"""GET /tally/v1/usage through the real HAProxy and agent (docs/api.md, "A key's own
usage"): a key reads its spend this period, its budget left and its windows, answered
by the gateway without a provider, as a row that bills nothing and takes nothing from
the key's limits; its team's figures only where the team shows them to its keys; never
another key's data, however a key holder asks; and across nodes on PostgreSQL, what
every node's rows spent."""
import json
import time

from stack import BOTH_STORES, store  # noqa: F401 (a fixture)
from test_limits import chat, error_code, stack  # noqa: F401 (a fixture)
from test_shared_limits import cluster  # noqa: F401 (a fixture)
from test_teams import COST, COSTLY, RELOAD_S, member, team

USAGE = "/tally/v1/usage"


def ask(stack, path, key=None, **kw):
    """The gateway's answer as a client takes it: a 503 usage_unavailable says when to ask
    again (each I/O thread has 50 ms a second of store reads, connects included, which a
    loaded machine's PostgreSQL connect can spend: spoa/probe.h)."""
    for _ in range(10):
        status, h, body = stack.gateway("GET", path, key=key, **kw)
        if status != 503 or json.loads(body)["error"]["code"] != "usage_unavailable":
            break
        time.sleep(int(h["retry-after"]))
    return status, h, body


def usage(stack, key, **kw):
    status, h, body = ask(stack, USAGE, key, **kw)
    assert status == 200, (status, body)
    assert h["content-type"] == "application/json"
    return json.loads(body), h


def usage_when(stack, key, check, seconds=5):
    """The usage once check(answer) holds: spend comes from the rollups, which lag the
    rows the writers still hold, and an answer is kept for a second."""
    deadline = time.time() + seconds
    while True:
        got, _ = usage(stack, key)
        if check(got):
            return got
        assert time.time() < deadline, got
        time.sleep(0.2)


@BOTH_STORES
def test_a_key_reads_its_spend_budget_and_windows(stack):
    atlas = team(stack, "atlas", "--budget-usd", "5")
    key = member(stack, "svc", "atlas", "--budget-usd", "0.5", "--rpm", "10",
                 "--max-concurrent", "3")
    prefix = stack.scalar("SELECT prefix FROM keys WHERE name = 'svc'")
    for _ in range(2):
        status, h, _ = chat(stack, key, 1, COSTLY)
        assert status == 200
        stack.row(h["x-request-id"])
    before = len(stack.mock_requests())
    got = usage_when(stack, key, lambda u: u["key"]["spent_micros"] == 2 * COST)
    k = got["key"]
    assert got["object"] == "usage"
    assert k["prefix"] == prefix and k["name"] == "svc"
    assert k["period"]["kind"] == "month"
    assert k["period"]["start"].endswith("-01T00:00:00Z") and k["period"]["end"] > k["period"]["start"]
    assert k["budget_micros"] == 500000 and k["budget_left_micros"] == 500000 - 2 * COST
    assert k["requests_per_minute"]["limit"] == 10
    # One node counts the window; on several each holds a lease of it, and what the
    # cluster has left is no node's to say.
    shared = stack.store == "postgres"
    assert (k["requests_per_minute"]["remaining"] is None) if shared else \
        (7 <= k["requests_per_minute"]["remaining"] <= 8)
    assert k["tokens_per_minute"] is None
    assert k["concurrency"] == {"limit": 3, "in_flight": 0}
    # The team is named; its figures are not shown unless it says so.
    assert got["team"] == {"name": "atlas", "shown": False}
    # No provider saw it; it took no request from the key's window, and its row bills
    # nothing.
    assert len(stack.mock_requests()) == before
    got, h = usage(stack, key)
    assert shared or got["key"]["requests_per_minute"]["remaining"] >= 7
    row = stack.row(h["x-request-id"])
    assert row["verdict"] == "usage_reported" and row["outcome"] == "complete"
    assert row["status"] == 200 and not row["cost_micros"] and row["model"] is None
    assert row["key_id"] == stack.scalar("SELECT id FROM keys WHERE name = 'svc'")
    assert row["team_id"] == atlas
    # x-api-key as Anthropic's clients send it.
    got, _ = usage(stack, None, headers={"x-api-key": key, "anthropic-version": "2023-06-01"})
    assert got["key"]["prefix"] == prefix


@BOTH_STORES
def test_a_key_never_reads_another_keys_usage(stack):
    """What a hostile key holder tries: a query or a header naming the other key, paths
    beside the endpoint, other methods, no key, a revoked one, another key's prefix."""
    a = stack.create_key("a", "--default-model", "mock-gpt", "--budget-usd", "1")
    b = stack.create_key("b", "--default-model", "mock-gpt")
    time.sleep(RELOAD_S)
    a_prefix = stack.scalar("SELECT prefix FROM keys WHERE name = 'a'")
    a_id = stack.scalar("SELECT id FROM keys WHERE name = 'a'")
    assert chat(stack, a, 1, COSTLY)[0] == 200
    usage_when(stack, a, lambda u: u["key"]["spent_micros"] == COST)
    for path in (f"{USAGE}?key={a_prefix}", f"{USAGE}?key_id={a_id}", f"{USAGE}?key=a"):
        status, _, body = ask(stack, path, b)
        got = json.loads(body)
        assert status == 200 and got["key"]["name"] == "b" and got["key"]["spent_micros"] == 0
    got, _ = usage(stack, b, headers={"x-tally-key": a, "x-api-key": a})
    assert got["key"]["name"] == "b"
    for method, path in (("POST", USAGE), ("DELETE", USAGE), ("GET", USAGE + "/"),
                         ("GET", USAGE + "/" + a_prefix), ("GET", "/tally/v1/keys"),
                         ("GET", "/tally/v1/usage/../usage")):
        status, _, body = stack.gateway(method, path, key=b)
        assert status == 404 and error_code(body) == "unsupported_endpoint", (method, path, body)
    status, _, body = stack.gateway("GET", USAGE)
    assert status == 401 and error_code(body) == "missing_api_key"
    status, _, body = stack.gateway("GET", USAGE, key=a_prefix)
    assert status == 401
    stack.tallyctl("key", "revoke", "a")
    time.sleep(RELOAD_S)
    status, _, body = ask(stack, USAGE, a)
    assert status == 401 and error_code(body) == "revoked_api_key"


def test_a_team_shows_its_figures_only_when_it_says_so(stack):
    team(stack, "t", "--budget-usd", "2", "--rpm", "50")
    a = member(stack, "a", "t")
    b = member(stack, "b", "t")
    assert chat(stack, a, 1, COSTLY)[0] == 200
    assert chat(stack, b, 1, COSTLY)[0] == 200
    assert usage(stack, a)[0]["team"] == {"name": "t", "shown": False}
    stack.tallyctl("team", "set", "t", "--members-see-usage", "yes")
    time.sleep(RELOAD_S)
    got = usage_when(stack, a, lambda u: u["team"].get("spent_micros") == 2 * COST)
    assert got["team"]["shown"] is True and got["team"]["budget_left_micros"] == 2000000 - 2 * COST
    assert got["team"]["requests_per_minute"]["limit"] == 50
    # The key's own figures stay its own.
    assert got["key"]["spent_micros"] == COST and got["key"]["budget_micros"] is None


def test_usage_on_one_node_counts_every_nodes_rows(cluster):
    n0, n1 = cluster[0], cluster[1]
    key = n0.create_key("k", "--default-model", "mock-gpt", "--budget-usd", "1",
                        "--budget-period", "day")
    time.sleep(RELOAD_S)
    for node in (n0, n1, cluster[2]):
        status, h, _ = chat(node, key, 1, COSTLY)
        assert status == 200
        node.row(h["x-request-id"])
    got = usage_when(n1, key, lambda u: u["key"]["spent_micros"] == 3 * COST)
    assert got["key"]["period"]["kind"] == "day"
    assert got["key"]["budget_left_micros"] == 1000000 - 3 * COST


def test_a_store_that_cannot_be_read_is_a_503_not_a_guess(cluster, pg_server):
    """PostgreSQL stopped: the usage is a 503 usage_unavailable with Retry-After (a
    figure kept from the last second would do, not an older one), its row written once
    the store is back; then figures again."""
    n0 = cluster[0]
    key = n0.create_key("k", "--default-model", "mock-gpt", "--budget-usd", "1")
    time.sleep(RELOAD_S)
    assert usage(n0, key)[0]["key"]["spent_micros"] == 0
    pg_server.stop()
    try:
        time.sleep(1.1)                        # the kept figure is too old now
        status, h, body = n0.gateway("GET", USAGE, key=key)
        assert status == 503 and error_code(body) == "usage_unavailable", body
        assert h["retry-after"] == "1"
        refused = h["x-request-id"]
    finally:
        pg_server.start()
    assert n0.row(refused, timeout=30)["verdict"] == "usage_unavailable"
    # The thread's connection is opened again after 5 s; an I/O thread that has not
    # read the store since the outage opens one when asked.
    deadline = time.time() + 15
    while n0.gateway("GET", USAGE, key=key)[0] != 200:
        assert time.time() < deadline
        time.sleep(0.5)
