"""The official OpenAI and Anthropic SDKs (Node, tests/sdk) against the real gateway:
they accept what it sends, amended OpenAI streams above all, and every request they make
is a row with the usage the mock upstream reported."""
import json
import shutil
import subprocess

import pytest

from conftest import ROOT
from readme_clients import base_url
from stack import store  # noqa: F401  (test_accounting's stack takes it)
from test_accounting import stack  # noqa: F401  (the fixture, reused)

SDK_DIR = ROOT / "tests" / "sdk"


def run_check(stack):
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH (run `make deps` as root)")
    for pkg in ("openai", "@anthropic-ai/sdk"):
        if not (SDK_DIR / "node_modules" / pkg / "package.json").is_file():
            pytest.fail(f"{SDK_DIR}/node_modules/{pkg} is missing: run `make deps` "
                        "(or `npm ci` in tests/sdk)")
    # README.md's base URLs (Clients), for Node; its Python ones are the same
    addr = f"127.0.0.1:{stack.gw_port}"
    urls = [base_url(f"{api}-node", addr) for api in ("openai", "anthropic")]
    assert urls == [base_url(f"{api}-python", addr) for api in ("openai", "anthropic")]
    r = subprocess.run([node, "check.mjs", *urls, stack.key],
                       cwd=SDK_DIR, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"check.mjs -> {r.returncode}\n{r.stderr}\n{stack.logs()}"
    return json.loads(r.stdout)


def knob_headers(knobs):
    return {f"x-mock-{k}": str(v) for k, v in knobs.items()}


def sse_chunks(body):
    """The JSON events of an OpenAI stream, without [DONE]."""
    events = body.replace(b"\r\n", b"\n").split(b"\n\n")
    return [json.loads(e[len(b"data: "):]) for e in events
            if e.startswith(b"data: ") and e != b"data: [DONE]"]


def test_official_sdks_accept_the_gateway(stack):
    out = run_check(stack)
    amended, asked = out["openai_stream_amended"], out["openai_stream_usage"]

    # Amended stream: the upstream got include_usage, the SDK got the text the upstream
    # sent, chunk for chunk, without the usage event (the others say "usage":null).
    sent = [rec["body"] for rec in stack.mock_requests()
            if {k.lower(): v for k, v in rec["headers"]}.get("x-request-id") == amended["id"]]
    assert len(sent) == 1
    sent = sent[0]
    assert json.loads(sent)["stream_options"] == {"include_usage": True}
    _, _, upstream = stack.direct("POST", "/v1/chat/completions", sent.encode(),
                                  headers=knob_headers(amended["knobs"]))
    chunks = sse_chunks(upstream)
    assert sum(c["usage"] is not None for c in chunks) == 1
    assert amended["text"] == "".join(c["choices"][0]["delta"].get("content", "")
                                      for c in chunks if c["choices"])
    assert amended["chunks"] == len(chunks) - 1
    assert amended["usage_set"] == 0 and amended["finish_reason"] == "stop"

    # The client that asked for usage gets it in its final chunk, once.
    k = asked["knobs"]
    assert asked["usage_set"] == 1 and asked["usage"] == {
        "prompt_tokens": k["prompt-tokens"], "completion_tokens": k["completion-tokens"],
        "total_tokens": k["prompt-tokens"] + k["completion-tokens"],
        "prompt_tokens_details": {"cached_tokens": k["cached-tokens"]}}
    assert asked["text"] == "".join(f"mock{i} " for i in range(k["frames"]))

    k = out["openai_unary_json_query"]["knobs"]
    assert out["openai_unary_json_query"]["usage"] == {
        "prompt_tokens": k["prompt-tokens"], "completion_tokens": k["completion-tokens"],
        "total_tokens": k["prompt-tokens"] + k["completion-tokens"],
        "prompt_tokens_details": {"cached_tokens": k["cached-tokens"]},
        "completion_tokens_details": {"reasoning_tokens": k["reasoning-tokens"]}}
    k = out["openai_unary_capture"]["knobs"]
    assert out["openai_unary_capture"]["usage"] == {
        "prompt_tokens": k["prompt-tokens"], "completion_tokens": k["completion-tokens"],
        "total_tokens": k["prompt-tokens"] + k["completion-tokens"]}

    k = out["anthropic_stream"]["knobs"]
    assert out["anthropic_stream"]["usage"] == {
        "input_tokens": k["prompt-tokens"], "output_tokens": k["completion-tokens"],
        "cache_read_input_tokens": k["cached-tokens"],
        "cache_creation_input_tokens": k["cache-creation-tokens"]}
    assert out["anthropic_stream"]["text"] == "".join(f"mock{i} " for i in range(k["frames"]))
    k = out["anthropic_unary"]["knobs"]
    assert out["anthropic_unary"]["usage"] == {
        "input_tokens": k["prompt-tokens"], "output_tokens": k["completion-tokens"]}

    # The Responses API: the SDK reads the response and the stream's terminal event.
    k = out["openai_responses_unary"]["knobs"]
    assert out["openai_responses_unary"]["text"] == "".join(f"mock{i} " for i in range(10))
    assert out["openai_responses_unary"]["usage"] == {
        "input_tokens": k["prompt-tokens"], "input_tokens_details": {"cached_tokens": k["cached-tokens"]},
        "output_tokens": k["completion-tokens"],
        "output_tokens_details": {"reasoning_tokens": k["reasoning-tokens"]},
        "total_tokens": k["prompt-tokens"] + k["completion-tokens"]}
    streamed = out["openai_responses_stream"]
    assert streamed["text"] == "".join(f"mock{i} " for i in range(6))
    assert streamed["terminal"] == "response.incomplete" and streamed["events"] == 6 + 8
    assert streamed["usage"]["input_tokens"] == 301

    # The rows: (prompt, completion, cached, cache write, reasoning, usage_source, stream).
    # Anthropic's prompt_tokens is the whole input: fresh + cache read + cache write.
    expected = {
        "openai_stream_amended": (33, 50, None, None, None, "stream", 1),
        "openai_stream_usage": (12, 5, 4, None, None, "stream", 1),
        "openai_unary_json_query": (1000, 500, 200, None, 50, "response", 0),
        "openai_unary_capture": (1001, 501, None, None, None, "response", 0),
        "anthropic_stream": (3100, 40, 1000, 2000, None, "stream", 1),
        "anthropic_unary": (7, 9, None, None, None, "response", 0),
        "openai_responses_unary": (300, 30, 100, None, 10, "response", 0),
        "openai_responses_stream": (301, 31, 101, None, 0, "stream", 1),
    }
    for case, want in expected.items():
        r = stack.row(out[case]["id"])
        got = (r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"],
               r["cache_creation_tokens"], r["reasoning_tokens"], r["usage_source"],
               r["stream"])
        assert got == want, case
        assert (r["outcome"], r["status"], r["verdict"]) == ("complete", 200, "allow"), case
