"""What one key holder can make the gateway hold, through the real HAProxy and agent: a
key's long bodies in assembly take at most its share of the agent's long-body memory
(HAProxy 3.4, the piece path), and request bodies above the cap are refused with 413 in
their API's error shape, with or without a Content-Length."""
import http.client
import json
import re
import socket
import time
import urllib.request

import pytest

from conftest import JUDGED_WHOLE
from stack import Stack

CHAT = "/v1/chat/completions"
# --long-body-memory for this module: 8 bodies in HAProxy's 2 MiB large buffers, so
# that a few stalled connections fill it; the per-key share stays the default (8 MiB).
MEMORY = 16 << 20
KEY_SHARE = 8 << 20
LARGE_BUFFER = 2 << 20
# The body caps of the capped stack: HAProxy's (TALLY_MAX_BODY) above the agent's
# (--max-body), so that each is seen refusing.
HAPROXY_CAP = 200000
AGENT_CAP = 100000


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("bounds"), agent_args=["--long-body-memory", str(MEMORY)])
    try:
        s.start()
        yield s
    finally:
        s.close()


def long_prompt(size, model):
    """A chat body of exactly size bytes, its model last (the OpenAI Python SDK's order):
    judged on its first frame, a key without a default model gets 400 model_required."""
    start = json.dumps({"messages": [{"role": "user", "content": ""}]})
    rest = json.dumps({"model": model})[1:]
    pad = size - len(start) - len(rest) - 1
    return (start[:-4] + "x" * pad + '"}]' + ", " + rest).encode()


def long_bodies(stack, result):
    text = urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics",
                                  timeout=5).read().decode()
    return int(re.search(rf'^tally_long_bodies_total{{result="{result}"}} (\d+)$', text,
                         re.M).group(1))


def wait_for(predicate, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def stall(stack, key, declared, sent):
    """A connection that announces a body of declared bytes and sends only sent of them."""
    sock = socket.create_connection(("127.0.0.1", stack.gw_port), timeout=10)
    sock.sendall((f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n").encode()
                 + b'{"messages":[{"role":"user","content":"' + b"x" * sent)
    return sock


@pytest.mark.skipif(not JUDGED_WHOLE, reason="long bodies go in pieces on HAProxy 3.4+ only")
def test_one_key_holds_its_share_of_the_long_body_memory(stack):
    """A key holder stalls more long bodies than the agent's whole long-body memory
    holds: it keeps its share (--long-body-key-memory), its further bodies are judged on
    their first frame, and another key's long prompt is still judged whole."""
    hog = stack.create_key("bounds-hog")
    other = stack.create_key("bounds-other")
    assert wait_for(lambda: stack.gateway("POST", CHAT, long_prompt(20000, "mock-gpt"),
                                          key=other)[0] == 200, 3)
    refused = long_bodies(stack, "refused")
    share = KEY_SHARE // LARGE_BUFFER
    stalled = [stall(stack, hog, 1000000, 20000) for _ in range(MEMORY // LARGE_BUFFER + 2)]
    try:
        # every body past the key's share is refused room, none of the others is
        assert wait_for(lambda: long_bodies(stack, "refused") - refused >= 2, 10)
        time.sleep(0.5)
        whole = long_bodies(stack, "whole")
        status, _, got = stack.gateway("POST", CHAT, long_prompt(40000, "mock-gpt"), key=other)
        assert status == 200, got
        assert long_bodies(stack, "whole") == whole + 1
        assert long_bodies(stack, "refused") - refused == len(stalled) - share
        # the hog's own next long body meets the first-frame rules: no model before the cut
        status, _, got = stack.gateway("POST", CHAT, long_prompt(40000, "mock-gpt"), key=hog)
        assert status == 400 and json.loads(got)["error"]["code"] == "model_required", got
    finally:
        for sock in stalled:
            sock.close()


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("capped"), agent_args=["--max-body", str(AGENT_CAP)],
              haproxy_env={"TALLY_MAX_BODY": str(HAPROXY_CAP)})
    try:
        s.start()
        yield s
    finally:
        s.close()


def send_chunked(stack, path, body, key, step=16384):
    """POSTs body chunked (no Content-Length); returns (status, headers, answer). The
    gateway may answer before the body ended: what it said is read all the same."""
    sock = socket.create_connection(("127.0.0.1", stack.gw_port), timeout=20)
    try:
        sock.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
        try:
            for at in range(0, len(body), step):
                chunk = body[at:at + step]
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        sock.close()


def messages_body(size):
    """An Anthropic body of exactly size bytes, model first."""
    start = json.dumps({"model": "mock-claude", "max_tokens": 5,
                        "messages": [{"role": "user", "content": ""}]})
    return (start[:-4] + "x" * (size - len(start)) + start[-4:]).encode()


def assert_too_large(status, headers, answer, path, cap_text=None):
    assert status == 413, answer[:300]
    assert headers["content-type"].startswith("application/json")
    err = json.loads(answer)
    if path == "/v1/messages":
        assert err["type"] == "error" and err["error"]["type"] == "request_too_large", err
        text = err["error"]["message"]
    else:
        assert err["error"]["code"] == "body_too_large", err
        assert err["error"]["type"] == "invalid_request_error"
        text = err["error"]["message"]
    assert "larger than this gateway accepts" in text
    if cap_text:
        assert cap_text in text


@pytest.mark.parametrize("path", [CHAT, "/v1/messages"])
def test_request_bodies_above_the_cap_are_refused(capped, path):
    """HAProxy refuses a body whose Content-Length passes TALLY_MAX_BODY before anyone
    reads it, and the capture filter one without a Content-Length (chunked) once it
    passes it; the agent refuses one above its own --max-body. Each is a 413 in its
    API's error shape, and each is one row; bodies under the caps are served."""
    make = (lambda n: long_prompt(n, "mock-gpt")) if path == CHAT else messages_body
    big = make(HAPROXY_CAP + 1000)
    assert len(big) == HAPROXY_CAP + 1000
    # announced: HAProxy's rule, no decision asked for
    status, h, got = capped.gateway("POST", path, big, key=capped.key)
    assert_too_large(status, h, got, path)
    r = capped.row(h["x-request-id"])
    assert (r["status"], r["outcome"], r["verdict"]) == (413, "gateway_rejected", None), r
    # not announced: the capture filter counts it as it passes
    status, h, got = send_chunked(capped, path, big, capped.key)
    assert_too_large(status, h, got, path)
    assert capped.row(h["x-request-id"])["status"] == 413
    # under HAProxy's cap, above the agent's: the agent's verdict
    mid = make(AGENT_CAP + 1000)
    status, h, got = capped.gateway("POST", path, mid, key=capped.key)
    assert_too_large(status, h, got, path, f"({AGENT_CAP} bytes)")
    r = capped.row(h["x-request-id"])
    assert (r["status"], r["verdict"], r["outcome"]) == (413, "body_too_large", "denied"), r
    # at the caps: served, whole
    ok = make(AGENT_CAP)
    status, h, got = capped.gateway("POST", path, ok, key=capped.key)
    assert status == 200, got[:300]
    status, h, got = send_chunked(capped, path, make(HAPROXY_CAP), capped.key)
    assert status == 200, got[:300]
