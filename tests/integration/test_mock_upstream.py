"""Integration tests of loadtest/mock-upstream: the real binary on a free loopback port,
spoken to over real sockets. Each server is started and stopped by PID (SIGTERM) in a
fixture finalizer, which also checks the exit status; under TALLY_VALGRIND=1 the binary
runs under valgrind memcheck and a leak or error fails that check."""

import contextlib
import hashlib
import http.client
import io
import json
import os
import resource
import signal
import socket
import subprocess
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(REPO, os.environ.get("TALLY_BUILD", "build"), "mock-upstream")
VALGRIND = os.environ.get("TALLY_VALGRIND") == "1"
TIMEOUT = 60 if VALGRIND else 10
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"


class Mock:
    """One mock-upstream process; stderr goes to a file so that it can never block."""

    def __init__(self, args):
        if not os.access(BINARY, os.X_OK):
            pytest.fail(f"{BINARY} missing: build it first (make build)")
        self.log = tempfile.NamedTemporaryFile(prefix="mock-upstream-", suffix=".log")
        cmd = [BINARY, "--listen", "127.0.0.1:0", *args]
        if VALGRIND:
            cmd = ["valgrind", "--quiet", "--error-exitcode=99", "--leak-check=full",
                   "--errors-for-leak-kinds=definite,indirect", *cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = None

    def wait_ready(self):
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            with open(self.log.name, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("listening on 127.0.0.1:"):
                        self.port = int(line.rsplit(":", 1)[1])
                        return
            if self.proc.poll() is not None:
                pytest.fail(f"mock-upstream exited with {self.proc.returncode}: {self.stderr()}")
            time.sleep(0.02)
        pytest.fail("mock-upstream did not report its address")

    def stderr(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM):
        """Stops the process by PID; returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.log.close()
                pytest.fail("mock-upstream did not exit on signal")
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def start_mock(request):
    """Factory: start_mock(*args) -> a running Mock, stopped and checked at teardown."""

    def start(*args):
        m = Mock(args)

        def finish():
            out = m.stderr() if not m.log.closed else ""
            rc = m.stop()
            assert rc == 0, f"mock-upstream exit status {rc}: {out[-4000:]}"

        request.addfinalizer(finish)
        m.wait_ready()
        return m

    return start


@pytest.fixture
def mock(start_mock):
    return start_mock("--quiet")


# ---- helpers ----

def request_bytes(method, path, body=None, headers=None, close=True, version="1.1"):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/{version}", "Host: mock"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
        lines.append("Content-Type: application/json")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s):
    chunks = []
    while True:
        b = s.recv(65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def read_response(s):
    """One chunked stream response off a keep-alive connection, left open."""
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        b = s.recv(65536)
        assert b, "closed mid-response"
        data += b
    return data


@contextlib.contextmanager
def held_streams(port, count, req):
    """count connections, each sent req; all closed on leaving."""
    socks = []
    try:
        for _ in range(count):
            s = connect(port)
            s.sendall(req)
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def exchange(port, data):
    """Sends raw bytes, returns everything the server sent until it closed."""
    with connect(port) as s:
        s.sendall(data)
        return read_all(s)


class _Stream(io.BytesIO):
    """Raw response bytes that survive HTTPResponse closing them after each response."""

    def close(self):
        pass


class _Bytes:
    def __init__(self, data):
        self.f = _Stream(data)

    def makefile(self, *args, **kwargs):
        return self.f


def parse_responses(data, count=1):
    """Parses `count` responses out of raw bytes with http.client (chunked included)."""
    sock, out = _Bytes(data), []
    for _ in range(count):
        r = http.client.HTTPResponse(sock)
        r.begin()
        out.append((r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()))
    return out


def parse_response(data):
    return parse_responses(data)[0]


def sse(body):
    """SSE events of a stream body: list of (event name or None, data string)."""
    text = body.decode()
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if not block:
            continue
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = line[len("data: "):]
        events.append((name, data))
    return events


def call(port, method, path, body=None, headers=None):
    """One request over http.client; returns (status, headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        hdrs = dict(headers or {})
        if data is not None:
            hdrs.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def post_json(port, path, body, headers=None):
    status, hdrs, data = call(port, "POST", path, body, headers)
    return status, hdrs, json.loads(data)


def stats(port):
    return json.loads(call(port, "GET", "/_mock/stats")[2])


def wait_for(pred, what):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


# ---- CLI and lifecycle ----

def test_help_and_bad_arguments():
    out = subprocess.run([BINARY, "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0
    assert "--listen HOST:PORT" in out.stdout and "--frame-delay-ms" in out.stdout
    for args in ([], ["--listen", "127.0.0.1:0", "--frames", "abc"],
                 ["--listen", "127.0.0.1:0", "--status", "200"], ["--nope"]):
        bad = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=TIMEOUT)
        assert bad.returncode == 2, args
        assert "usage:" in bad.stderr


def test_sigint_exits_cleanly(start_mock):
    m = start_mock("--quiet")
    assert call(m.port, "GET", "/v1/models")[0] == 200
    assert m.stop(signal.SIGINT) == 0


# ---- OpenAI ----

def test_openai_unary_defaults(mock):
    status, hdrs, body = post_json(mock.port, CHAT, {"model": "gpt-4o-mini", "messages": []})
    assert status == 200
    assert hdrs["content-type"] == "application/json"
    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-4o-mini"
    assert body["id"].startswith("chatcmpl-")
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["message"]["content"] == "".join(f"mock{i} " for i in range(10))
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}


def test_embeddings(mock):
    """One vector whose length follows the answer's text, usage without completion
    tokens, deterministic, never a stream."""
    req = {"model": "text-embedding-3-small", "input": "hello", "stream": True}
    status, hdrs, body = post_json(mock.port, "/v1/embeddings", req, {"x-mock-prompt-tokens": "8"})
    assert status == 200 and hdrs["content-type"] == "application/json"
    assert (body["object"], body["model"]) == ("list", "text-embedding-3-small")
    assert body["usage"] == {"prompt_tokens": 8, "total_tokens": 8}
    [item] = body["data"]
    assert (item["object"], item["index"]) == ("embedding", 0)
    assert len(item["embedding"]) == len("".join(f"mock{i} " for i in range(10))) // 8 + 1
    assert all(-1 <= x <= 1 for x in item["embedding"])
    assert post_json(mock.port, "/v1/embeddings", req, {"x-mock-prompt-tokens": "8"})[2] == body
    _, _, big = post_json(mock.port, "/v1/embeddings", req, {"x-mock-body-bytes": "40000"})
    assert len(big["data"][0]["embedding"]) > 4000


def test_responses_api(mock):
    """The Responses API: a response with usage before user and metadata; a stream of named events ending
    in the terminal event response-end chooses, which alone carries the usage; compact
    and input_tokens."""
    req = {"model": "gpt-x", "input": "hi"}
    hdrs = {"x-mock-frames": "3", "x-mock-cached-tokens": "4", "x-mock-reasoning-tokens": "2"}
    status, _, body = post_json(mock.port, "/v1/responses", req, hdrs)
    assert status == 200 and (body["object"], body["status"], body["model"]) == \
        ("response", "completed", "gpt-x")
    assert body["output"][0]["content"][0]["text"] == "mock0 mock1 mock2 "
    assert list(body)[-3:] == ["usage", "user", "metadata"] and body["usage"] == {
        "input_tokens": 10, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 30}
    for end, name in ((0, "response.completed"), (1, "response.incomplete"), (2, "response.failed")):
        status, _, raw = call(mock.port, "POST", "/v1/responses", dict(req, stream=True),
                              dict(hdrs, **{"x-mock-response-end": str(end)}))
        events = [e.split("\n") for e in raw.decode().strip().split("\n\n")]
        names = [e[0][len("event: "):] for e in events]
        data = [json.loads(e[1][len("data: "):]) for e in events]
        assert names == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"] + ["response.output_text.delta"] * 3 + \
            ["response.output_text.done", "response.content_part.done",
             "response.output_item.done", name]
        assert [d["sequence_number"] for d in data] == list(range(11))
        assert [d["type"] for d in data] == names
        assert data[0]["response"]["usage"] is None
        assert data[-1]["response"]["status"] == ("completed", "incomplete", "failed")[end]
        assert data[-1]["response"]["usage"]["output_tokens"] == 20
        assert b"[DONE]" not in raw
    _, _, body = post_json(mock.port, "/v1/responses/compact", req)
    assert body["object"] == "response.compaction" and body["usage"]["input_tokens"] == 10
    _, _, body = post_json(mock.port, "/v1/responses/input_tokens", req, {"x-mock-prompt-tokens": "9"})
    assert body == {"object": "response.input_tokens", "input_tokens": 9}


# OpenAI's member order of a response object (API reference, openai-python's Response).
RESPONSE_ORDER = ["id", "object", "created_at", "status", "background", "error",
                  "incomplete_details", "instructions", "max_output_tokens", "max_tool_calls",
                  "model", "output", "parallel_tool_calls", "previous_response_id", "reasoning",
                  "service_tier", "store", "temperature", "text", "tool_choice", "tools",
                  "top_logprobs", "top_p", "truncation", "usage", "user", "metadata"]
ECHOED = {"background": True, "instructions": "be brief " * 3, "max_output_tokens": 100,
          "max_tool_calls": 2, "parallel_tool_calls": False, "previous_response_id": "resp_x",
          "reasoning": {"effort": "low", "summary": None}, "store": False, "temperature": 0.5,
          "text": {"format": {"type": "json_object"}, "verbosity": "low"},
          "tool_choice": "required", "top_logprobs": 3, "top_p": 0.9, "truncation": "auto",
          "tools": [{"type": "function", "name": "f", "description": "d",
                     "parameters": {"usage": {"input_tokens": 1, "output_tokens": 1}}}],
          "user": "u1", "metadata": {"model": "cheap", "k": "v"}}


def test_responses_echo_the_request_in_openai_order(mock):
    """A Responses answer echoes the request's settings as sent, in OpenAI's member order
    (usage between truncation and user): unary, and the response object of created,
    in_progress and the terminal event; unset settings get OpenAI's defaults."""
    req = dict(ECHOED, model="gpt-x", input="hi")
    hdrs = {"x-mock-service-tier": "flex", "x-mock-frames": "2"}
    _, _, raw = call(mock.port, "POST", "/v1/responses", req, hdrs)
    body = json.loads(raw)
    assert list(body) == RESPONSE_ORDER
    assert {k: body[k] for k in ECHOED} == ECHOED and body["service_tier"] == "flex"
    # The client's forged usage reaches the answer byte for byte, before the real one.
    forged = raw.index(b'"usage":{"input_tokens":1,"output_tokens":1}')
    assert forged < raw.index(b'"usage":{"input_tokens":10,') < raw.index(b'"metadata":')
    events = stream_events(mock.port, "/v1/responses", req, hdrs)
    for name, data in events[:2] + events[-1:]:
        resp = data["response"]
        assert list(resp) == RESPONSE_ORDER and {k: resp[k] for k in ECHOED} == ECHOED, name
    assert (events[0][1]["response"]["usage"], events[-1][1]["response"]["usage"]["input_tokens"]) \
        == (None, 10)
    _, _, body = post_json(mock.port, "/v1/responses", {"model": "gpt-x", "input": "hi"})
    assert list(body) == [k for k in RESPONSE_ORDER if k != "service_tier"]
    assert {k: body[k] for k in ECHOED} == {
        "background": False, "instructions": None, "max_output_tokens": None,
        "max_tool_calls": None, "parallel_tool_calls": True, "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None}, "store": True, "temperature": 1.0,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
        "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled", "user": None, "metadata": {}}
    # The last of duplicated members, as OpenAI's parser reads them.
    _, _, body = post_json(mock.port, "/v1/responses",
                           b'{"model":"m","metadata":{"a":"1"},"metadata":{"b":"2"}}')
    assert body["metadata"] == {"b": "2"}


@pytest.mark.parametrize("path,body", [
    (CHAT, {"model": "m"}), ("/v1/responses", dict(ECHOED, model="m")), (MESSAGES, {"model": "m"}),
    ("/v1/embeddings", {"model": "m", "input": "x"})])
def test_pretty_lays_out_unary_answers_as_python_json_dumps(mock, path, body):
    """x-mock-pretty 1 writes a unary answer as json.dumps does (", " and ": " on one
    line), 2 as json.dumps(indent=2); the content is the same, ids included."""
    compact = call(mock.port, "POST", path, body)[2]
    spaced = call(mock.port, "POST", path, body, {"x-mock-pretty": "1"})[2]
    indented = call(mock.port, "POST", path, body, {"x-mock-pretty": "2"})[2]
    assert json.loads(spaced) == json.loads(indented) == json.loads(compact)
    assert spaced.decode() == json.dumps(json.loads(spaced)) and b"\n" not in spaced
    assert indented.decode() == json.dumps(json.loads(indented), indent=2)
    assert b": " not in compact


def test_pretty_streams(mock):
    """Spaced stream events stay on one data line (Anthropic's "input_tokens": 10 with its
    space); indented ones take a data line per JSON line, which SSE joins with newlines."""
    status, _, raw = call(mock.port, "POST", MESSAGES, {"model": "m", "stream": True},
                          {"x-mock-pretty": "1", "x-mock-frames": "2"})
    events = sse(raw)
    assert status == 200 and [n for n, _ in events][0] == "message_start"
    assert all(d == json.dumps(json.loads(d)) for _, d in events)
    assert '"usage": {"input_tokens": 10, "output_tokens": 1}' in events[0][1]
    assert events[-2][1].endswith('"usage": {"output_tokens": 20}}')
    req = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    events = sse(call(mock.port, "POST", CHAT, req, {"x-mock-pretty": "1"})[2])
    assert events[-1][1] == "[DONE]" and '"prompt_tokens": 10' in events[-2][1]
    status, _, raw = call(mock.port, "POST", "/v1/responses", dict(ECHOED, model="m", stream=True),
                          {"x-mock-pretty": "2", "x-mock-frames": "2", "x-mock-crlf": "1"})
    blocks = raw.decode().split("\r\n\r\n")
    assert status == 200 and blocks[-1] == ""
    datas = []
    for block in blocks[:-1]:
        lines = block.split("\r\n")
        assert lines[0].startswith("event: ") and all(x.startswith("data: ") for x in lines[1:])
        datas.append("\n".join(x[len("data: "):] for x in lines[1:]))
    assert all(d == json.dumps(json.loads(d), indent=2) for d in datas)
    last = json.loads(datas[-1])
    assert last["type"] == "response.completed" and list(last["response"]) == \
        [k for k in RESPONSE_ORDER if k != "service_tier"]
    assert call(mock.port, "POST", CHAT, {"model": "m"}, {"x-mock-pretty": "3"})[0] == 400


def test_stored_responses(mock):
    """A create's id depends on its input and X-Request-Id; the stored response's paths answer for any
    id (the mock keeps nothing), a read with the usage the knobs say; an empty POST body
    is logged as empty."""
    req = {"model": "gpt-x", "input": "hi"}
    one = post_json(mock.port, "/v1/responses", req)[2]["id"]
    assert post_json(mock.port, "/v1/responses", req)[2]["id"] == one
    assert post_json(mock.port, "/v1/responses", dict(req, input="ho"))[2]["id"] != one
    # requests a gateway tells apart by X-Request-Id (two keys' equal creates) too
    two = post_json(mock.port, "/v1/responses", req, {"X-Request-Id": "a"})[2]["id"]
    assert two != one
    assert post_json(mock.port, "/v1/responses", req, {"X-Request-Id": "a"})[2]["id"] == two
    assert post_json(mock.port, "/v1/responses", req, {"X-Request-Id": "b"})[2]["id"] != two
    status, _, raw = call(mock.port, "GET", f"/v1/responses/{one}", None,
                          {"x-mock-prompt-tokens": "7"})
    body = json.loads(raw)
    assert status == 200 and (body["id"], body["status"], body["usage"]["input_tokens"]) == \
        (one, "completed", 7)
    status, _, raw = call(mock.port, "DELETE", f"/v1/responses/{one}")
    assert (status, json.loads(raw)) == (200, {"id": one, "object": "response", "deleted": True})
    call(mock.port, "DELETE", "/_mock/requests")
    status, _, raw = call(mock.port, "POST", f"/v1/responses/{one}/cancel", b"")
    assert status == 200 and json.loads(raw)["status"] == "cancelled"
    assert json.loads(call(mock.port, "GET", "/_mock/requests")[2])[0]["body"] == ""
    status, _, raw = call(mock.port, "GET", f"/v1/responses/{one}/input_items")
    assert (status, json.loads(raw)) == (200, {"object": "list", "data": [], "first_id": None,
                                               "last_id": None, "has_more": False})
    for method, path in (("POST", f"/v1/responses/{one}"), ("GET", f"/v1/responses/{one}/cancel"),
                         ("GET", "/v1/responses/"), ("GET", f"/v1/responses/{one}/x")):
        assert call(mock.port, method, path, b"" if method == "POST" else None)[0] == 404


def test_count_tokens(mock):
    req = {"model": "claude-x", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    status, hdrs, body = post_json(mock.port, "/v1/messages/count_tokens", req,
                                   {"x-mock-prompt-tokens": "77"})
    assert (status, hdrs["content-type"], body) == (200, "application/json", {"input_tokens": 77})
    status, _, body = post_json(mock.port, "/v1/messages/count_tokens", req,
                                {"x-mock-status": "429"})
    assert status == 429 and body["type"] == "error"


def test_openai_unary_cli_defaults_and_header_overrides(start_mock):
    m = start_mock("--quiet", "--prompt-tokens", "111", "--completion-tokens", "222",
                   "--cached-tokens", "33", "--reasoning-tokens", "44", "--frames", "3")
    _, _, body = post_json(m.port, CHAT, {"model": "m"})
    assert body["usage"] == {
        "prompt_tokens": 111, "completion_tokens": 222, "total_tokens": 333,
        "prompt_tokens_details": {"cached_tokens": 33},
        "completion_tokens_details": {"reasoning_tokens": 44},
    }
    assert body["choices"][0]["message"]["content"] == "mock0 mock1 mock2 "
    _, _, body = post_json(m.port, CHAT, {"model": "m"}, {
        "x-mock-prompt-tokens": "5", "x-mock-completion-tokens": "7",
        "x-mock-cached-tokens": "0", "x-mock-reasoning-tokens": "2",
        "x-mock-model": "served-model"})
    assert body["model"] == "served-model"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
                             "completion_tokens_details": {"reasoning_tokens": 2}}
    # Counts beyond 32 bits stay exact integers.
    _, _, raw = call(m.port, "POST", CHAT, {"model": "m"},
                     {"x-mock-prompt-tokens": "9007199254740991"})
    assert b'"prompt_tokens":9007199254740991' in raw


def test_openai_stream_without_include_usage(mock):
    raw = exchange(mock.port, request_bytes("POST", CHAT, {"model": "gpt-4o", "stream": True},
                                            {"x-mock-frames": "4"}))
    status, hdrs, body = parse_response(raw)
    assert status == 200
    assert hdrs["content-type"] == "text/event-stream"
    assert hdrs["transfer-encoding"] == "chunked"
    events = sse(body)
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert len(chunks) == 5
    assert all("usage" not in c for c in chunks)
    assert [c["choices"][0]["delta"].get("content") for c in chunks[:4]] == \
        ["mock0 ", "mock1 ", "mock2 ", "mock3 "]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:4])
    assert chunks[4]["choices"][0]["finish_reason"] == "stop"
    assert chunks[4]["choices"][0]["delta"] == {}
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "gpt-4o" for c in chunks)


