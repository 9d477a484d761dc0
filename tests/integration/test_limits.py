"""Per-key limits through the real HAProxy and agent: requests and tokens per minute,
requests in flight and spend budgets hold under concurrent clients, deny with an honest
Retry-After, change while the gateway runs, and survive an agent restart."""
import concurrent.futures
import json
import signal
import socket
import struct
import time

import pytest

from conftest import HAPROXY_VERSION, UNARY_BUFFER
from stack import BOTH_STORES, Stack, store, store_params  # noqa: F401 (a fixture)

CHAT = "/v1/chat/completions"


@pytest.fixture
def stack(tmp_path, store, request):
    # On PostgreSQL a request whose grant ran out waits for the share thread's round, up
    # to --lease-wait-ms (20) on its I/O thread, then is refused: these tests count exact
    # admissions, which a round slower than that on a loaded machine would change
    # (docs/limits.md, "Shared limits").
    s = Stack(tmp_path, agent_args=("--lease-wait-ms", "1000"), **store_params(store, request))
    try:
        s.start()
        # $1 and $2 per Mtok: costs are easy to reckon in micro-dollars.
        s.tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai",
                   "--input-micros", "1000000", "--output-micros", "2000000")
        yield s
    finally:
        s.close()


def limited_key(stack, name, *limits):
    key = stack.create_key(name, "--default-model", "mock-gpt", *limits)
    time.sleep(0.6)   # the agent reloads keys within its reload interval (250 ms)
    return key


def retried(send):
    """send()'s (status, headers, body), sent again (up to 3 times, after its Retry-After)
    while it is refused with budget_share_pending, as the providers' SDKs retry a 429: on
    PostgreSQL a node whose share round is held up (a loaded machine) answers so for a
    moment."""
    for attempt in range(3):
        if attempt:
            time.sleep(int(h["retry-after"]))
        status, h, text = send()
        if status != 429 or b'"code":"budget_share_pending"' not in text:
            break
    return status, h, text


def chat(stack, key, max_tokens=16, headers=None, stream=False):
    body = {"model": "mock-gpt", "messages": [], "max_tokens": max_tokens}
    if stream:
        body["stream"] = True
    return retried(lambda: stack.gateway("POST", CHAT, body, key=key, headers=headers or {}))


def error_code(body):
    return json.loads(body)["error"]["code"]


def test_requests_per_minute_and_an_honest_retry_after(stack):
    key = limited_key(stack, "rpm", "--rpm", "60")
    results = [chat(stack, key) for _ in range(61)]
    ok = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] == 429]
    # 60 per minute refill one per second: the 61 requests took under a second, so at
    # most one slot came back while they ran.
    assert 60 <= len(ok) <= 61 and len(ok) + len(refused) == 61
    remaining = [int(h["x-ratelimit-remaining-requests"]) for _, h, _ in ok[:5]]
    assert remaining == sorted(remaining, reverse=True) and remaining[0] >= 55
    assert all(h["x-ratelimit-limit-requests"] == "60" for _, h, _ in results)
    # Spend the refill, then the refusal says when a request fits again, and it does.
    while True:
        status, h, body = chat(stack, key)
        if status == 429:
            break
    assert error_code(body) == "rate_limit_requests"
    assert "60 requests per minute" in json.loads(body)["error"]["message"]
    wait = int(h["retry-after"])
    assert 1 <= wait <= 2
    time.sleep(wait)
    assert chat(stack, key)[0] == 200
    denied = stack.rows("verdict = 'rate_limit_requests'")
    assert denied and all(r["outcome"] == "denied" and r["status"] == 429 for r in denied)


def test_concurrent_streams_never_exceed_max_concurrent(stack):
    key = limited_key(stack, "conc", "--max-concurrent", "3")
    slow = {"x-mock-frames": "20", "x-mock-frame-delay-ms": "40"}
    with concurrent.futures.ThreadPoolExecutor(12) as ex:
        results = list(ex.map(lambda _: chat(stack, key, headers=slow, stream=True), range(12)))
    statuses = sorted(r[0] for r in results)
    assert statuses.count(200) == 3 and statuses.count(429) == 9
    assert all(error_code(b) == "concurrency_limit" for s, _, b in results if s == 429)
    # The slots come back when the transactions' records arrive.
    deadline = time.time() + 5
    while chat(stack, key)[0] != 200:
        assert time.time() < deadline
        time.sleep(0.1)


