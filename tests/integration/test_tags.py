"""Tags through the real HAProxy and agent (docs/limits.md, "Tags"): a request carries
tags in its X-Tally-Tags header, its key and its key's team may fix tags it cannot
change; the row keeps them in canonical order, the day's sums per tag and key count the
row once per tag, and the header never reaches a provider. Malformed tags are refused
with a 400 the row keeps. A tag's budget holds across every key carrying the tag, on
one node and across nodes, and only keys that fix a budgeted tag may carry it."""
import concurrent.futures
import http.client
import json
import signal
import sqlite3
import time

from stack import BOTH_STORES, Stack, store  # noqa: F401 (a fixture)
from test_end_users import chat, sent_headers, key_id
from test_limits import error_code, stack  # noqa: F401 (a fixture)
from test_shared_limits import cluster  # noqa: F401 (a fixture)
from test_teams import COST, COSTLY

RELOAD_S = 0.6   # the agent reloads keys within its reload interval (250 ms)


def write(stack, sql, args=()):
    """An operator's change to the store ("?" parameters); the agent reloads it."""
    if stack.store == "postgres":
        stack.pg.query(stack.db, sql.replace("?", "%s"), tuple(args))
        return
    con = sqlite3.connect(stack.db, timeout=10)
    try:
        with con:
            con.execute(sql, args)
    finally:
        con.close()


def tag_daily(stack, kid):
    sql = "SELECT tag, requests, cost_micros FROM tag_daily WHERE key_id = ?"
    if stack.store == "postgres":
        return {r["tag"]: (r["requests"], r["cost_micros"]) for r in stack.pg_rows(sql, (kid,))}
    con = sqlite3.connect(f"file:{stack.db}?mode=ro", uri=True, timeout=10)
    try:
        return {t: (n, c) for t, n, c in con.execute(sql, (kid,))}
    finally:
        con.close()


@BOTH_STORES
def test_tags_are_the_rows_and_the_days_never_the_providers(stack):
    key = stack.create_key("tagged", "--default-model", "mock-gpt")
    time.sleep(RELOAD_S)
    status, h, _ = chat(stack, key, headers={"X-Tally-Tags": " feature=search ,env=prod"})
    assert status == 200
    assert stack.row(h["x-request-id"])["tags"] == "env=prod,feature=search"
    assert "x-tally-tags" not in sent_headers(stack)
    status, h, _ = chat(stack, key, headers={"X-Tally-Tags": "env=prod"}, stream=True)
    assert status == 200
    streamed = stack.row(h["x-request-id"])
    assert streamed["tags"] == "env=prod" and streamed["completion_tokens"] > 0
    status, h, _ = chat(stack, key)
    assert status == 200 and stack.row(h["x-request-id"])["tags"] is None
    # Tags in the body are the client's content, not the gateway's.
    status, h, _ = chat(stack, key, metadata={"tags": "env=dev"})
    assert status == 200 and stack.row(h["x-request-id"])["tags"] is None
    kid = key_id(stack, "tagged")
    want = {}
    for r in stack.rows("key_id = ? AND tags IS NOT NULL", (kid,)):
        for tag in r["tags"].split(","):
            n, c = want.get(tag, (0, 0))
            want[tag] = (n + 1, c + (r["cost_micros"] or 0))
    assert want["env=prod"][0] == 2 and want["feature=search"][0] == 1
    assert tag_daily(stack, kid) == want