def test_openai_stream_with_include_usage(mock):
    req = {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True}}
    raw = exchange(mock.port, request_bytes("POST", CHAT, req, {
        "x-mock-frames": "3", "x-mock-prompt-tokens": "1234", "x-mock-completion-tokens": "56",
        "x-mock-cached-tokens": "1000"}))
    _, _, body = parse_response(raw)
    assert body.endswith(b"data: [DONE]\n\n")
    events = sse(body)
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert len(chunks) == 3 + 2
    assert all(c["usage"] is None for c in chunks[:-1])
    last = chunks[-1]
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290,
                             "prompt_tokens_details": {"cached_tokens": 1000}}
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


# ---- Anthropic ----

def test_anthropic_unary(mock):
    status, _, body = post_json(mock.port, MESSAGES, {"model": "claude-x", "max_tokens": 5},
                                {"x-mock-frames": "2"})
    assert status == 200
    assert body["type"] == "message" and body["role"] == "assistant"
    assert body["id"].startswith("msg_")
    assert body["model"] == "claude-x"
    assert body["content"] == [{"type": "text", "text": "mock0 mock1 "}]
    assert body["stop_reason"] == "end_turn"
    assert body["usage"] == {"input_tokens": 10, "output_tokens": 20}
    _, _, body = post_json(mock.port, MESSAGES, {"model": "claude-x"}, {
        "x-mock-cached-tokens": "300", "x-mock-cache-creation-tokens": "40"})
    assert body["usage"] == {"input_tokens": 10, "cache_creation_input_tokens": 40,
                             "cache_read_input_tokens": 300, "output_tokens": 20}


