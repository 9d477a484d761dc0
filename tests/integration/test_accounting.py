"""Accounting through the real HAProxy: every transaction becomes exactly one row with
the usage the mock upstream reported, and the durable counters add up. The cases marked
BOTH_STORES run on SQLite and on PostgreSQL (a private server, tests/pgserver.py); a
locked or unreachable store delays rows there as it does on SQLite, and loses none."""
import concurrent.futures
import http.client
import json
import re
import signal
import socket
import struct
import time

import pytest

from conftest import UNARY_BUFFER, free_port
from stack import BOTH_STORES, Stack, store, store_params  # noqa: F401 (store: a fixture)


@pytest.fixture
def stack(tmp_path, store, request):
    s = Stack(tmp_path, agent_args=["--pending-timeout-ms", "2000"],
              **store_params(store, request))
    try:
        s.start()
        # Prices for every kind of token, so that costs are exact (micro-dollars/Mtok).
        s.tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai",
                   "--input-micros", "1000000", "--output-micros", "2000000",
                   "--cached-micros", "500000")
        s.tallyctl("model", "set", "mock-claude", "--provider", "mock-anthropic",
                   "--input-micros", "3000000", "--output-micros", "15000000",
                   "--cached-micros", "300000", "--cache-write-micros", "3750000")
        time.sleep(0.5)   # the agent reloads prices within its reload interval
        yield s
    finally:
        s.close()


def settled(stack, timeout=10):
    """Waits until the counters show nothing in flight; returns them."""
    deadline = time.time() + timeout
    while True:
        c = stack.counters()
        if c["received"] == c["written"] + c["dropped"] or time.time() > deadline:
            return c
        time.sleep(0.1)


# max_tokens 100 bounds the answer below HAProxy's buffer: json_query reads it. Without
# a bound the answer may outgrow the buffer, and the capture filter reads it.
@BOTH_STORES
@pytest.mark.parametrize("bound", [{"max_tokens": 100}, {}], ids=["json_query", "capture"])
def test_unary_openai_row_matches_upstream_usage(stack, bound):
    status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-gpt", "messages": [], **bound}, key=stack.key,
                                 headers={"x-mock-prompt-tokens": "1000",
                                          "x-mock-completion-tokens": "500",
                                          "x-mock-cached-tokens": "200",
                                          "x-mock-reasoning-tokens": "50"})
    assert status == 200
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"],
            r["reasoning_tokens"]) == (1000, 500, 200, 50)
    # 800 fresh x $1 + 200 cached x $0.5 + 500 out x $2 per Mtok = 1900 micro-dollars
    assert r["cost_micros"] == 800 + 100 + 1000
    assert (r["outcome"], r["usage_source"], r["stream"], r["status"]) == \
        ("complete", "response", 0, 200)
    assert r["model"] == "mock-gpt" and r["provider"] == "mock-openai"
    assert r["verdict"] == "allow" and r["key_id"] == 1


def test_unary_larger_than_the_buffer_keeps_its_usage(stack):
    """Usage comes after the text: a 200 KB answer hides it from anything that reads
    only the buffer (16 KB)."""
    status, h, body = stack.gateway(
        "POST", "/v1/chat/completions", {"model": "mock-gpt", "messages": []},
        key=stack.key, headers={"x-mock-body-bytes": "200000", "x-mock-prompt-tokens": "7",
                                "x-mock-completion-tokens": "50000"})
    assert status == 200 and len(body) >= 200000
    assert json.loads(body)["usage"]["completion_tokens"] == 50000
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"], r["usage_source"]) == \
        (7, 50000, "response")
    assert r["bytes_out"] >= 200000


def test_unary_that_overflows_its_bound_is_visible(stack):
    """An upstream that answers far beyond the request's max_tokens defeats json_query:
    the row says the usage is unknown (NULL), never 0."""
    status, h, _ = stack.gateway(
        "POST", "/v1/chat/completions", {"model": "mock-gpt", "messages": [], "max_tokens": 5},
        key=stack.key, headers={"x-mock-body-bytes": str(UNARY_BUFFER + 44000)})
    assert status == 200
    r = stack.row(h["x-request-id"])
    assert (r["outcome"], r["usage_source"]) == ("complete", "none")
    assert r["prompt_tokens"] is None and r["cost_micros"] is None


