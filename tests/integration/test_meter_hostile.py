"""Issue 28's reproductions through the real HAProxy, agent, mock and SQLite: a key holder
who writes the text that the Responses API echoes around its usage (tools, instructions,
text, metadata), or an upstream that formats its JSON otherwise, must not change what
the row bills. Each test asserts, against what the answer itself reported, the row's
exact usage, its model and its cost at the routed model's price, and that the client got
the upstream's bytes unchanged (the mock answers the same request directly, byte for
byte). Run on 2.6 and 3.4:
TALLY_HAPROXY=path/to/3.4/haproxy python3 -m pytest -q tests/integration/test_meter_hostile.py.

The capture keeps the first HEAD and last TAIL bytes of an answer (haproxy/capture.lua);
the paddings below are sized, or calibrated on the mock's own answer, so that the real
usage or model falls in the gap between them and echoed client text does not."""
import json
import time

import pytest

from stack import Stack

RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
CHAT = "/v1/chat/completions"
HEAD, TAIL = 1536, 3072   # haproxy/capture.lua's windows, which the paddings aim at

# micro-dollars per Mtok: "dear" is o1-pro's card, "cheap" 1500 times less.
PRICES = {"dear": (150000000, 600000000), "cheap": (100000, 400000),
          "mock-claude": (3000000, 15000000)}
REPORTED = {"x-mock-prompt-tokens": "50000", "x-mock-completion-tokens": "20000"}
FORGED = {"input_tokens": 1, "output_tokens": 1}


def cost(model, prompt, completion):
    inp, out = PRICES[model]
    return (prompt * inp + completion * out + 500000) // 1000000


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("hostile"))
    try:
        s.start()
        for model, (inp, out) in PRICES.items():
            provider = "mock-anthropic" if model == "mock-claude" else "mock-openai"
            s.tallyctl("model", "set", model, "--provider", provider,
                       "--input-micros", str(inp), "--output-micros", str(out))
        s.attacker = s.create_key("attacker")
        time.sleep(0.6)   # the agent reloads prices within its reload interval
        yield s
    finally:
        s.close()


def send(stack, path, body, knobs=None):
    """The request through the gateway and straight to the mock: (gateway's answer, its
    row). The client must get the upstream's answer byte for byte."""
    headers = dict(REPORTED, **(knobs or {}))
    status, h, got = stack.gateway("POST", path, body, key=stack.attacker, headers=headers)
    # (The mock's Responses ids mix in the X-Request-Id the gateway sends.)
    _, _, direct = stack.direct("POST", path, body,
                                headers=dict(headers, **{"X-Request-Id": h["x-request-id"]}))
    assert status == 200, got
    assert got == direct, "the gateway changed the answer"
    return got, stack.row(h["x-request-id"])


def billed(row):
    return {k: row[k] for k in ("model", "model_requested", "prompt_tokens",
                                "completion_tokens", "cost_micros", "usage_source")}


def exact(row, model, source, prompt=50000, completion=20000):
    """What the row must say: the reported counts, the routed model, its price."""
    return {"model": model, "model_requested": model, "prompt_tokens": prompt,
            "completion_tokens": completion, "cost_micros": cost(model, prompt, completion),
            "usage_source": source}


def sse_data(raw):
    """The JSON of every SSE event of a stream body."""
    out = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        lines = [x[5:].lstrip() for x in block.split("\n") if x.startswith("data:")]
        if lines and lines != ["[DONE]"]:
            out.append(json.loads("\n".join(lines)))
    return out


def reported(raw, stream):
    """The usage the answer reported at its documented place, read by structure."""
    if not stream:
        return json.loads(raw)["usage"]
    return [e for e in sse_data(raw) if e["type"] == "response.completed"][0]["response"]["usage"]


FORGED_TOOL = {"type": "function", "name": "lookup",
               "parameters": {"type": "object", "usage": FORGED}}
PAD_TOOL = {"type": "function", "name": "pad", "description": "d" * 1500,
            "parameters": {"type": "object"}}


def padding(n, size=500):
    return {f"k{i}": chr(ord("a") + i % 26) * size for i in range(n)}


# ---- 1. Forged usage in a tool's parameter schema ----

@pytest.mark.parametrize("meta", [6, 8])
def test_forged_usage_in_a_tool_schema_unary(stack, meta):
    """A tool's schema holding a raw "usage" object, a 1.5 KB tool description and
    500-character metadata values, on a unary /v1/responses without max_output_tokens:
    the row bills the answer's own usage (50,000 + 20,000), never the schema's 1 + 1."""
    body = {"model": "dear", "input": "hi", "tools": [FORGED_TOOL, PAD_TOOL],
            "metadata": padding(meta)}
    raw, row = send(stack, RESPONSES, body)
    assert b'"usage":{"input_tokens":1,"output_tokens":1}' in raw
    assert (reported(raw, False)["input_tokens"], reported(raw, False)["output_tokens"]) == \
        (50000, 20000)
    assert billed(row) == exact(row, "dear", "response")