def test_anthropic_stream_sequence_and_usage(mock):
    raw = exchange(mock.port, request_bytes("POST", MESSAGES, {"model": "claude-x", "stream": True}, {
        "x-mock-frames": "3", "x-mock-prompt-tokens": "77", "x-mock-completion-tokens": "88",
        "x-mock-cached-tokens": "9"}))
    status, hdrs, body = parse_response(raw)
    assert status == 200 and hdrs["content-type"] == "text/event-stream"
    events = sse(body)
    assert [e for e, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    data = [json.loads(d) for _, d in events]
    assert all(d["type"] == e for (e, _), d in zip(events, data))
    start = data[0]["message"]
    assert start["model"] == "claude-x" and start["content"] == []
    assert start["usage"]["input_tokens"] == 77
    assert start["usage"]["cache_read_input_tokens"] == 9
    assert start["usage"]["cache_creation_input_tokens"] == 0
    assert [d["delta"]["text"] for d in data[2:5]] == ["mock0 ", "mock1 ", "mock2 "]
    assert data[6]["usage"] == {"output_tokens": 88}
    assert data[6]["delta"]["stop_reason"] == "end_turn"


# ---- usage classes billed apart ----

# Every class knob at a distinct value, so that a value in the wrong field shows.
CLASSES = {"x-mock-prompt-tokens": "1000", "x-mock-completion-tokens": "200",
           "x-mock-cached-tokens": "300", "x-mock-cache-write-tokens": "40",
           "x-mock-audio-input-tokens": "50", "x-mock-audio-output-tokens": "60",
           "x-mock-reasoning-tokens": "70", "x-mock-accepted-prediction-tokens": "80",
           "x-mock-rejected-prediction-tokens": "90", "x-mock-cache-creation-tokens": "500",
           "x-mock-cache-1h-tokens": "120", "x-mock-web-search-requests": "3",
           "x-mock-service-tier": "priority", "x-mock-frames": "2"}
# The class knobs added beside the original token knobs, each at its unset value.
NEW_ZERO = {"x-mock-cache-write-tokens": "0", "x-mock-audio-input-tokens": "0",
            "x-mock-audio-output-tokens": "0", "x-mock-accepted-prediction-tokens": "0",
            "x-mock-rejected-prediction-tokens": "0", "x-mock-cache-1h-tokens": "0",
            "x-mock-web-search-requests": "0"}
NEW_NAMES = [b"service_tier", b"cache_write_tokens", b"audio_tokens", b"prediction_tokens",
             b'"cache_creation"', b"ephemeral_", b"server_tool_use", b"web_search_requests"]
CHAT_USAGE = {
    "prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200,
    "prompt_tokens_details": {"cached_tokens": 300, "audio_tokens": 50, "cache_write_tokens": 40},
    "completion_tokens_details": {"reasoning_tokens": 70, "audio_tokens": 60,
                                  "accepted_prediction_tokens": 80,
                                  "rejected_prediction_tokens": 90}}
RESPONSES_USAGE = {
    "input_tokens": 1000, "input_tokens_details": {"cached_tokens": 300, "cache_write_tokens": 40},
    "output_tokens": 200, "output_tokens_details": {"reasoning_tokens": 70},
    "total_tokens": 1200}
CACHE_SPLIT = {"ephemeral_5m_input_tokens": 380, "ephemeral_1h_input_tokens": 120}


def stream_events(port, path, body, headers):
    """A stream's SSE events as (name, parsed data), [DONE] left out."""
    status, _, raw = call(port, "POST", path, dict(body, stream=True), headers)
    assert status == 200
    return [(name, json.loads(data)) for name, data in sse(raw) if data != "[DONE]"]


def test_usage_classes_chat(mock):
    """Chat completions: every class in its details object, after the counts it refines;
    the served tier at the top of the answer and of every chunk; the usage chunk carries
    the whole usage."""
    _, _, body = post_json(mock.port, CHAT, {"model": "m"}, CLASSES)
    assert body["usage"] == CHAT_USAGE
    assert list(body["usage"]) == list(CHAT_USAGE)
    assert list(body["usage"]["completion_tokens_details"]) == \
        list(CHAT_USAGE["completion_tokens_details"])
    assert body["service_tier"] == "priority" and "service_tier" not in body["usage"]
    _, _, legacy = post_json(mock.port, "/v1/completions", {"model": "m"}, CLASSES)
    assert (legacy["usage"], legacy["service_tier"]) == (CHAT_USAGE, "priority")

    req = {"model": "m", "stream_options": {"include_usage": True}}
    chunks = [d for _, d in stream_events(mock.port, CHAT, req, CLASSES)]
    assert len(chunks) == 2 + 2
    assert all(c["service_tier"] == "priority" for c in chunks)
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == CHAT_USAGE
    assert list(chunks[-1]["usage"]["prompt_tokens_details"]) == \
        list(CHAT_USAGE["prompt_tokens_details"])


def test_usage_classes_chat_each_alone(mock):
    """One class set alone: its details object holds it alone, the other object is absent."""
    for knob, where, field in (
            ("x-mock-cache-write-tokens", "prompt_tokens_details", "cache_write_tokens"),
            ("x-mock-audio-input-tokens", "prompt_tokens_details", "audio_tokens"),
            ("x-mock-audio-output-tokens", "completion_tokens_details", "audio_tokens"),
            ("x-mock-accepted-prediction-tokens", "completion_tokens_details",
             "accepted_prediction_tokens"),
            ("x-mock-rejected-prediction-tokens", "completion_tokens_details",
             "rejected_prediction_tokens")):
        _, _, body = post_json(mock.port, CHAT, {"model": "m"}, {knob: "17"})
        assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 20,
                                 "total_tokens": 30, where: {field: 17}}, knob