def test_tokens_per_minute_reserve_then_settle(stack):
    """Each request reserves its prompt estimate plus max_tokens (300) against 1000 tokens
    per minute, so at most three run at once; the exact usage (15 tokens) settles each,
    and the room comes back for more."""
    key = limited_key(stack, "tpm", "--tpm", "1000")
    small = {"x-mock-prompt-tokens": "10", "x-mock-completion-tokens": "5",
             "x-mock-frames": "10", "x-mock-frame-delay-ms": "50"}
    with concurrent.futures.ThreadPoolExecutor(10) as ex:
        results = list(ex.map(lambda _: chat(stack, key, 300, small, True), range(10)))
    statuses = [r[0] for r in results]
    assert statuses.count(200) == 3 and statuses.count(429) == 7
    refused = [r for r in results if r[0] == 429]
    assert all(error_code(b) == "rate_limit_tokens" for _, _, b in refused)
    assert all(1 <= int(h["retry-after"]) <= 60 for _, h, _ in refused)
    # Settled at 15 tokens each, the window holds room for three more reservations.
    deadline = time.time() + 5
    while chat(stack, key, 300, small)[0] != 200:
        assert time.time() < deadline
        time.sleep(0.1)
    ok = chat(stack, key, 300, small)
    assert ok[0] == 200 and int(ok[1]["x-ratelimit-remaining-tokens"]) < 1000


@BOTH_STORES
def test_budget_is_spent_then_refused_and_survives_a_restart(stack):
    """$0.50 a month; each request costs $0.20 (200 000 prompt tokens at $1/Mtok) but
    reserves far less: the third is admitted on what was spent so far ($0.40) and the
    budget ends $0.10 over, the bound the docs state (one request's estimate error)."""
    key = limited_key(stack, "budget", "--budget-usd", "0.5", "--budget-period", "month")
    costly = {"x-mock-prompt-tokens": "200000", "x-mock-completion-tokens": "1"}
    got = []
    for _ in range(4):
        status, h, body = chat(stack, key, 1, costly)
        got.append(status)
        if status == 200:
            stack.row(h["x-request-id"])   # settled once its row exists
    assert got == [200, 200, 200, 402]
    assert error_code(body) == "budget_exceeded"
    assert 0 < int(h["retry-after"]) <= 31 * 86400
    spent = sum(r["cost_micros"] for r in stack.rows("cost_micros IS NOT NULL"))
    assert spent == 3 * 200002
    stack.kill_agent(signal.SIGTERM)
    stack.start_agent()
    stack.wait_agent_state("UP")
    assert chat(stack, key, 1, costly)[0] == 402
    # Raised while running: admitted again at once.
    stack.tallyctl("key", "set", "budget", "--budget-usd", "5")
    deadline = time.time() + 2
    while chat(stack, key, 1)[0] != 200:
        assert time.time() < deadline
        time.sleep(0.1)


def test_limits_change_live(stack):
    key = limited_key(stack, "live", "--rpm", "2")
    assert [chat(stack, key)[0] for _ in range(3)] == [200, 200, 429]
    stack.tallyctl("key", "set", "live", "--rpm", "none")
    time.sleep(1.0)
    status, h, _ = chat(stack, key)
    assert status == 200 and "x-ratelimit-limit-requests" not in h
    # Lowered below what the key used this minute: refused at once.
    stack.tallyctl("key", "set", "live", "--rpm", "1")
    time.sleep(1.0)
    assert chat(stack, key)[0] == 429
    # Raised: the extra room is there at once.
    stack.tallyctl("key", "set", "live", "--rpm", "10")
    time.sleep(1.0)
    assert [chat(stack, key)[0] for _ in range(3)] == [200] * 3