@pytest.mark.parametrize("crlf", ["0", "1"])
def test_openai_stream_with_usage(stack, crlf):
    status, h, body = stack.gateway(
        "POST", "/v1/chat/completions",
        {"model": "mock-gpt", "stream": True, "stream_options": {"include_usage": True},
         "messages": []}, key=stack.key,
        headers={"x-mock-frames": "200", "x-mock-crlf": crlf,
                 "x-mock-prompt-tokens": "12", "x-mock-completion-tokens": "200"})
    assert status == 200 and body.count(b"data: ") == 200 + 3
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"]) == (12, 200)
    assert (r["usage_source"], r["stream"], r["outcome"]) == ("stream", 1, "complete")
    assert r["cost_micros"] == 12 + 400


@pytest.mark.parametrize("crlf", ["0", "1"])
def test_stream_without_include_usage_is_amended_and_client_sees_its_stream(stack, crlf):
    """The gateway asks the upstream for usage on the client's behalf, records it, and
    takes the usage event out again: the client gets the stream it asked for."""
    status, h, body = stack.gateway(
        "POST", "/v1/chat/completions",
        {"model": "mock-gpt", "stream": True, "messages": []}, key=stack.key,
        headers={"x-mock-frames": "200", "x-mock-crlf": crlf,
                 "x-mock-prompt-tokens": "33", "x-mock-completion-tokens": "200"})
    assert status == 200
    sep = b"\r\n\r\n" if crlf == "1" else b"\n\n"
    events = [e for e in body.split(sep) if e]
    # 200 content chunks, the finish chunk, [DONE]; no usage chunk.
    assert len(events) == 202 and events[-1] == b"data: [DONE]"
    assert b'"usage":{' not in body
    sent = json.loads(stack.mock_requests()[-1]["body"])
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == "mock-gpt" and sent["stream"] is True
    # Byte for byte what the upstream sent for the amended request, minus its usage event.
    _, _, upstream = stack.direct("POST", "/v1/chat/completions", sent,
                                  headers={"x-mock-frames": "200", "x-mock-crlf": crlf,
                                           "x-mock-prompt-tokens": "33",
                                           "x-mock-completion-tokens": "200"})
    assert body == sep.join(e for e in upstream.split(sep) if b'"usage":{' not in e)
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"], r["usage_source"]) == (33, 200, "stream")


@pytest.mark.parametrize("pad", [8, 12])
def test_stream_usage_across_the_capture_seam(stack, pad):
    """A stream a little longer than the capture's head (1536 bytes): its usage chunk
    spans head and tail, and HAProxy's byte count (one above what the filter kept) says
    bytes were skipped between them. It is read all the same."""
    status, h, body = stack.gateway(
        "POST", "/v1/chat/completions",
        {"model": "mock-gpt", "stream": True, "stream_options": {"include_usage": True},
         "messages": []}, key=stack.key,
        headers={"x-mock-frames": "4", "x-mock-model": "mock-gpt-" + "x" * pad,
                 "x-mock-prompt-tokens": "12", "x-mock-completion-tokens": "4"})
    assert status == 200
    at = body.find(b'"usage":{')
    assert at < 1536 < body.find(b"}", at) < len(body)
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"], r["usage_source"]) == (12, 4, "stream")
    # Not a dated snapshot of the routed model: kept apart, the row stays mock-gpt's.
    assert (r["model"], r["model_reported"]) == ("mock-gpt", "mock-gpt-" + "x" * pad)


def test_stream_that_asked_for_usage_keeps_its_usage_event(stack):
    status, h, body = stack.gateway(
        "POST", "/v1/chat/completions",
        {"model": "mock-gpt", "stream": True, "stream_options": {"include_usage": True},
         "messages": []}, key=stack.key, headers={"x-mock-frames": "3"})
    assert body.count(b'"usage":{') == 1
    assert "stream_options" in stack.mock_requests()[-1]["body"]


def test_stream_options_without_usage_is_amended_too(stack):
    """include_usage false is no way around the meter: the upstream is asked for usage,
    in the client's own stream_options, and the client still gets no usage event."""
    status, h, body = stack.gateway(
        "POST", "/v1/chat/completions",
        {"model": "mock-gpt", "stream": True, "stream_options": {"include_usage": False},
         "messages": []}, key=stack.key, headers={"x-mock-frames": "3"})
    assert status == 200
    assert json.loads(stack.mock_requests()[-1]["body"])["stream_options"] == \
        {"include_usage": True}
    assert b'"usage":{' not in body
    r = stack.row(h["x-request-id"])
    assert (r["usage_source"], r["prompt_tokens"], r["completion_tokens"]) == ("stream", 10, 20)