def test_usage_classes_responses(mock):
    """The Responses API: cache writes in input_tokens_details; the tier in the response
    object, unary, in response.created and in every terminal event, whose usage alone
    carries the classes."""
    req = {"model": "m", "input": "hi"}
    _, _, body = post_json(mock.port, "/v1/responses", req, CLASSES)
    assert body["usage"] == RESPONSES_USAGE and list(body)[-3] == "usage"
    assert list(body["usage"]["input_tokens_details"]) == ["cached_tokens", "cache_write_tokens"]
    assert body["service_tier"] == "priority"
    for end, name in ((0, "response.completed"), (1, "response.incomplete"),
                      (2, "response.failed")):
        events = stream_events(mock.port, "/v1/responses", req,
                               dict(CLASSES, **{"x-mock-response-end": str(end)}))
        assert events[0][0] == "response.created"
        assert events[0][1]["response"]["service_tier"] == "priority"
        assert events[0][1]["response"]["usage"] is None
        assert events[-1][0] == name
        assert events[-1][1]["response"]["service_tier"] == "priority"
        assert events[-1][1]["response"]["usage"] == RESPONSES_USAGE
        assert "service_tier" not in events[-1][1]
        assert all("usage" not in d for _, d in events[2:-1])


def test_usage_classes_anthropic(mock):
    """Messages: the cache writes split by lifetime beside their total, web searches in
    server_tool_use, the tier in usage; a stream's message_start has all but the searches,
    its message_delta the output and the searches."""
    _, _, body = post_json(mock.port, MESSAGES, {"model": "c"}, CLASSES)
    want = {"input_tokens": 1000, "cache_creation_input_tokens": 500,
            "cache_read_input_tokens": 300, "cache_creation": CACHE_SPLIT, "output_tokens": 200,
            "server_tool_use": {"web_search_requests": 3}, "service_tier": "priority"}
    assert body["usage"] == want and list(body["usage"]) == list(want)
    assert list(body["usage"]["cache_creation"]) == list(CACHE_SPLIT)
    assert "service_tier" not in body

    events = stream_events(mock.port, MESSAGES, {"model": "c"}, CLASSES)
    assert (events[0][0], events[-2][0]) == ("message_start", "message_delta")
    start = events[0][1]["message"]["usage"]
    assert start == {"input_tokens": 1000, "cache_creation_input_tokens": 500,
                     "cache_read_input_tokens": 300, "cache_creation": CACHE_SPLIT,
                     "output_tokens": 1, "service_tier": "priority"}
    assert events[-2][1]["usage"] == {"output_tokens": 200,
                                      "server_tool_use": {"web_search_requests": 3}}
    assert all("usage" not in d for _, d in events[1:-2])
    # All of the writes 1h: nothing left for 5m.
    _, _, body = post_json(mock.port, MESSAGES, {"model": "c"}, {
        "x-mock-cache-creation-tokens": "9", "x-mock-cache-1h-tokens": "9"})
    assert body["usage"]["cache_creation"] == {"ephemeral_5m_input_tokens": 0,
                                               "ephemeral_1h_input_tokens": 9}


