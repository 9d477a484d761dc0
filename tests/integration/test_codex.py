"""Codex CLI's requests: a Responses create with a ~1.3 KB request head and a ~40 KB body
whose tools, past HAProxy's first frame, offer a web search in every request. The demo
prices one, so Codex is served out of the box; a key that may not use it gets the
gateway's own 400 on every HAProxy version, whatever the size of the head (judged whole
on 3.4, refused past the cut by the capture filter before), and its row says so."""
import json
import re
import urllib.request

import pytest

from conftest import JUDGED_WHOLE, free_port
from stack import Stack
from test_run import ctrl_c, start_run

RESPONSES = "/v1/responses"


def codex_request(model="mock-gpt"):
    """Headers and body shaped as codex exec sends them (instructions first, tools last)."""
    headers = {"User-Agent": "codex_cli_rs/0.46.0 (Debian 12.0.0; x86_64) xterm-256color",
               "originator": "codex_cli_rs", "version": "0.46.0",
               "session_id": "0199f0f1-7a3b-7c41-9a55-2b8b6f3c1d2e",
               "Accept": "text/event-stream", "OpenAI-Beta": "responses=experimental",
               "x-codex-turn-metadata": "m" * 1000}
    body = {"model": model, "instructions": "You are Codex. " + "x" * 40000,
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "say hi"}]}],
            "tools": [{"type": "function", "name": "shell", "description": "Runs a command",
                       "strict": False, "parameters": {"type": "object", "properties": {
                           "command": {"type": "array", "items": {"type": "string"}}}}},
                      {"type": "web_search"}],
            "tool_choice": "auto", "parallel_tool_calls": False, "store": False,
            "stream": True, "include": []}
    return headers, json.dumps(body).encode()


def request_head_size(port, headers, body, key):
    """The bytes of the request head as http.client sends it."""
    lines = [f"POST {RESPONSES} HTTP/1.1", f"Host: 127.0.0.1:{port}",
             "Accept-Encoding: identity", f"Content-Length: {len(body)}",
             "Content-Type: application/json", f"Authorization: Bearer {key}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return len("\r\n".join(lines)) + 4


def long_bodies(stack, result):
    text = urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics",
                                  timeout=5).read().decode()
    return int(re.search(rf'^tally_long_bodies_total{{result="{result}"}} (\d+)$', text,
                         re.M).group(1))


@pytest.fixture
def stack(tmp_path):
    s = Stack(tmp_path)
    try:
        yield s.start()
    finally:
        s.close()


def test_a_tool_the_key_may_not_use_is_the_gateways_400_whatever_the_head(stack):
    """mock-gpt has no web search price (Stack's seed): Codex's request is refused."""
    headers, body = codex_request()
    assert 1200 < request_head_size(stack.gw_port, headers, body, stack.key) < 1500
    before = long_bodies(stack, "whole") if JUDGED_WHOLE else 0
    stack.mock_clear()
    status, h, answer = stack.gateway("POST", RESPONSES, body, key=stack.key, headers=headers)
    assert status == 400, answer[:300]
    assert h["content-type"] == "application/json"
    err = json.loads(answer)
    assert err["error"]["code"] == "unsupported_value", err
    r = stack.row(h["x-request-id"])
    assert (r["verdict"], r["outcome"], r["model_requested"]) == \
        ("unsupported_value", "denied", "mock-gpt")
    if JUDGED_WHOLE:
        # the declared length starts the pieces: judged whole, never sent upstream
        assert long_bodies(stack, "whole") == before + 1
        assert stack.mock_requests() == []


def test_codex_is_served_on_the_demo(tmp_path):
    """make run's seed prices a web search on mock-gpt, so Codex's request goes through."""
    ports = tuple(free_port() for _ in range(6))
    p, text = start_run(tmp_path, ports)
    try:
        key = re.search(r"demo key: (tly_\S+)", text).group(1)
        s = Stack(tmp_path)
        s.gw_port = ports[0]
        headers, body = codex_request()
        status, h, answer = s.gateway("POST", RESPONSES, body, key=key, headers=headers)
        assert status == 200, answer[:300]
        assert b"response.completed" in answer
        assert "price a web search" in text
    finally:
        ctrl_c(p)