def test_anthropic_stream_with_cache(stack):
    status, h, _ = stack.gateway(
        "POST", "/v1/messages",
        {"model": "mock-claude", "stream": True, "max_tokens": 100, "messages": []},
        key=stack.key,
        headers={"x-mock-frames": "50", "x-mock-prompt-tokens": "100",
                 "x-mock-completion-tokens": "40", "x-mock-cached-tokens": "1000",
                 "x-mock-cache-creation-tokens": "2000"})
    assert status == 200
    r = stack.row(h["x-request-id"])
    # Total input = input + cache read + cache write.
    assert (r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"],
            r["cache_creation_tokens"]) == (3100, 40, 1000, 2000)
    assert r["usage_source"] == "stream"
    # 100 x $3 + 1000 x $0.3 + 2000 x $3.75 + 40 x $15 per Mtok
    assert r["cost_micros"] == 300 + 300 + 7500 + 600


def test_upstream_cut_mid_stream_is_recorded(stack):
    # Paced frames: when the upstream's bytes and its close arrive in one read, HAProxy
    # 2.6 forwards them while the Lua filter sees no input, so the record carries no
    # capture and there is no message_start to read (usage_source "none").
    conn = http.client.HTTPConnection("127.0.0.1", stack.gw_port, timeout=10)
    conn.request("POST", "/v1/messages",
                 body=b'{"model":"mock-claude","stream":true,"max_tokens":9,"messages":[]}',
                 headers={"Authorization": f"Bearer {stack.key}", "x-mock-frames": "50",
                          "x-mock-frame-delay-ms": "5", "x-mock-disconnect-after": "5",
                          "x-mock-prompt-tokens": "100"})
    resp = conn.getresponse()
    rid = resp.getheader("x-request-id")
    with pytest.raises(http.client.IncompleteRead):
        resp.read()
    conn.close()
    r = stack.row(rid)
    assert r["outcome"] == "upstream_error"
    # The input from message_start is kept; the output was never reported: NULL, never 0.
    assert r["prompt_tokens"] == 100 and r["usage_source"] == "partial"
    assert r["completion_tokens"] is None


def test_upstream_500(stack):
    status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-gpt", "messages": []}, key=stack.key,
                                 headers={"x-mock-status": "500"})
    assert status == 500
    r = stack.row(h["x-request-id"])
    assert r["outcome"] == "upstream_error" and r["prompt_tokens"] is None


def test_client_abort_mid_stream(stack):
    s = socket.create_connection(("127.0.0.1", stack.gw_port))
    body = (b'{"model":"mock-claude","stream":true,"max_tokens":9,"messages":[]}')
    s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + stack.key.encode() + b"\r\n"
              b"x-mock-frames: 100\r\nx-mock-frame-delay-ms: 20\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    data = b""
    while b"content_block_delta" not in data:
        data += s.recv(65536)
    rid = [l.split(b":", 1)[1].strip().decode() for l in data.split(b"\r\n")
           if l.lower().startswith(b"x-request-id")][0]
    s.close()
    r = stack.row(rid)
    assert r["outcome"] == "client_abort" and r["usage_source"] == "partial"
    assert r["prompt_tokens"] is not None and r["completion_tokens"] is None