def test_usage_classes_unset_add_nothing(mock):
    """The new knobs at 0 change no byte, ids included, unary or streamed; cache writes
    without 1h ones keep the shape they had before the split existed."""
    old = {"x-mock-cached-tokens": "3", "x-mock-reasoning-tokens": "4",
           "x-mock-cache-creation-tokens": "5", "x-mock-frames": "2"}
    for path, req in ((CHAT, {"model": "m"}),
                      (CHAT, {"model": "m", "stream": True,
                              "stream_options": {"include_usage": True}}),
                      ("/v1/completions", {"model": "m", "stream": True,
                                           "stream_options": {"include_usage": True}}),
                      ("/v1/responses", {"model": "m", "input": "hi"}),
                      ("/v1/responses", {"model": "m", "input": "hi", "stream": True}),
                      (MESSAGES, {"model": "c"}), (MESSAGES, {"model": "c", "stream": True})):
        plain = call(mock.port, "POST", path, req, old)
        zero = call(mock.port, "POST", path, req, dict(old, **NEW_ZERO))
        assert plain[0] == 200 and plain[2] == zero[2], (path, req)
        assert [n for n in NEW_NAMES if n in plain[2]] == [], (path, req)
    _, _, body = post_json(mock.port, MESSAGES, {"model": "c"}, old)
    assert body["usage"] == {"input_tokens": 10, "cache_creation_input_tokens": 5,
                             "cache_read_input_tokens": 3, "output_tokens": 20}
    # The ids the mock gave before these knobs existed; a set one makes another.
    assert body["id"] == "msg_mockf7061be7ae66b7dc"
    assert post_json(mock.port, CHAT, {"model": "m"})[2]["id"] == "chatcmpl-mock16d275167af30db5"
    for knob in [*NEW_ZERO, "x-mock-service-tier"]:
        value = "flex" if knob == "x-mock-service-tier" else "1"
        other = post_json(mock.port, MESSAGES, {"model": "c"}, dict(old, **{knob: value}))[2]
        assert other["id"] != body["id"], knob


def test_usage_class_knobs_refused(mock):
    """A tier outside [a-z_]{1,16}, or more 1h cache writes than cache writes, is a 400
    in the API's error shape."""
    for tier in ("", "Priority", "pri-ority", "flex1", "a" * 17, "caf\u00e9"):
        raw = exchange(mock.port, request_bytes("POST", CHAT, {"model": "m"},
                                                {"x-mock-service-tier": tier}))
        status, _, body = parse_response(raw)
        assert status == 400 and "x-mock-service-tier" in json.loads(body)["error"]["message"], tier
    status, _, body = post_json(mock.port, CHAT, {"model": "m"},
                                {"x-mock-service-tier": "a" * 16})
    assert status == 200 and body["service_tier"] == "a" * 16
    status, _, body = post_json(mock.port, MESSAGES, {"model": "c"}, {
        "x-mock-cache-creation-tokens": "5", "x-mock-cache-1h-tokens": "6"})
    assert status == 400 and body["type"] == "error"
    assert "cache-1h-tokens" in body["error"]["message"]
    status, _, body = post_json(mock.port, MESSAGES, {"model": "c"},
                                {"x-mock-cache-1h-tokens": "1"})
    assert status == 400 and "cache-creation-tokens" in body["error"]["message"]