def test_keys_without_limits_pay_nothing(stack):
    status, h, _ = chat(stack, stack.key)
    assert status == 200 and not any(k.startswith("x-ratelimit") for k in h)


def test_cost_header_matches_the_row_when_enabled(tmp_path):
    """TALLY_COST_HEADER=1: a unary answer read by json_query carries its cost, the
    same as its row's; a stream (whose headers go before its usage) and an answer of a
    model without prices carry none."""
    s = Stack(tmp_path, haproxy_env={"TALLY_COST_HEADER": "1"})
    try:
        s.start()
        s.tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai",
                   "--input-micros", "1000000", "--output-micros", "2000000",
                   "--cached-micros", "500000", "--cache-write-micros", "1250000")
        s.tallyctl("model", "set", "mock-claude", "--provider", "mock-anthropic",
                   "--input-micros", "3000000", "--output-micros", "15000000",
                   "--cached-micros", "300000", "--cache-write-micros", "3750000")
        s.tallyctl("model", "set", "mock-free", "--provider", "mock-openai")
        time.sleep(0.6)
        cases = [
            ("/v1/chat/completions", "mock-gpt", {"x-mock-prompt-tokens": "1000",
                                                  "x-mock-completion-tokens": "333",
                                                  "x-mock-cached-tokens": "201"}),
            # OpenAI's cache writes are inside its prompt tokens, as its cached ones.
            ("/v1/chat/completions", "mock-gpt", {"x-mock-prompt-tokens": "1000",
                                                  "x-mock-completion-tokens": "333",
                                                  "x-mock-cached-tokens": "201",
                                                  "x-mock-cache-write-tokens": "399"}),
            ("/v1/responses", "mock-gpt", {"x-mock-prompt-tokens": "1000",
                                           "x-mock-completion-tokens": "333",
                                           "x-mock-cache-write-tokens": "399"}),
            ("/v1/messages", "mock-claude", {"x-mock-prompt-tokens": "100",
                                             "x-mock-completion-tokens": "41",
                                             "x-mock-cached-tokens": "1000",
                                             "x-mock-cache-creation-tokens": "2001"}),
        ]
        for path, model, knobs in cases:
            body = {"model": model, "max_tokens": 64, "messages": []}
            if path == "/v1/responses":
                body = {"model": model, "max_output_tokens": 64, "input": "x", "store": False}
            status, h, _ = s.gateway("POST", path, body, key=s.key, headers=knobs)
            assert status == 200
            row = s.row(h["x-request-id"])
            assert row["cost_micros"] is not None
            # A Responses answer echoes the request, an Anthropic one may quote its
            # documents: before 3.4's large buffers they are read by the capture filter,
            # after their headers went out (no header).
            if path in ("/v1/responses", "/v1/messages") and HAPROXY_VERSION < (3, 4):
                assert "x-tally-cost-micros" not in h, h
                continue
            assert int(h["x-tally-cost-micros"]) == row["cost_micros"], (model, row)
        status, h, _ = s.gateway("POST", CHAT, {"model": "mock-free", "max_tokens": 8,
                                               "messages": []}, key=s.key)
        assert status == 200 and "x-tally-cost-micros" not in h
        assert s.row(h["x-request-id"])["cost_micros"] is None
        status, h, _ = s.gateway("POST", CHAT, {"model": "mock-gpt", "stream": True,
                                               "messages": []}, key=s.key)
        assert status == 200 and "x-tally-cost-micros" not in h
        # No max_tokens and a 200 KB answer: on 3.4+ json_query reads it in the large
        # buffer (no Lua, so the cost header comes); before, the capture filter does.
        status, h, body = s.gateway("POST", CHAT, {"model": "mock-gpt", "messages": []},
                                    key=s.key, headers={"x-mock-body-bytes": "200000",
                                                        "x-mock-prompt-tokens": "9",
                                                        "x-mock-completion-tokens": "40000"})
        assert status == 200 and len(body) >= 200000
        row = s.row(h["x-request-id"])
        assert (row["completion_tokens"], row["cost_micros"]) == (40000, 9 + 80000)
        if UNARY_BUFFER > 200000:
            assert int(h["x-tally-cost-micros"]) == row["cost_micros"]
        else:
            assert "x-tally-cost-micros" not in h
    finally:
        s.close()