def forged_stream_body(stack):
    """A stream request calibrated on the mock's own answer, as an attacker calibrates on
    one request: the instructions put the end of the forged tool at the end of the
    capture's head, and a metadata value puts "event:" at the start of its tail, so that
    read as one text across the gap the forged usage closes the terminal event; the real
    usage lies in the gap, 4 KB of metadata before the end."""
    body = {"model": "dear", "input": "hi", "stream": True, "instructions": "",
            "tools": [FORGED_TOOL, PAD_TOOL], "metadata": padding(8)}
    end = b'"usage":{"input_tokens":1,"output_tokens":1}}}'
    _, _, raw = stack.direct("POST", RESPONSES, body, headers=REPORTED)
    body["instructions"] = "i" * (HEAD - (raw.index(end) + len(end)))
    _, _, raw = stack.direct("POST", RESPONSES, body, headers=REPORTED)
    assert raw.index(end) + len(end) == HEAD
    # Spaces before it, which the reader skips, let the tail start a byte or three early
    # or late (the capture counts the stream a byte longer than its client gets).
    at, mark = len(raw) - TAIL - 3, "    event:"
    for k, v in body["metadata"].items():
        i = raw.rfind(f'"{k}":"{v}"'.encode())
        start = i + len(k) + 4
        if start <= at < start + len(v) - len(mark):
            body["metadata"][k] = v[:at - start] + mark + v[at - start + len(mark):]
            break
    _, _, raw = stack.direct("POST", RESPONSES, body, headers=REPORTED)
    assert raw[len(raw) - TAIL - 3:].startswith(mark.encode()), "calibration failed"
    return body


def test_forged_usage_in_a_tool_schema_stream(stack):
    """The same attack on a stream, its paddings calibrated: the row bills the terminal
    event's usage. (Read as one text, the calibrated head and tail give spoa/usage.c of
    31b7907 the forged 1 + 1; through HAProxy the capture's tail there starts a byte
    early or late, and the row got no usage at all, only an estimate.)"""
    raw, row = send(stack, RESPONSES, forged_stream_body(stack))
    assert (reported(raw, True)["input_tokens"], reported(raw, True)["output_tokens"]) == \
        (50000, 20000)
    assert billed(row) == exact(row, "dear", "stream")


# ---- 2. Another model's name in the metadata ----

@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_metadata_model_does_not_price_the_row(stack, stream):
    """"metadata": {"model": "cheap"} with 2 KB of instructions (the real model out of the
    head) and a long answer (out of the tail): the row is priced at the routed model's
    card and names it, not cheap's (1500 times less)."""
    body = {"model": "dear", "input": "hi", "instructions": "i" * 2000,
            "metadata": {"model": "cheap"}, "stream": stream}
    raw, row = send(stack, RESPONSES, body, {"x-mock-frames": "400"})
    assert reported(raw, stream)["input_tokens"] == 50000
    assert billed(row) == exact(row, "dear", "stream" if stream else "response")


# ---- 4. Usage pushed out of the tail ----

@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_usage_followed_by_16_metadata_values(stack, stream):
    """16 x 500-character metadata values after the usage (as many as OpenAI takes): the
    usage is still read exactly, never replaced by an estimate."""
    body = {"model": "dear", "input": "hi", "metadata": padding(16), "stream": stream}
    raw, row = send(stack, RESPONSES, body)
    assert reported(raw, stream)["output_tokens"] == 20000
    assert billed(row) == exact(row, "dear", "stream" if stream else "response")
    assert row["estimated_tokens"] is None


# ---- 5. An answer that outgrows json_query's buffer ----

def test_bounded_request_whose_echo_outgrows_the_buffer(stack):
    """max_output_tokens 100 bounds the output, but 13 KB of echoed instructions and the
    output make an answer longer than the buffer json_query reads: the usage is still
    read exactly."""
    body = {"model": "dear", "input": "hi", "max_output_tokens": 100,
            "instructions": "i" * 13000}
    raw, row = send(stack, RESPONSES, body, {"x-mock-frames": "800"})
    assert len(raw) > 16384   # tune.bufsize: json_query's buffer before 3.4
    assert billed(row) == exact(row, "dear", "response")


# ---- 6. JSON formatted otherwise ----

def test_anthropic_stream_with_spaces_keeps_its_prompt_tokens(stack):
    """An Anthropic-compatible server that writes "input_tokens": 10 (a space after the
    colon, as Python's json.dumps does): message_start's input tokens are billed."""
    body = {"model": "mock-claude", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    raw, row = send(stack, MESSAGES, body, {"x-mock-pretty": "1"})
    assert b'"usage": {"input_tokens": 50000, "output_tokens": 1}' in raw
    assert billed(row) == exact(row, "mock-claude", "stream")


@pytest.mark.parametrize("path,body", [
    (CHAT, {"model": "dear", "messages": [], "max_tokens": 100}),
    (CHAT, {"model": "dear", "messages": [], "stream": True,
            "stream_options": {"include_usage": True}}),
    (RESPONSES, {"model": "dear", "input": "hi"}),
    (RESPONSES, {"model": "dear", "input": "hi", "stream": True}),
    (MESSAGES, {"model": "mock-claude", "max_tokens": 100, "messages": []}),
], ids=["chat", "chat-stream", "responses", "responses-stream", "messages"])
@pytest.mark.parametrize("pretty", ["1", "2"], ids=["spaced", "indented"])
def test_formatting_does_not_change_the_usage(stack, path, body, pretty):
    """Every API, unary and streamed, in json.dumps's spacing and indented (a stream's
    event then spans several data lines, which SSE joins): the usage is read exactly."""
    model = body["model"]
    _, row = send(stack, path, body, {"x-mock-pretty": pretty})
    assert billed(row) == exact(row, model, "stream" if body.get("stream") else "response")