def test_usage_class_cli_defaults(start_mock):
    """--service-tier and the class options set defaults, headers override them; bad
    values or a 1h share above the writes exit 2."""
    m = start_mock("--quiet", "--service-tier", "flex", "--cache-creation-tokens", "8",
                   "--cache-1h-tokens", "2", "--web-search-requests", "1",
                   "--cache-write-tokens", "6")
    _, _, body = post_json(m.port, MESSAGES, {"model": "c"})
    assert body["usage"]["service_tier"] == "flex"
    assert body["usage"]["cache_creation"] == {"ephemeral_5m_input_tokens": 6,
                                               "ephemeral_1h_input_tokens": 2}
    assert body["usage"]["server_tool_use"] == {"web_search_requests": 1}
    _, _, body = post_json(m.port, CHAT, {"model": "m"}, {"x-mock-service-tier": "scale"})
    assert body["service_tier"] == "scale"
    assert body["usage"]["prompt_tokens_details"] == {"cache_write_tokens": 6}
    status, _, _ = post_json(m.port, MESSAGES, {"model": "c"},
                             {"x-mock-cache-creation-tokens": "1"})
    assert status == 400
    for args in (["--service-tier", "Flex"], ["--service-tier", ""],
                 ["--cache-1h-tokens", "1"],
                 ["--cache-creation-tokens", "1", "--cache-1h-tokens", "2"]):
        bad = subprocess.run([BINARY, "--listen", "127.0.0.1:0", *args], capture_output=True,
                             text=True, timeout=TIMEOUT)
        assert bad.returncode == 2 and "usage:" in bad.stderr, args


# ---- per-request behaviour ----

def test_frames_and_delay_are_honoured_frame_by_frame(mock):
    delay = 0.1
    with connect(mock.port) as s:
        s.sendall(request_bytes("POST", CHAT, {"model": "m", "stream": True},
                                {"x-mock-frames": "5", "x-mock-frame-delay-ms": "100"}))
        t0 = time.monotonic()
        arrivals, buf = [], b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            buf += b
            arrivals.append((time.monotonic() - t0, buf.count(b'"content":"mock')))
    elapsed = arrivals[-1][0]
    _, _, body = parse_response(buf)
    assert len([d for _, d in sse(body) if '"content":"mock' in d]) == 5
    assert elapsed >= 5 * delay * 0.9
    first = next(t for t, n in arrivals if n >= 1)
    # The first frame reached us long before the last: events are not batched.
    assert first < elapsed - 2 * delay
    if not VALGRIND:
        assert elapsed < 5 * delay + 1.5


def test_ttfb_delays_the_headers(mock):
    with connect(mock.port) as s:
        t0 = time.monotonic()
        s.sendall(request_bytes("POST", CHAT, {"model": "m"}, {"x-mock-ttfb-ms": "300"}))
        first = s.recv(1)
        ttfb = time.monotonic() - t0
        rest = read_all(s)
    assert ttfb >= 0.29
    assert parse_response(first + rest)[0] == 200


def test_crlf_mode(mock):
    raw = exchange(mock.port, request_bytes("POST", MESSAGES, {"model": "c", "stream": True},
                                            {"x-mock-frames": "2", "x-mock-crlf": "1"}))
    _, _, body = parse_response(raw)
    assert b"\r\n\r\n" in body
    assert body.count(b"\n") == body.count(b"\r\n")
    assert body.startswith(b"event: message_start\r\ndata: {")
    assert [e for e, _ in sse(body)][-1] == "message_stop"
    _, _, plain = parse_response(exchange(mock.port, request_bytes(
        "POST", MESSAGES, {"model": "c", "stream": True}, {"x-mock-frames": "2"})))
    assert b"\r" not in plain
    assert plain == body.replace(b"\r\n", b"\n")


def test_status_override_openai_and_anthropic_shapes(mock):
    status, hdrs, body = post_json(mock.port, CHAT, {"model": "m", "stream": True},
                                   {"x-mock-status": "500"})
    assert status == 500 and hdrs["content-type"] == "application/json"
    assert body["error"]["type"] == "server_error"
    assert "500" in body["error"]["message"]
    status, hdrs, body = post_json(mock.port, MESSAGES, {"model": "c"}, {"x-mock-status": "429"})
    assert status == 429 and hdrs["retry-after"] == "1"
    assert body == {"type": "error", "error": {"type": "rate_limit_error",
                                               "message": "mock error (x-mock-status: 429)"}}
    status, _, body = post_json(mock.port, CHAT, {"model": "m"}, {"x-mock-status": "401"})
    assert status == 401 and body["error"]["code"] == "invalid_api_key"


def test_invalid_override_and_body_get_400(mock):
    status, _, body = post_json(mock.port, CHAT, {"model": "m"}, {"x-mock-frames": "ten"})
    assert status == 400 and "x-mock-frames" in body["error"]["message"]
    status, _, body = post_json(mock.port, CHAT, {"model": "m"}, {"x-mock-status": "200"})
    assert status == 400 and "x-mock-status" in body["error"]["message"]
    status, _, body = call(mock.port, "POST", MESSAGES, b"{not json")
    assert status == 400 and json.loads(body)["type"] == "error"


def test_disconnect_after_frames_truncates_the_stream(mock):
    raw = exchange(mock.port, request_bytes("POST", CHAT, {"model": "m", "stream": True}, {
        "x-mock-frames": "10", "x-mock-disconnect-after": "3"}, close=False))
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
    assert raw.count(b'"content":"mock') == 3
    assert b"[DONE]" not in raw and b'"finish_reason":"stop"' not in raw
    assert not raw.endswith(b"0\r\n\r\n")
    with pytest.raises(http.client.IncompleteRead):
        parse_response(raw)
    wait_for(lambda: stats(mock.port)["forced_disconnects"] >= 1, "the disconnect counter")


def test_disconnect_after_bytes_truncates_a_unary_body(mock):
    raw = exchange(mock.port, request_bytes("POST", CHAT, {"model": "m"},
                                            {"x-mock-disconnect-after": "100"}, close=False))
    head, _, body = raw.partition(b"\r\n\r\n")
    length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0]
                 .split(b":")[1])
    assert len(body) == 100 < length


