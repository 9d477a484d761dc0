"""Every error a client sees through the gateway is JSON in the shape of the API its path
belongs to (OpenAI's error object, Anthropic's {"type":"error",...}) and names the request
id, in the body as in X-Request-Id: HAProxy's own answers (tally.cfg's http-error lines)
for an upstream that is absent, crashes or stalls, and the fail policy's answer when
the agent is dead. Run on 2.6 and on 3.4 (TALLY_HAPROXY)."""
import json
import signal
import socket
import threading
import time

import pytest

from stack import Stack

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"


class ShortTimeouts(Stack):
    """The shipped tally.cfg but for 1 s server and request timeouts (10 min and 30 s
    as shipped): a stalled upstream or client is answered within the test."""

    def haproxy_cfg(self):
        text = super().haproxy_cfg().read_text()
        body_wait = "http-request wait-for-body time 30s\n"
        assert "timeout server 10m" in text and "timeout http-request 30s" in text
        assert body_wait in text
        text = text.replace("timeout server 10m", "timeout server 1s", 1)
        text = text.replace("timeout http-request 30s", "timeout http-request 1s", 1)
        text = text.replace(body_wait, body_wait.replace("30s", "1s"), 1)
        cfg = self.tmp / "haproxy-short.cfg"
        cfg.write_text(text)
        return cfg


@pytest.fixture
def stack(tmp_path):
    s = ShortTimeouts(tmp_path)
    try:
        yield s.start()
    finally:
        s.close()


@pytest.fixture
def failopen_stack(tmp_path):
    s = Stack(tmp_path, fail_policy="open")
    try:
        yield s.start()
    finally:
        s.close()


def chat():
    return {"model": "mock-gpt", "messages": [{"role": "user", "content": "hello"}]}


def message():
    return {"model": "mock-claude", "max_tokens": 10,
            "messages": [{"role": "user", "content": "hello"}]}


def openai_error(status, headers, body, want_status, code):
    """The body is OpenAI's error object, exactly, plus the request id."""
    assert status == want_status, body
    assert headers["content-type"] == "application/json", headers
    err = json.loads(body)
    assert set(err) == {"error", "request_id"}, err
    assert set(err["error"]) == {"message", "type", "param", "code"}, err
    assert err["error"]["code"] == code, err
    assert err["error"]["message"], err
    assert err["request_id"] == headers["x-request-id"], (err, headers)
    return err


def anthropic_error(status, headers, body, want_status, kind):
    """The body is Anthropic's error response, exactly, with its request_id."""
    assert status == want_status, body
    assert headers["content-type"] == "application/json", headers
    err = json.loads(body)
    assert set(err) == {"type", "error", "request_id"}, err
    assert err["type"] == "error"
    assert set(err["error"]) == {"type", "message"}, err
    assert err["error"]["type"] == kind, err
    assert err["error"]["message"], err
    assert err["request_id"] == headers["x-request-id"], (err, headers)
    return err


def test_absent_upstream_is_a_json_503_in_the_shape_of_the_path(stack):
    stack.procs.pop("mock").stop()   # nothing listens on the provider's address now
    err = openai_error(*stack.gateway("POST", CHAT, chat(), key=stack.key), 503,
                       "upstream_unavailable")
    assert stack.row(err["request_id"])["status"] == 503
    err = anthropic_error(*stack.gateway("POST", MESSAGES, message(), key=stack.key), 503,
                          "overloaded_error")
    assert stack.row(err["request_id"])["status"] == 503


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_upstream_crashing_before_its_answer_is_a_json_502(stack, path):
    result = {}
    body = chat() if path == CHAT else message()

    def send():
        result["r"] = stack.gateway("POST", path, body, key=stack.key,
                                    headers={"x-mock-ttfb-ms": "3000"})

    t = threading.Thread(target=send)
    t.start()
    deadline = time.time() + 5
    while not stack.mock_requests() and time.time() < deadline:
        time.sleep(0.02)
    assert stack.mock_requests(), "the request never reached the upstream"
    mock = stack.procs.pop("mock")
    mock.signal(signal.SIGKILL)
    mock.stop()
    t.join(10)
    if path == CHAT:
        err = openai_error(*result["r"], 502, "upstream_error")
    else:
        err = anthropic_error(*result["r"], 502, "api_error")
    assert stack.row(err["request_id"])["status"] == 502


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_upstream_silent_past_timeout_server_is_a_json_504(stack, path):
    body = chat() if path == CHAT else message()
    r = stack.gateway("POST", path, body, key=stack.key, headers={"x-mock-ttfb-ms": "3000"})
    if path == CHAT:
        err = openai_error(*r, 504, "upstream_timeout")
    else:
        err = anthropic_error(*r, 504, "timeout_error")
    assert stack.row(err["request_id"])["status"] == 504


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_body_that_never_arrives_is_a_json_408(stack, path):
    body = json.dumps(chat() if path == CHAT else message()).encode()
    with socket.create_connection(("127.0.0.1", stack.gw_port), timeout=10) as c:
        c.sendall(f"POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {stack.key}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  .encode() + body[:10])
        # Read by its length: 3.x keeps the connection open after the answer.
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += c.recv(65536)
        head, _, payload = answer.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        while len(payload) < int(headers["content-length"]):
            payload += c.recv(65536)
    status = int(lines[0].split()[1])
    if path == CHAT:
        openai_error(status, headers, payload, 408, "request_timeout")
    else:
        anthropic_error(status, headers, payload, 408, "timeout_error")


def test_dead_agent_fail_closed_is_a_json_503_in_the_shape_of_the_path(stack):
    stack.kill_agent(signal.SIGKILL)
    openai_error(*stack.gateway("POST", CHAT, chat(), key=stack.key), 503, "gateway_unavailable")
    anthropic_error(*stack.gateway("POST", MESSAGES, message(), key=stack.key), 503,
                    "overloaded_error")


def test_dead_agent_fail_open_forwards(failopen_stack):
    stack = failopen_stack
    stack.kill_agent(signal.SIGKILL)
    status, _, body = stack.gateway("POST", CHAT, chat(), key=stack.key)
    assert status == 200 and json.loads(body)["object"] == "chat.completion", body
    status, _, body = stack.gateway("POST", MESSAGES, message(), key=stack.key)
    assert status == 200 and json.loads(body)["type"] == "message", body