def test_no_cost_header_unless_enabled(stack):
    status, h, _ = chat(stack, stack.key)
    assert status == 200 and "x-tally-cost-micros" not in h


def test_client_gone_while_the_agent_decides_holds_nothing(stack):
    """The client resets its connection while the agent is stalled: HAProxy interrupts
    the SPOE exchange (error 4 on 3.x, not a timeout) and logs at once; its record then
    races the stale decision. Whichever comes first, the request ends as one row and the
    key's only concurrency slot is free again within seconds, not after the pending
    timeout. Three rounds, since the race goes either way."""
    body = json.dumps({"model": "mock-gpt", "messages": [], "max_tokens": 16}).encode()
    agent = stack.procs["agent"]
    for n in range(3):
        key = limited_key(stack, f"gone{n}", "--max-concurrent", "1")
        status, h, _ = chat(stack, stack.key)     # an established SPOP connection
        assert status == 200
        before = stack.row(h["x-request-id"])["id"]
        agent.signal(signal.SIGSTOP)
        try:
            c = socket.create_connection(("127.0.0.1", stack.gw_port))
            c.sendall(b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: gw\r\n"
                      b"Authorization: Bearer " + key.encode() + b"\r\n"
                      b"Content-Type: application/json\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
            time.sleep(0.1)   # HAProxy has sent the decision request (timeout 250 ms)
            src = f"src=127.0.0.1:{c.getsockname()[1]} "
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()         # a reset: HAProxy stops waiting for the agent
            # and logs the request before the agent runs again: its stream is gone (on a
            # loaded machine a fixed pause let the agent answer first, and the request
            # was served to no one)
            deadline = time.time() + 10
            while src in stack.haproxy_cmd("show sess"):
                assert time.time() < deadline, "HAProxy kept the reset client's stream"
                time.sleep(0.05)
        finally:
            agent.signal(signal.SIGCONT)
        gone = stack.wait_rows(1, "id > ?", (before,))
        deadline = time.time() + 10
        while chat(stack, key)[0] != 200:
            assert time.time() < deadline, "the stale decision still holds the slot"
            time.sleep(0.2)
        assert len(gone) == 1 and gone[0]["status"] != 200
    deadline = time.time() + 10
    while True:
        c = stack.counters()
        if c["received"] == c["written"] + c["dropped"] or time.time() > deadline:
            break
        time.sleep(0.1)
    assert c["received"] == c["written"] + c["dropped"]


def test_decision_later_than_its_record_holds_nothing(stack):
    """The agent stalls: HAProxy stops waiting (250 ms) and answers 503, its record then
    races the stale decision into the agent. Whichever comes first, the request ends as
    one row and the key's only concurrency slot is free again at once, not after the
    pending timeout (15 minutes here)."""
    key = limited_key(stack, "late", "--max-concurrent", "1")
    agent = stack.procs["agent"]
    agent.signal(signal.SIGSTOP)
    try:
        status, h, _ = chat(stack, key)
    finally:
        agent.signal(signal.SIGCONT)
    assert status == 503
    rid = h["x-request-id"]
    stack.wait_agent_state("UP")
    deadline = time.time() + 10
    while chat(stack, key)[0] != 200:
        assert time.time() < deadline, "the late decision still holds the slot"
        time.sleep(0.2)
    rows = stack.wait_rows(1, "request_id = ?", (rid,))
    assert len(rows) == 1 and rows[0]["outcome"] == "gateway_rejected"
    deadline = time.time() + 10
    while True:
        c = stack.counters()
        if c["received"] == c["written"] + c["dropped"] or time.time() > deadline:
            break
        time.sleep(0.1)
    assert c["received"] == c["written"] + c["dropped"]