def test_body_bytes_pads_unary_bodies(mock):
    for api, want in ((CHAT, 1024), (CHAT, 200_000), (MESSAGES, 20_000)):
        status, _, raw = call(mock.port, "POST", api, {"model": "m"}, {"x-mock-body-bytes": str(want)})
        assert status == 200
        assert abs(len(raw) - want) <= 16, (api, len(raw))
        body = json.loads(raw)
        assert "usage" in body
    # Smaller than the natural size: the natural body, unpadded.
    _, _, raw = call(mock.port, "POST", CHAT, {"model": "m"}, {"x-mock-body-bytes": "10"})
    assert b"xxx" not in raw


def test_identical_requests_give_identical_bytes(mock):
    req = {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True},
           "messages": [{"role": "user", "content": "hi"}]}
    first = exchange(mock.port, request_bytes("POST", CHAT, req))
    time.sleep(1.1)  # a clock in the output would show
    second = exchange(mock.port, request_bytes("POST", CHAT, req, {"Authorization": "Bearer other"}))
    assert first == second and b"[DONE]" in first
    unary = [exchange(mock.port, request_bytes("POST", MESSAGES, {"model": "c"})) for _ in range(2)]
    assert unary[0] == unary[1]
    other = exchange(mock.port, request_bytes("POST", CHAT, dict(req, model="gpt-4o-mini")))
    assert other != first


def test_request_log_records_what_arrived(mock):
    assert call(mock.port, "DELETE", "/_mock/requests")[0] == 200
    body = b'{"model":"m","messages":[{"role":"user","content":"caf\xc3\xa9"}]}'
    status, _, _ = call(mock.port, "POST", CHAT + "?trace=1", body, {
        "Authorization": "Bearer sk-upstream", "Accept-Encoding": "gzip", "X-Empty": ""})
    assert status == 200
    big = json.dumps({"model": "m", "pad": "y" * 10000}).encode()
    call(mock.port, "POST", CHAT, big)
    log = json.loads(call(mock.port, "GET", "/_mock/requests")[2])
    assert len(log) == 2
    rec, rec_big = log
    assert rec["method"] == "POST" and rec["path"] == CHAT + "?trace=1"
    assert ["Authorization", "Bearer sk-upstream"] in rec["headers"]
    assert ["Accept-Encoding", "gzip"] in rec["headers"]
    assert ["X-Empty", ""] in rec["headers"]
    assert rec["body_len"] == len(body)
    assert rec["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert rec["body"] == body.decode()
    assert rec_big["body"] is None and rec_big["body_len"] == len(big)
    assert rec_big["body_sha256"] == hashlib.sha256(big).hexdigest()
    assert rec_big["seq"] == rec["seq"] + 1
    cleared = json.loads(call(mock.port, "DELETE", "/_mock/requests")[2])
    assert cleared == {"cleared": 2}
    assert json.loads(call(mock.port, "GET", "/_mock/requests")[2]) == []


def test_request_log_keeps_the_last_64(mock):
    call(mock.port, "DELETE", "/_mock/requests")
    conn = http.client.HTTPConnection("127.0.0.1", mock.port, timeout=TIMEOUT)
    for i in range(70):
        conn.request("GET", f"/v1/models?i={i}")
        conn.getresponse().read()
    conn.close()
    log = json.loads(call(mock.port, "GET", "/_mock/requests")[2])
    assert [r["path"] for r in log] == [f"/v1/models?i={i}" for i in range(6, 70)]


def test_keep_alive_serves_two_requests_on_one_connection(mock):
    before = stats(mock.port)["connections_total"]
    conn = http.client.HTTPConnection("127.0.0.1", mock.port, timeout=TIMEOUT)
    conn.request("POST", CHAT, body=b'{"model":"a","stream":true}')
    r1 = conn.getresponse()
    b1 = r1.read()
    sock = conn.sock
    conn.request("POST", MESSAGES, body=b'{"model":"b"}')
    r2 = conn.getresponse()
    b2 = json.loads(r2.read())
    assert conn.sock is sock
    conn.close()
    assert r1.status == r2.status == 200
    assert b1.endswith(b"data: [DONE]\n\n") and b2["model"] == "b"
    # Our connection plus the one that asks for the stats.
    assert stats(mock.port)["connections_total"] == before + 2


def test_pipelined_requests_are_answered_in_order(mock):
    data = (request_bytes("POST", CHAT, {"model": "one"}, {"x-mock-frame-delay-ms": "0"}, close=False)
            + request_bytes("POST", MESSAGES, {"model": "two", "stream": True},
                            {"x-mock-ttfb-ms": "100"}, close=False)
            + request_bytes("GET", "/v1/models", close=False)
            + request_bytes("POST", CHAT, {"model": "four"}))
    raw = exchange(mock.port, data)
    (s1, _, b1), (s2, _, b2), (s3, _, b3), (s4, h4, b4) = parse_responses(raw, 4)
    assert (s1, s2, s3, s4) == (200, 200, 200, 200)
    assert json.loads(b1)["model"] == "one"
    assert sse(b2)[-1][0] == "message_stop"
    assert json.loads(b3)["object"] == "list"
    assert json.loads(b4)["model"] == "four" and h4["connection"] == "close"


def test_connection_close_is_honoured(mock):
    raw = exchange(mock.port, request_bytes("POST", CHAT, {"model": "m"})
                   + request_bytes("POST", CHAT, {"model": "ignored"}))
    assert raw.count(b"HTTP/1.1 ") == 1
    status, hdrs, _ = parse_response(raw)
    assert status == 200 and hdrs["connection"] == "close"


def test_malformed_request_gets_400_and_close(mock):
    raw = exchange(mock.port, b"GARBAGE\x01 / HTTP/1.1\r\n\r\n"
                   + request_bytes("GET", "/v1/models"))
    assert raw.count(b"HTTP/1.1 ") == 1
    status, hdrs, body = parse_response(raw)
    assert status == 400 and hdrs["connection"] == "close"
    assert "malformed request" in json.loads(body)["error"]["message"]
    # Conflicting framing headers are malformed too.
    raw = exchange(mock.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                   b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert parse_response(raw)[0] == 400


def test_request_bodies_chunked_large_and_too_large(mock):
    call(mock.port, "DELETE", "/_mock/requests")
    body = json.dumps({"model": "chunky", "pad": "z" * (3 << 20)}).encode()
    with connect(mock.port) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        for i in range(0, len(body), 100_000):
            part = body[i:i + 100_000]
            s.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
        s.sendall(b"0\r\n\r\n")
        status, _, resp = parse_response(read_all(s))
    assert status == 200 and json.loads(resp)["model"] == "chunky"
    rec = json.loads(call(mock.port, "GET", "/_mock/requests")[2])[-1]
    assert rec["body_len"] == len(body)
    assert rec["body_sha256"] == hashlib.sha256(body).hexdigest()
    # Announced too large: refused before the body is read.
    with connect(mock.port) as s:
        s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000\r\n\r\n")
        status, hdrs, resp = parse_response(read_all(s))
    assert status == 413 and json.loads(resp)["error"]["type"] == "request_too_large"
    # Chunked past the limit: refused once it gets there.
    chunk = b"a" * (1 << 20)
    with connect(mock.port) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(9):
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert parse_response(read_all(s))[0] == 413


def test_expect_100_continue(mock):
    body = b'{"model":"patient"}'
    with connect(mock.port) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body))
        interim = s.recv(25)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        status, _, resp = parse_response(read_all(s))
    assert status == 200 and json.loads(resp)["model"] == "patient"