def stream_until(stack, path, body, until, headers):
    """A stream read through the gateway on a raw socket until the bytes until arrived,
    then the connection reset (HAProxy 2.6 would write the end into a closed socket's
    buffer and never see the client leave): the row of the request."""
    s = socket.create_connection(("127.0.0.1", stack.gw_port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Authorization: Bearer {stack.key}\r\n".encode() +
              b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) +
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    data = b""
    while until not in data:
        got = s.recv(65536)
        assert got, data
        data += got
    rid = [l.split(b":", 1)[1].strip().decode() for l in data.split(b"\r\n")
           if l.lower().startswith(b"x-request-id")][0]
    s.close()
    return stack.row(rid)


def test_client_gone_after_the_terminal_event_is_complete(stack):
    """Codex CLI closes a Responses stream on response.completed, before the body ends:
    the answer was whole (complete, usage exact). (A chat stream's end is [DONE], which
    the capture does not mark: test_join's unit test holds that its usage chunk is not
    the end.)"""
    hold = {"x-mock-end-delay-ms": "1000", "x-mock-prompt-tokens": "41",
            "x-mock-completion-tokens": "9"}
    r = stream_until(stack, "/v1/responses", b'{"model":"mock-gpt","stream":true,"input":"hi"}',
                     b"event: response.completed", hold)
    assert (r["status"], r["outcome"], r["usage_source"]) == (200, "complete", "stream"), r
    assert (r["prompt_tokens"], r["completion_tokens"]) == (41, 9), r
    assert r["termination"][0] == "C", r


def test_client_abort_mid_openai_stream_keeps_what_it_has(stack):
    """Gone before the usage chunk: no counts (NULL), but the model the upstream named."""
    s = socket.create_connection(("127.0.0.1", stack.gw_port))
    body = (b'{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},'
            b'"messages":[]}')
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\n"
              b"Authorization: Bearer " + stack.key.encode() + b"\r\n"
              b"x-mock-frames: 100\r\nx-mock-frame-delay-ms: 20\r\n"
              b"x-mock-model: mock-gpt-2025-01-01\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    data = b""
    while data.count(b"data: ") < 3:
        data += s.recv(65536)
    rid = [l.split(b":", 1)[1].strip().decode() for l in data.split(b"\r\n")
           if l.lower().startswith(b"x-request-id")][0]
    s.close()
    r = stack.row(rid)
    assert r["outcome"] == "client_abort" and r["usage_source"] == "none"
    assert r["prompt_tokens"] is None and r["completion_tokens"] is None
    assert r["model"] == "mock-gpt-2025-01-01" and r["stream"] == 1


def test_denied_and_unjudged_requests_are_rows(stack):
    status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-gpt"}, key="tly_" + "A" * 43)
    assert status == 401
    r = stack.row(h["x-request-id"])
    assert (r["outcome"], r["verdict"], r["status"]) == ("denied", "invalid_api_key", 401)
    stack.kill_agent()
    status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-gpt"}, key=stack.key)
    assert status == 503
    stack.start_agent()
    # The ring delivers the record kept while the agent was down.
    r = stack.row(h["x-request-id"], timeout=20)
    assert r["outcome"] == "gateway_rejected" and r["verdict"] is None


def test_malformed_http_is_a_row_too(stack):
    """HAProxy refuses a request it cannot parse before any unique id exists: the row is
    named by its connection's nonce, once, though two copies arrive."""
    seen = {r["request_id"] for r in stack.rows("request_id LIKE 'haproxy-%'")}
    time.sleep(0.5)   # earlier tests' connections end with records of their own
    seen |= {r["request_id"] for r in stack.rows("request_id LIKE 'haproxy-%'")}
    before = stack.counters()
    s = socket.create_connection(("127.0.0.1", stack.gw_port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost x\r\nbroken header\r\n\r\n")
    reply = s.recv(65536)
    s.close()
    assert reply.startswith(b"HTTP/1.1 400")
    r = [x for x in stack.wait_rows(len(seen) + 1, "request_id LIKE 'haproxy-%'")
         if x["request_id"] not in seen]
    assert len(r) == 1 and r[0]["status"] == 400 and r[0]["termination"] == "PR"
    assert (r[0]["outcome"], r[0]["verdict"], r[0]["key_id"]) == ("gateway_rejected", None, None)
    assert re.fullmatch(r"haproxy-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}",
                        r[0]["request_id"])
    deadline = time.time() + 10
    while stack.counters()["duplicates"] < before["duplicates"] + 1 and time.time() < deadline:
        time.sleep(0.05)
    after = stack.counters()
    assert after["received"] == before["received"] + 1
    assert after["duplicates"] == before["duplicates"] + 1
    assert len(stack.rows("request_id LIKE 'haproxy-%'")) == len(seen) + 1


@BOTH_STORES
def test_every_request_one_row_and_counters_add_up(stack):
    def one(i):
        stream = i % 2 == 0
        body = {"model": "mock-gpt", "messages": [], "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        status, h, _ = stack.gateway("POST", "/v1/chat/completions", body, key=stack.key,
                                     headers={"x-mock-frames": "10"})
        assert status == 200
        return h["x-request-id"]

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        ids = list(ex.map(one, range(300)))
    rows = stack.wait_rows(300)
    assert sorted(r["request_id"] for r in rows) == sorted(ids)
    assert all(r["prompt_tokens"] == 10 and r["completion_tokens"] == 20 for r in rows)
    c = settled(stack)
    assert c["received"] == c["written"] + c["dropped"] == 300 and c["dropped"] == 0
    # Ring and UDP both delivered each record: the second copies are duplicates.
    assert c["duplicates"] >= 250


@BOTH_STORES
def test_agent_killed_under_load_loses_no_admitted_request(stack):
    """kill -9 mid-load: each request HAProxy let through has exactly one row after a
    restart, with usage or marked no_record."""
    stop = time.time() + 3
    admitted = []

    def client():
        while time.time() < stop:
            try:
                status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                             {"model": "mock-gpt", "messages": []},
                                             key=stack.key, timeout=10)
            except OSError:
                continue
            if status == 200:
                admitted.append(h["x-request-id"])

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(client) for _ in range(8)]
        time.sleep(1)
        stack.kill_agent(signal.SIGKILL)
        time.sleep(0.3)
        stack.start_agent()
        for f in futs:
            f.result()
    assert admitted
    time.sleep(3)   # pending timeout (2 s) + a tick
    rows = {r["request_id"]: r for r in stack.rows()}
    missing = [i for i in admitted if i not in rows]
    assert not missing, f"{len(missing)} admitted requests without a row"
    assert all(rows[i]["outcome"] in ("complete", "no_record") for i in admitted)
    assert len(rows) == len(set(rows))


def test_queue_overflow_counts_drops(tmp_path):
    s = Stack(tmp_path, agent_args=["--queue-capacity", "1", "--batch-max", "1"])
    try:
        s.start()
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda i: s.gateway("POST", "/v1/chat/completions",
                                            {"model": "mock-gpt", "messages": []},
                                            key=s.key), range(400)))
        c = settled(s)
        assert c["received"] == c["written"] + c["dropped"]
        assert c["received"] >= 400
        assert len(s.rows()) == c["written"]
    finally:
        s.close()