def test_malformed_tags_are_refused_and_kept(stack):
    key = stack.create_key("bad", "--default-model", "mock-gpt")
    time.sleep(RELOAD_S)
    before = len(stack.mock_requests())
    for tags in ("env=prod,", "Env=prod", "env=prod,env=dev", "env=pr od", "env",
                 ",".join(f"t{i}=v" for i in range(9)), "e=" + "v" * 65,
                 "env=prod," + " " * 1100 + "a=b"):
        status, h, body = chat(stack, key, headers={"X-Tally-Tags": tags})
        assert status == 400 and error_code(body) == "invalid_tags", (tags, body)
        assert "X-Tally-Tags" in json.loads(body)["error"]["message"]
        row = stack.row(h["x-request-id"])
        assert row["verdict"] == "invalid_tags" and row["outcome"] == "denied"
        assert row["tags"] is None
    # Two headers: which one counts would be HAProxy's choice, so neither does.
    body = json.dumps({"model": "mock-gpt", "max_tokens": 8,
                       "messages": [{"role": "user", "content": "x"}]}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", stack.gw_port, timeout=30)
    try:
        conn.putrequest("POST", "/v1/chat/completions")
        for name, value in (("Authorization", f"Bearer {key}"),
                            ("Content-Type", "application/json"),
                            ("Content-Length", str(len(body))),
                            ("X-Tally-Tags", "env=prod"), ("X-Tally-Tags", "env=dev")):
            conn.putheader(name, value)
        conn.endheaders(body)
        resp = conn.getresponse()
        status, answer = resp.status, resp.read()
    finally:
        conn.close()
    assert status == 400 and error_code(answer) == "invalid_tags", answer
    assert len(stack.mock_requests()) == before


@BOTH_STORES
def test_fixed_tags_hold_for_every_request_of_the_key_and_its_team(stack):
    key = stack.create_key("fixed", "--default-model", "mock-gpt")
    write(stack, "UPDATE keys SET tags = 'env=prod,owner=search' WHERE name = 'fixed'")
    time.sleep(RELOAD_S)
    status, h, _ = chat(stack, key, headers={"X-Tally-Tags": "feature=chat"})
    assert status == 200
    assert stack.row(h["x-request-id"])["tags"] == "env=prod,feature=chat,owner=search"
    status, h, _ = chat(stack, key)
    assert stack.row(h["x-request-id"])["tags"] == "env=prod,owner=search"
    # A key holder cannot move its spend to another tag's value.
    status, h, body = chat(stack, key, headers={"X-Tally-Tags": "env=dev"})
    assert status == 400 and error_code(body) == "tag_conflict", body
    row = stack.row(h["x-request-id"])
    assert row["verdict"] == "tag_conflict" and row["tags"] is None
    # Its team's fixed tags come over the key's.
    stack.tallyctl("team", "create", "atlas")
    write(stack, "UPDATE teams SET tags = 'env=staging,project=atlas' WHERE name = 'atlas'")
    stack.tallyctl("key", "set", "fixed", "--team", "atlas")
    time.sleep(RELOAD_S)
    status, h, _ = chat(stack, key)
    assert stack.row(h["x-request-id"])["tags"] == "env=staging,owner=search,project=atlas"
    status, h, body = chat(stack, key, headers={"X-Tally-Tags": "project=zeus"})
    assert status == 400 and error_code(body) == "tag_conflict", body


def tag_budget(stack, tag, usd, period="month"):
    write(stack, "INSERT INTO tag_budgets (tag, created_at, budget_micros, budget_period)"
                 " VALUES (?, 1, ?, ?)", (tag, int(usd * 1000000), period))
    time.sleep(RELOAD_S)


@BOTH_STORES
def test_a_tag_budget_is_spent_by_every_key_carrying_the_tag(stack):
    """$0.50 a month for project=atlas, fixed on key a and on key b's team, no budget on
    the keys: each request costs $0.20 and reserves far less, so the third is admitted
    on what the tag spent ($0.40) and the fourth, from either key, is refused at the tag;
    a key outside the project cannot spend (or close) the budget by sending the tag, and
    the tag's spend is read again at start."""
    a = stack.create_key("a", "--default-model", "mock-gpt", "--tags", "project=atlas")
    stack.tallyctl("team", "create", "atlas", "--tags", "project=atlas")
    b = stack.create_key("b", "--default-model", "mock-gpt", "--team", "atlas")
    outsider = stack.create_key("outsider", "--default-model", "mock-gpt")
    tag_budget(stack, "project=atlas", 0.5)
    atlas = {"X-Tally-Tags": "project=atlas", **COSTLY}
    before = len(stack.mock_requests())
    status, h, body = chat(stack, outsider, headers=atlas)
    assert status == 403 and error_code(body) == "tag_not_allowed", body
    assert "project=atlas" in json.loads(body)["error"]["message"]
    assert stack.row(h["x-request-id"])["verdict"] == "tag_not_allowed"
    assert len(stack.mock_requests()) == before
    got = []
    for key, headers in ((a, atlas), (b, COSTLY), (a, COSTLY), (b, COSTLY)):
        status, h, body = chat(stack, key, headers=headers)
        got.append(status)
        if status == 200:
            stack.row(h["x-request-id"])
    assert got == [200, 200, 200, 402], got
    assert error_code(body) == "tag_budget_exceeded", body
    assert "The tag project=atlas has spent its budget of $0.500000 for this month" in \
        json.loads(body)["error"]["message"]
    assert 0 < int(h["retry-after"]) <= 31 * 86400
    refused = stack.row(h["x-request-id"])
    assert refused["verdict"] == "tag_budget_exceeded" and refused["outcome"] == "denied"
    assert refused["tags"] == "project=atlas"
    assert chat(stack, outsider, headers=COSTLY)[0] == 200
    assert chat(stack, outsider, headers={"X-Tally-Tags": "project=zeus", **COSTLY})[0] == 200
    assert stack.scalar("SELECT sum(cost_micros) FROM tag_daily WHERE tag = 'project=atlas'") \
        == 3 * COST
    stack.kill_agent(signal.SIGTERM)
    stack.start_agent()
    stack.wait_agent_state("UP")
    assert chat(stack, a, headers=atlas)[0] == 402
    # Raised while running: admitted again at once.
    write(stack, "UPDATE tag_budgets SET budget_micros = 5000000")
    time.sleep(RELOAD_S)
    assert chat(stack, b, headers=COSTLY)[0] == 200


def test_a_tag_refusal_costs_the_key_and_team_nothing(stack):
    """A key of 2 requests a minute fixed to a tag whose budget no request fits: the
    tag's refusals take none of the key's requests."""
    key = stack.create_key("k", "--default-model", "mock-gpt", "--rpm", "2",
                           "--tags", "env=prod")
    tag_budget(stack, "env=prod", 0.000001, "day")
    for _ in range(3):
        status, _, body = chat(stack, key)
        assert status == 402 and error_code(body) == "tag_budget_exceeded", body
    write(stack, "DELETE FROM tag_budgets")
    time.sleep(RELOAD_S)
    assert [chat(stack, key)[0] for _ in range(3)] == [200, 200, 429]


def test_a_tag_budget_holds_across_nodes(cluster):
    """Three keys carrying one tag, each driven through its own node at once: the tag's
    $1.00 a day stops at the budget plus what the nodes had not reported yet (as a
    team's does, docs/limits.md "Shared limits")."""
    n0 = cluster[0]
    keys = [n0.create_key(f"k{i}", "--default-model", "mock-gpt", "--tags", "project=atlas")
            for i in range(3)]
    tag_budget(n0, "project=atlas", 1, "day")

    def drive(i):
        got = []
        for _ in range(6):
            status, h, body = chat(cluster[i], keys[i], headers=COSTLY)
            got.append(status)
            if status == 200:
                cluster[i].row(h["x-request-id"])
            else:
                assert status == 402 and error_code(body) == "tag_budget_exceeded", body
        return got

    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        got = list(ex.map(drive, range(3)))
    spent = sum(r["cost_micros"] for r in n0.rows("cost_micros IS NOT NULL"))
    admitted = sum(g.count(200) for g in got)
    assert spent == admitted * COST
    assert 1000000 <= spent <= 1000000 + 3 * COST, got
    assert all(g[-1] == 402 for g in got)