def test_http10_stream_is_close_delimited(mock):
    raw = exchange(mock.port, request_bytes("POST", CHAT, {"model": "m", "stream": True},
                                            {"x-mock-frames": "2"}, close=False, version="1.0"))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in head and b"Connection: close" in head
    assert body.endswith(b"data: [DONE]\n\n")


def test_models_404_and_head(mock):
    status, _, body = call(mock.port, "GET", "/v1/models")
    models = json.loads(body)
    assert status == 200 and models["object"] == "list"
    assert "mock-model" in [m["id"] for m in models["data"]]
    status, _, body = call(mock.port, "GET", "/v2/nothing")
    assert status == 404 and json.loads(body)["error"]["type"] == "invalid_request_error"
    status, _, body = call(mock.port, "GET", CHAT)
    assert status == 404
    status, hdrs, body = call(mock.port, "HEAD", "/v1/models")
    assert status == 200 and body == b"" and int(hdrs["content-length"]) > 0


def test_stats_count_requests_streams_and_bytes(mock):
    before = stats(mock.port)
    post_json(mock.port, CHAT, {"model": "m"})
    call(mock.port, "POST", MESSAGES, {"model": "m", "stream": True})
    after = stats(mock.port)
    assert after["requests"] == before["requests"] + 2
    assert after["streams"] == before["streams"] + 1
    assert after["bytes_out"] > before["bytes_out"] + 500


def test_client_abort_mid_stream_frees_the_connection(mock):
    base = stats(mock.port)
    s = connect(mock.port)
    s.sendall(request_bytes("POST", CHAT, {"model": "m", "stream": True},
                            {"x-mock-frames": "100000", "x-mock-frame-delay-ms": "5"}, close=False))
    assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
    s.close()
    wait_for(lambda: stats(mock.port)["client_aborts"] == base["client_aborts"] + 1, "the abort")
    assert stats(mock.port)["connections_open"] == base["connections_open"]
    assert post_json(mock.port, CHAT, {"model": "still-up"})[2]["model"] == "still-up"


def test_slow_reader_is_held_back_not_buffered(mock):
    base = stats(mock.port)["bytes_out"]
    s = connect(mock.port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(request_bytes("POST", CHAT, {"model": "m", "stream": True},
                            {"x-mock-frames": "1000000"}, close=False))
    time.sleep(1.0)
    # A million frames is ~250 MB: production waits for the reader instead.
    now = stats(mock.port)
    assert now["output_buffered"] < 1 << 20
    assert now["bytes_out"] - base < 16 << 20
    s.close()
    wait_for(lambda: stats(mock.port)["connections_open"] == 1, "the slow reader's cleanup")


def test_many_concurrent_held_streams(mock):
    count = 200 if VALGRIND else 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 200), hard))
    base = stats(mock.port)["streams"]
    req = request_bytes("POST", CHAT, {"model": "m", "stream": True},
                        {"x-mock-frames": "3", "x-mock-frame-delay-ms": "300"})
    with held_streams(mock.port, count, req) as socks:
        wait_for(lambda: stats(mock.port)["connections_open"] >= count + 1, "all streams held")
        bodies = [read_all(s) for s in socks]
    assert all(b.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") for b in bodies)
    assert len(set(bodies)) == 1
    assert stats(mock.port)["streams"] == base + count


def test_end_delay_holds_the_end_of_a_stream(mock):
    """end-delay-ms: the last event goes out at once, the body's end (the final chunk)
    that long after it."""
    s = connect(mock.port)
    s.sendall(request_bytes("POST", "/v1/responses", {"model": "m", "stream": True},
                            {"x-mock-frames": "2", "x-mock-end-delay-ms": "700"}))
    data, t0 = b"", time.monotonic()
    while b"response.completed" not in data or not data.endswith(b"\n\n\r\n"):
        got = s.recv(65536)
        assert got, data
        data += got
    got_last = time.monotonic() - t0
    rest = read_all(s)
    assert rest == b"0\r\n\r\n" and time.monotonic() - t0 >= 0.7, rest
    assert got_last < 0.7, got_last


def test_answering_counts_requests_in_flight(mock):
    """answering is the API requests read and not yet answered, answering_max its
    peak: N held streams at once make both N; an answer that completes on a kept-open
    connection, or a client that leaves mid-stream, takes its request out again."""
    count = 6
    assert (stats(mock.port)["answering"], stats(mock.port)["answering_max"]) == (0, 0)
    req = request_bytes("POST", CHAT, {"model": "m", "stream": True},
                        {"x-mock-frames": "8", "x-mock-frame-delay-ms": "250"}, close=False)
    with held_streams(mock.port, count, req) as socks:
        wait_for(lambda: stats(mock.port)["answering"] == count, "all streams answering")
        assert stats(mock.port)["answering_max"] == count   # /_mock/stats is not counted
        bodies = [read_response(s) for s in socks]
        assert all(b.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") for b in bodies)
        # answered, the connections still open and idle
        now = stats(mock.port)
        assert (now["answering"], now["answering_max"]) == (0, count), now
        assert now["connections_open"] == count + 1
    aborts = stats(mock.port)["client_aborts"]
    s = connect(mock.port)
    s.sendall(request_bytes("POST", CHAT, {"model": "m", "stream": True},
                            {"x-mock-frames": "100000", "x-mock-frame-delay-ms": "5"},
                            close=False))
    assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
    assert stats(mock.port)["answering"] == 1
    s.close()
    wait_for(lambda: stats(mock.port)["client_aborts"] == aborts + 1, "the abort")
    now = stats(mock.port)
    assert (now["answering"], now["answering_max"]) == (0, count), now