def test_haproxy_reload_during_streams_loses_nothing(stack):
    """Streams that finish in the old process after a soft reload lose their ring
    record; the UDP copy still brings it."""
    def stream(i):
        status, h, body = stack.gateway(
            "POST", "/v1/chat/completions",
            {"model": "mock-gpt", "stream": True, "messages": []}, key=stack.key,
            headers={"x-mock-frames": "40", "x-mock-frame-delay-ms": "25",
                     "x-mock-completion-tokens": "40"})
        assert status == 200 and body.endswith(b"data: [DONE]\n\n")
        return h["x-request-id"]

    with concurrent.futures.ThreadPoolExecutor(20) as ex:
        futs = [ex.submit(stream, i) for i in range(20)]
        time.sleep(0.4)
        old = stack.reload_haproxy()
        ids = [f.result() for f in futs]
    old.p.wait(15)   # the old process exits once its streams are done
    # New requests go to the new process.
    status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-gpt", "messages": []}, key=stack.key)
    ids.append(h["x-request-id"])
    rows = {r["request_id"]: r for r in stack.wait_rows(21)}
    assert set(ids) <= set(rows)
    assert all(rows[i]["outcome"] == "complete" for i in ids)
    assert all(rows[i]["completion_tokens"] == 40 for i in ids[:20])
    c = settled(stack)
    assert c["received"] == c["written"] == 21 and c["dropped"] == 0


def control(stack, request):
    import msgpack
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(stack.db) + ".ctl")
        payload = msgpack.packb(request)
        s.sendall(len(payload).to_bytes(4, "big") + payload)
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = s.recv(65536)
            assert chunk, "control socket closed"
            data += chunk
        return msgpack.unpackb(data[4:4 + int.from_bytes(data[:4], "big")])


def metrics(stack):
    import http.client as hc
    conn = hc.HTTPConnection("127.0.0.1", stack.metrics_port, timeout=5)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_live_state_over_control_socket_and_metrics(stack):
    def slow():
        return stack.gateway("POST", "/v1/chat/completions",
                             {"model": "mock-gpt", "stream": True, "messages": []},
                             key=stack.key, headers={"x-mock-frames": "20",
                                                     "x-mock-frame-delay-ms": "50"})

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        fut = ex.submit(slow)
        time.sleep(0.4)
        live = control(stack, {"cmd": "inflight"})
        keys = control(stack, {"cmd": "keys"})
        status, h, _ = fut.result()
    assert live["ok"] and len(live["requests"]) == 1
    assert live["requests"][0]["request_id"] == h["x-request-id"]
    assert live["requests"][0]["model"] == "mock-gpt" and live["requests"][0]["stream"] is True
    assert [k["inflight"] for k in keys["keys"] if k["key_id"] == 1] == [1]
    stack.row(h["x-request-id"])
    c = settled(stack)
    st = control(stack, {"cmd": "status"})
    assert st["inflight"] == 0 and st["queue_depth"] == 0
    assert {k: st["counters"][k] for k in ("received", "written", "dropped")} == \
        {k: c[k] for k in ("received", "written", "dropped")}
    m = metrics(stack)
    assert m["tally_accounting_received_total"] == c["received"]
    assert m["tally_accounting_written_total"] == c["written"]
    assert m['tally_verdicts_total{verdict="allow"}'] >= 1
    assert m['tally_rows_total{outcome="complete"}'] >= 1
    assert m["tally_decision_seconds_count"] >= 1
    assert control(stack, {"cmd": "nope"})["ok"] is False


def test_locked_database_delays_rows_but_loses_none(stack):
    """Another process holding the write lock makes the writer retry, not drop."""
    import sqlite3
    con = sqlite3.connect(str(stack.db), timeout=1, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    try:
        ids = []
        for _ in range(20):
            status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                         {"model": "mock-gpt", "messages": []}, key=stack.key)
            assert status == 200
            ids.append(h["x-request-id"])
        time.sleep(2)
    finally:
        con.execute("ROLLBACK")
        con.close()
    rows = stack.wait_rows(20)
    assert {r["request_id"] for r in rows} == set(ids)
    c = settled(stack)
    assert c["dropped"] == 0 and c["received"] == c["written"] == 20
    assert metrics(stack)['tally_errors_total{kind="write_busy"}'] >= 1


@pytest.mark.parametrize("store", ["postgres"], indirect=True)
def test_locked_postgres_table_delays_rows_but_loses_none(stack):
    """Another session holding a lock on requests makes the writer's statements time out
    (its lock_timeout), roll back and retry, not drop."""
    import psycopg2
    con = psycopg2.connect(stack.db)
    try:
        cur = con.cursor()
        cur.execute("LOCK TABLE requests IN EXCLUSIVE MODE")
        ids = []
        for _ in range(20):
            status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                         {"model": "mock-gpt", "messages": []}, key=stack.key)
            assert status == 200
            ids.append(h["x-request-id"])
        time.sleep(2)
        assert stack.counters()["written"] == 0
    finally:
        con.rollback()
        con.close()
    rows = stack.wait_rows(20)
    assert {r["request_id"] for r in rows} == set(ids)
    c = settled(stack)
    assert c["dropped"] == 0 and c["received"] == c["written"] == 20
    assert metrics(stack)['tally_errors_total{kind="write_busy"}'] >= 1


@pytest.mark.parametrize("store", ["postgres"], indirect=True)
def test_postgres_outage_delays_rows_but_loses_none(stack):
    """The store stops for two seconds (shorter than --write-retry-ms): the agent keeps
    deciding, the writer retries on a new connection, takes its node's lock again, and
    every row arrives; nothing is dropped."""
    ids = []

    def one():
        status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                     {"model": "mock-gpt", "messages": []}, key=stack.key)
        assert status == 200
        ids.append(h["x-request-id"])

    one()
    stack.wait_rows(1)
    stack.pg.stop()
    try:
        for _ in range(20):
            one()
        time.sleep(2)
    finally:
        stack.pg.start()
    rows = stack.wait_rows(21, timeout=20)
    assert sorted(r["request_id"] for r in rows) == sorted(ids)
    c = settled(stack)
    assert c["dropped"] == 0 and c["received"] == c["written"] == 21
    m = metrics(stack)
    assert m['tally_errors_total{kind="write_lost"}'] >= 1
    # The node's lock is held again, by the agent's new session.
    assert stack.scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                        " AND classid = 1952541817 AND granted") == 1


def test_full_database_drops_are_counted(tmp_path):
    """A database that cannot grow (here capped with --db-max-pages, as a full disk
    would) makes the writer retry, then count the rows it could not store as dropped
    once they have no room on disk either (--spill-max-mb 0 here: none; test_outage.py
    has rows waiting there): the agent keeps deciding and received = written + dropped
    still holds."""
    import sqlite3
    probe = Stack(tmp_path)
    probe.seed()
    con = sqlite3.connect(str(probe.db))
    pages = con.execute("PRAGMA page_count").fetchone()[0]
    con.close()
    s = Stack(tmp_path, agent_args=["--db-max-pages", str(pages + 4),
                                    "--write-retry-ms", "300", "--batch-max", "16",
                                    "--spill-max-mb", "0"])
    s.key = probe.key
    try:
        s.start_mock()
        s.start_agent()
        s.start_haproxy()
        s.wait_agent_state("UP")
        for _ in range(300):
            status, _, _ = s.gateway("POST", "/v1/chat/completions",
                                     {"model": "mock-gpt", "messages": []}, key=s.key)
            assert status == 200
        deadline = time.time() + 20
        while time.time() < deadline:
            m = metrics(s)
            if m["tally_accounting_received_total"] == \
                    m["tally_accounting_written_total"] + m["tally_accounting_dropped_total"]:
                break
            time.sleep(0.2)
        assert m["tally_accounting_received_total"] == 300
        assert m["tally_accounting_dropped_total"] > 0
        assert m["tally_accounting_written_total"] + m["tally_accounting_dropped_total"] == 300
        assert m['tally_errors_total{kind="write_full"}'] >= 1
        assert len(s.rows()) == m["tally_accounting_written_total"]
        assert s.procs["agent"].alive()
    finally:
        s.close()


def test_record_that_never_comes_becomes_no_record(tmp_path):
    """HAProxy's records go to a port nobody reads: every admitted request is still a
    row, written after --pending-timeout-ms with what the decision knew."""
    s = Stack(tmp_path, agent_args=["--pending-timeout-ms", "1500",
                                    "--records", f"127.0.0.1:{free_port()}"])
    try:
        s.start()
        status, h, _ = s.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-gpt", "stream": True, "messages": []},
                                 key=s.key, headers={"x-mock-frames": "3"})
        assert status == 200
        r = s.row(h["x-request-id"], timeout=20)
        assert (r["outcome"], r["usage_source"], r["stream"], r["verdict"]) == \
            ("no_record", "none", 1, "allow")
        assert r["model_requested"] == "mock-gpt" and r["key_id"] is not None
        assert r["prompt_tokens"] is None and r["status"] is None
        c = settled(s)
        assert c["timed_out"] == 1 and c["received"] == c["written"] == 1
    finally:
        s.close()


def test_fail_open_request_is_a_row(tmp_path):
    """Forwarded without a decision while the agent was down: its record waits in the
    ring and makes a row marked fail_open, with the usage of the answer."""
    s = Stack(tmp_path, fail_policy="open")
    try:
        s.start()
        s.kill_agent()
        s.wait_agent_state("DOWN")
        status, h, _ = s.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-gpt", "messages": []}, key=s.key,
                                 headers={"x-mock-prompt-tokens": "21",
                                          "x-mock-completion-tokens": "8"})
        assert status == 200
        s.start_agent()
        r = s.row(h["x-request-id"], timeout=20)
        assert (r["verdict"], r["outcome"], r["key_id"], r["status"]) == \
            ("fail_open", "complete", None, 200)
        assert (r["prompt_tokens"], r["completion_tokens"], r["usage_source"]) == \
            (21, 8, "response")
    finally:
        s.close()


def test_model_without_prices_is_unpriced_not_free(stack):
    stack.tallyctl("model", "set", "mock-free", "--provider", "mock-openai")
    time.sleep(0.5)
    before = settled(stack)
    status, h, _ = stack.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-free", "messages": [], "max_tokens": 50},
                                 key=stack.key, headers={"x-mock-prompt-tokens": "40",
                                                         "x-mock-completion-tokens": "4"})
    assert status == 200
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"], r["cost_micros"]) == (40, 4, None)
    after = settled(stack)
    assert after["unpriced"] == before["unpriced"] + 1
