"""No way around the meter, through the real HAProxy, agent and mock upstream: streams
never hang whatever the upstream answers, usage is asked for on every OpenAI stream
however the client sent it, usage the gateway did not see is charged at an estimate,
cheap unary accounting is used only where it is safe, and only HAProxy writes records."""
import concurrent.futures
import hashlib
import http.client
import json
import re
import socket
import time
import urllib.request

import pytest

import spop_client as sp
from conftest import UNARY_BUFFER
from stack import Stack

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = "/v1/messages"

BODIES = {
    CHAT: {"model": "mock-gpt", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    COMPLETIONS: {"model": "mock-gpt", "stream": True, "prompt": "hi"},
    MESSAGES: {"model": "mock-claude", "stream": True, "max_tokens": 50,
               "messages": [{"role": "user", "content": "hi"}]},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # Long bodies are read past the cut by the capture filter here, on every HAProxy:
    # 3.4's agent would judge them whole (test_gateway.py), as it does not when its
    # room for them is spent or a body passes 1 MiB.
    s = Stack(tmp_path_factory.mktemp("integrity"),
              agent_args=["--pending-timeout-ms", "2000", "--long-body-memory", "0"])
    try:
        s.start()
        s.tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai",
                   "--input-micros", "1000000", "--output-micros", "2000000")
        s.tallyctl("model", "set", "mock-claude", "--provider", "mock-anthropic",
                   "--input-micros", "3000000", "--output-micros", "15000000")
        time.sleep(0.5)
        yield s
    finally:
        s.close()


def gateway_sessions(stack):
    """Sessions HAProxy holds on the gateway frontend."""
    return sum(1 for line in stack.haproxy_cmd("show sess").splitlines() if "fe=gateway" in line)


def settle_sessions(stack, timeout=5):
    deadline = time.time() + timeout
    while gateway_sessions(stack) and time.time() < deadline:
        time.sleep(0.05)
    return gateway_sessions(stack)


def post(stack, path, body, headers=None, key=None, timeout=10):
    """One request on a fresh connection; the whole answer, or an exception."""
    hdrs = {"Authorization": f"Bearer {key or stack.key}"}
    hdrs.update(headers or {})
    return stack.gateway("POST", path, body, headers=hdrs, timeout=timeout)


def assert_refused_past_the_cut(stack, status, h, answer, verdict):
    """The capture filter spoiled the body past the cut: the client gets the gateway's
    refusal (403 for a model, else 400) in the API's error shape instead of the
    upstream's answer to the spoiled body, and the row names it, never
    upstream_rejected."""
    assert status == (403 if verdict == "model_not_allowed" else 400), answer[:200]
    err = json.loads(answer)
    assert err["request_id"] == h["x-request-id"] and verdict in json.dumps(err), err
    r = stack.row(h["x-request-id"])
    assert (r["verdict"], r["outcome"], r["usage_source"]) == (verdict, "denied", "none")


def metric(stack, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics",
                                  timeout=5).read().decode()
    return float(next(l.split()[-1] for l in text.splitlines() if l.startswith(name + " ")))


def without_usage_event(body, sep):
    return sep.join(e for e in body.split(sep) if not re.search(rb'"usage"\s*:\s*\{', e))


# --- 1. every answer that is not an event stream reaches the client, whole --------------

ERROR_FORMS = {0: "json", 1: "json-chunked", 2: "text", 3: "empty", 4: "text-to-close"}


@pytest.mark.parametrize("status", [400, 429, 500, 503])
@pytest.mark.parametrize("form", sorted(ERROR_FORMS), ids=ERROR_FORMS.get)
def test_amended_stream_gets_any_error_answer_whole(stack, status, form):
    """An OpenAI stream that did not ask for usage is amended; a JSON (or any other)
    error answer has no event to take out and must reach the client at once, whole."""
    assert settle_sessions(stack) == 0
    headers = {"x-mock-status": str(status), "x-mock-error-form": str(form)}
    got, h, body = post(stack, CHAT, BODIES[CHAT], headers)
    assert got == status
    sent = json.loads(stack.mock_requests()[-1]["body"])
    assert sent["stream_options"] == {"include_usage": True}
    _, _, direct = stack.direct("POST", CHAT, sent, headers=headers)
    assert body == direct
    r = stack.row(h["x-request-id"])
    assert r["status"] == status
    assert r["outcome"] == ("upstream_rejected" if status < 500 else "upstream_error")
    assert r["usage_source"] == "none" and r["prompt_tokens"] is None
    # An upstream's complete error answer bills nothing: no estimate either.
    assert r["estimated_tokens"] is None
    assert settle_sessions(stack) == 0


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, MESSAGES])
@pytest.mark.parametrize("asked", [False, True], ids=["amended", "not-amended"])
@pytest.mark.parametrize("form", [0, 1, 3], ids=["json", "json-chunked", "empty"])
def test_every_stream_api_gets_error_answers_whole(stack, path, asked, form):
    body = dict(BODIES[path])
    if asked and path != MESSAGES:
        body["stream_options"] = {"include_usage": True}
    headers = {"x-mock-status": "400", "x-mock-error-form": str(form)}
    got, h, answer = post(stack, path, body, headers)
    assert got == 400
    _, _, direct = stack.direct("POST", path, json.loads(stack.mock_requests()[-1]["body"]),
                                headers=headers)
    assert answer == direct
    r = stack.row(h["x-request-id"])
    assert (r["status"], r["outcome"], r["usage_source"]) == (400, "upstream_rejected", "none")
    assert settle_sessions(stack) == 0


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, MESSAGES])
@pytest.mark.parametrize("crlf", ["0", "1"])
def test_event_stream_without_final_blank_line_ends(stack, path, crlf):
    """The last event of a stream may lack its blank line: the client still gets every
    byte (but the usage event it did not ask for), and the transaction ends."""
    headers = {"x-mock-frames": "5", "x-mock-sse-open": "1", "x-mock-crlf": crlf,
               "x-mock-prompt-tokens": "7", "x-mock-completion-tokens": "5"}
    got, h, body = post(stack, path, BODIES[path], headers)
    assert got == 200
    sent = json.loads(stack.mock_requests()[-1]["body"])
    _, _, direct = stack.direct("POST", path, sent, headers=headers)
    sep = b"\r\n\r\n" if crlf == "1" else b"\n\n"
    if path == MESSAGES:
        assert body == direct
    else:
        assert body == without_usage_event(direct, sep) and not direct.endswith(sep)
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"], r["usage_source"]) == (7, 5, "stream")
    assert settle_sessions(stack) == 0


# --- 2. usage is asked for on every OpenAI stream -----------------------------------------

@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("options,upstream", [
    ({"include_usage": False}, {"include_usage": True}),
    ({}, {"include_usage": True}),
    ({"include_usage": None}, {"include_usage": True}),
    ({"include_obfuscation": False}, {"include_usage": True, "include_obfuscation": False}),
    ({"include_usage": False, "include_obfuscation": True},
     {"include_usage": True, "include_obfuscation": True}),
    (None, {"include_usage": True}),
    ("yes", {"include_usage": True}),
], ids=["false", "empty", "null-inside", "other-option", "false-and-other", "null", "string"])
def test_usage_is_asked_for_whatever_stream_options_say(stack, path, options, upstream):
    body = dict(BODIES[path], stream_options=options)
    headers = {"x-mock-frames": "20", "x-mock-prompt-tokens": "1000000",
               "x-mock-completion-tokens": "20"}
    got, h, answer = post(stack, path, body, headers)
    assert got == 200
    sent = json.loads(stack.mock_requests()[-1]["body"])
    assert sent["stream_options"] == upstream
    assert {k: v for k, v in sent.items() if k != "stream_options"} == \
        {k: v for k, v in body.items() if k != "stream_options"}
    # The client did not ask: every event but the usage one, byte for byte.
    _, _, direct = stack.direct("POST", path, sent, headers=headers)
    assert answer == without_usage_event(direct, b"\n\n") and answer != direct
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"], r["usage_source"]) == \
        (1000000, 20, "stream")


def test_a_client_that_asked_gets_its_usage_event(stack):
    body = dict(BODIES[CHAT], stream_options={"include_usage": True, "include_obfuscation": False})
    got, h, answer = post(stack, CHAT, body, {"x-mock-frames": "3"})
    assert answer.count(b'"usage":{') == 1
    assert json.loads(stack.mock_requests()[-1]["body"]) == body


def send_chunked(stack, path, body, step=5000):
    s = socket.create_connection(("127.0.0.1", stack.gw_port), timeout=10)
    try:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {stack.key}\r\n"
                   "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                   "x-mock-frames: 4\r\nx-mock-prompt-tokens: 3\r\n\r\n").encode())
        for i in range(0, len(body), step):
            part = body[i:i + step]
            s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        s.sendall(b"0\r\n\r\n")
        resp = http.client.HTTPResponse(s)
        resp.begin()
        return resp.status, resp.getheader("x-request-id"), resp.read()
    finally:
        s.close()


def long_body(path, tail):
    """A body far longer than the 14 KiB the agent sees, its judged members after the cut,
    as the OpenAI Python SDK orders them."""
    head = {"messages": [{"role": "user", "content": "x" * 40000}]} if path == CHAT else \
        {"prompt": "x" * 40000}
    return json.dumps(dict(head, model="mock-gpt", **tail)).encode()


def expected_upstream(body):
    """What the gateway sends up for a cut body: its own stream_options value rewritten
    in place (the JSON separators json.dumps writes), then spaces before the last brace up
    to the 40 bytes the amendment was given."""
    tail = b',"stream_options":{"include_usage":true}'
    m = re.search(rb'"stream_options":( [^,}]*\}| [^,}]*)', body)
    if not m:
        return body[:-1] + tail + b"}"
    new = b'{"include_usage":true}'
    old = m.group(1)
    out = body[:m.start(1)] + new + body[m.end(1):]
    return out[:-1] + b" " * (len(tail) - (len(new) - len(old))) + b"}"


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("tail", [
    {"stream": True},
    {"stream": True, "stream_options": {"include_usage": False}},
    {"stream": True, "stream_options": {}},
], ids=["no-options", "false", "empty"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_usage_is_asked_for_past_the_inspected_prefix(stack, path, tail, chunked):
    """The agent sees 14 KiB; the capture filter reads the rest of the body as it passes
    and amends it where the agent could not."""
    body = long_body(path, tail)
    if chunked:
        status, rid, answer = send_chunked(stack, path, body)
    else:
        status, h, answer = post(stack, path, body, {"x-mock-frames": "4",
                                                     "x-mock-prompt-tokens": "3"})
        rid = h["x-request-id"]
    assert status == 200
    up = stack.mock_requests()[-1]
    want = expected_upstream(body)
    assert up["body_sha256"] == hashlib.sha256(want).hexdigest()
    assert json.loads(want)["stream_options"]["include_usage"] is True
    assert b'"usage":{' not in answer
    r = stack.row(rid)
    assert (r["prompt_tokens"], r["completion_tokens"], r["usage_source"]) == (3, 20, "stream")
    assert r["stream"] == 1


def test_the_rest_of_a_long_body_is_read_as_json_reads_it(stack):
    """Quotes, escapes, brackets and member names inside strings and nested objects past
    the cut are content, not members: nothing is spoiled, and the one top-level stream
    is amended."""
    text = 'say "stream": true, "model": "x" {[,:]} \\ \\" \n\t\u00e9 ' * 1200
    nested = {"metadata": {"model": "other", "stream": False, "stream_options": {}},
              "tools": [{"type": "function", "function": {"name": "stream", "parameters":
                                                           {"model": {"type": "string"}}}}]}
    body = json.dumps(dict({"messages": [{"role": "user", "content": text}]}, **nested,
                           model="mock-gpt", stream=True)).encode()
    assert len(body) > 60000
    status, h, answer = post(stack, CHAT, body, {"x-mock-frames": "4", "x-mock-prompt-tokens": "9"})
    assert status == 200, answer[:200]
    up = stack.mock_requests()[-1]
    # the nested stream_options is no member of the body: the amendment goes at the end
    want = body[:-1] + b',"stream_options":{"include_usage":true}}'
    assert up["body_sha256"] == hashlib.sha256(want).hexdigest()
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["usage_source"]) == (9, "stream")
    assert b'"usage":{' not in answer


def test_a_second_stream_member_past_the_prefix_spoils_the_body(stack):
    """Upstream JSON readers keep the last of duplicated keys: a "stream": true after the
    cut must not turn a judged unary request into a stream nobody asked usage for."""
    body = json.dumps({"stream": False, "messages": [{"role": "user", "content": "x" * 40000}],
                       "model": "mock-gpt"}).encode()[:-1] + b', "stream": true}'
    status, h, answer = post(stack, CHAT, body)
    assert_refused_past_the_cut(stack, status, h, answer, "invalid_body")
    variant = json.dumps({"messages": [{"role": "user", "content": "x" * 40000}],
                          "model": "mock-gpt"}).encode()[:-1] + b', "Stream": true}'
    assert_refused_past_the_cut(stack, *post(stack, CHAT, variant), "invalid_body")


@pytest.mark.parametrize("value", [
    b'"mock-claude"', b' \t "mock-claude"', b' ' * 300 + b'"mock-claude"',
    b'"mock\\u002dgpt"', b'"mock-gpt' + b'x' * 300 + b'"', b'["mock-gpt"]',
    b'\x01 "mock-claude"',
], ids=["forbidden", "spaced", "padded-past-the-cap", "escaped", "long", "not-a-string",
        "control-byte"])
def test_a_restricted_keys_model_past_the_prefix_is_judged(stack, value):
    """A key restricted to some models sends a body whose only "model" comes past the
    cut (the OpenAI Python SDK's order): it goes to the provider of its allowed models,
    and the capture filter spoils the body unless the model it meets is one of them,
    spelled as sent. Whitespace before the value cannot move the spoil where a lenient
    reader skips it."""
    key = stack.create_key(f"past-cut-{len(value)}-{value[:3].hex()}", "--models", "mock-gpt")
    ok = long_body(CHAT, {})
    deadline = time.time() + 3   # the agent's next configuration poll
    while post(stack, CHAT, ok, key=key)[0] != 200 and time.time() < deadline:
        time.sleep(0.1)
    status, h, _ = post(stack, CHAT, ok, {"x-mock-prompt-tokens": "7"}, key=key)
    assert status == 200
    r = stack.row(h["x-request-id"])
    assert (r["model"], r["prompt_tokens"], r["outcome"]) == ("mock-gpt", 7, "complete")
    body = ok.replace(b'"model": "mock-gpt"', b'"model":' + value)
    assert body != ok
    status, h, answer = post(stack, CHAT, body, key=key)
    assert stack.mock_requests()[-1]["body_sha256"] != hashlib.sha256(body).hexdigest()
    assert_refused_past_the_cut(stack, status, h, answer, "model_not_allowed")


def test_a_restricted_keys_body_without_model_is_not_left_to_the_upstream(stack):
    """A restricted key's long body that never names a model would let the upstream pick
    one (self-hosted servers serve their loaded model): spoiled at its closing brace."""
    key = stack.create_key("past-cut-none", "--models", "mock-gpt")
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 40000}]}).encode()
    deadline = time.time() + 3   # the agent's next configuration poll
    while post(stack, CHAT, long_body(CHAT, {}), key=key)[0] != 200 and time.time() < deadline:
        time.sleep(0.1)
    assert_refused_past_the_cut(stack, *post(stack, CHAT, body, key=key), "model_required")


@pytest.mark.parametrize("key", ["previous_response_id", "conversation", "Previous_Response_Id",
                                 "previous\\u005fresponse_id"])
def test_stored_state_past_the_prefix_spoils_a_responses_body(stack, key):
    """A Responses body longer than the agent sees may not name stored state past the
    cut either, in any spelling a reader could take for it: the capture filter spoils it
    before its end goes up."""
    clean = json.dumps({"model": "mock-gpt", "input": "x" * 40000}).encode()
    status, _, _ = post(stack, "/v1/responses", clean)
    assert status == 200
    assert stack.mock_requests()[-1]["body_sha256"] == hashlib.sha256(clean).hexdigest()
    body = clean[:-1] + f', "{key}": "resp_other"}}'.encode()
    status, h, answer = post(stack, "/v1/responses", body)
    assert stack.mock_requests()[-1]["body_sha256"] != hashlib.sha256(body).hexdigest()
    assert_refused_past_the_cut(stack, status, h, answer, "unsupported_parameter")


@pytest.mark.parametrize("path,model", [(MESSAGES, "mock-claude"), ("/v1/embeddings", "mock-gpt")])
def test_a_second_model_past_the_prefix_spoils_any_api_body(stack, path, model):
    """Messages and embeddings bodies longer than the agent sees are checked past the cut
    too: a second "model" there, which an upstream keeping the last duplicate would
    serve unjudged, spoils the body; a long body without one goes up untouched."""
    head = {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": "x" * 40000}]} \
        if path == MESSAGES else {"model": model, "input": "x" * 40000}
    clean = json.dumps(head).encode()
    post(stack, path, clean)
    assert stack.mock_requests()[-1]["body_sha256"] == hashlib.sha256(clean).hexdigest()
    second = clean[:-1] + b', "model": "mock-other"}'
    status, h, answer = post(stack, path, second)
    up = stack.mock_requests()[-1]
    assert up["body_sha256"] != hashlib.sha256(second).hexdigest()   # a NUL went in
    assert_refused_past_the_cut(stack, status, h, answer, "invalid_body")


def test_http2_stream_without_content_length_is_amended(tmp_path):
    from stack import make_cert
    from conftest import free_port
    tls_port = free_port()
    s = Stack(tmp_path, haproxy_env={"TALLY_TLS_ADDR": f"127.0.0.1:{tls_port}",
                                     "TALLY_TLS_CERT": str(make_cert(tmp_path))})
    try:
        s.start()
        body = json.dumps(BODIES[CHAT])
        import subprocess
        r = subprocess.run(["curl", "-sk", "--http2", "-o", "-", "-D", "-",
                            "-H", f"Authorization: Bearer {s.key}",
                            "-H", "Content-Type: application/json",
                            "-H", "Content-Length:", "--data-binary", body,
                            f"https://127.0.0.1:{tls_port}{CHAT}"],
                           capture_output=True, timeout=30)
        out = r.stdout
        assert out.startswith(b"HTTP/2 200"), out[:200]
        assert b'"usage":{' not in out
        rid = re.search(rb"x-request-id: (\S+)", out).group(1).decode()
        sent = json.loads(s.mock_requests()[-1]["body"])
        assert sent["stream_options"] == {"include_usage": True}
        row = s.row(rid)
        assert (row["usage_source"], row["prompt_tokens"]) == ("stream", 10)
    finally:
        s.close()


def test_a_tiny_budget_stops_streams_that_asked_for_no_usage(stack):
    """The issue's case: a $0.001 budget passed five streams that each reported a million
    tokens. Each is now priced as reported, and the first spends the budget."""
    key = stack.create_key("tiny-budget", "--budget-usd", "0.001", "--budget-period", "total")
    time.sleep(0.5)
    statuses = []
    for _ in range(5):
        body = dict(BODIES[CHAT], stream_options={"include_usage": False}, max_tokens=5)
        got, h, _ = post(stack, CHAT, body, {"x-mock-prompt-tokens": "1000000",
                                             "x-mock-completion-tokens": "5"}, key=key)
        statuses.append(got)
        if got == 200:
            r = stack.row(h["x-request-id"])
            assert (r["prompt_tokens"], r["cost_micros"]) == (1000000, 1000010)
    assert statuses == [200, 402, 402, 402, 402]


# --- 3. unknown usage is never free ------------------------------------------------------

def abort_after(stack, path, body, marker, headers=b"", key=None):
    """Sends body, reads the stream until marker, and leaves. Returns the request id."""
    raw = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", stack.gw_port))
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Authorization: Bearer {key or stack.key}\r\n".encode() + headers +
              b"x-mock-frames: 200\r\nx-mock-frame-delay-ms: 20\r\n"
              b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)
    data = b""
    while marker not in data:
        data += s.recv(65536)
    rid = re.search(rb"x-request-id: (\S+)", data, re.I).group(1).decode()
    s.close()
    return rid


def test_a_stream_cut_before_its_usage_is_charged_its_estimate(stack):
    """Gone before the usage event: the reported counts stay NULL, the row carries the
    reservation's estimate, and the key's budget is charged it."""
    # 2015 micro-dollars estimated (15 prompt tokens at $1/Mtok, 1000 at $2/Mtok): a
    # $0.003 budget admits one such request, and only one once it is charged.
    key = stack.create_key("cut-budget", "--budget-usd", "0.003", "--budget-period", "total")
    time.sleep(0.5)
    body = {"model": "mock-gpt", "stream": True, "max_tokens": 1000,
            "messages": [{"role": "user", "content": "hi"}]}
    rid = abort_after(stack, CHAT, body, b'"content":"mock2 "', key=key)
    r = stack.row(rid)
    assert (r["outcome"], r["usage_source"]) == ("client_abort", "none")
    assert r["prompt_tokens"] is None and r["cost_micros"] is None
    prompt = (len(json.dumps(body)) + 3) // 4
    assert r["estimated_tokens"] == prompt + 1000
    assert r["estimated_cost_micros"] == prompt * 1 + 1000 * 2
    got, _, err = post(stack, CHAT, dict(body, stream=False), key=key)
    assert got == 402, err
    # ...and after a restart, which rebuilds spend from the rollups.
    stack.stop_agent()
    stack.start_agent()
    stack.wait_agent_state("UP")
    got, _, err = post(stack, CHAT, dict(body, stream=False), key=key)
    assert got == 402, err


def test_an_anthropic_stream_cut_after_its_input_is_charged_the_rest(stack):
    """message_start reported the input; the output never came: the token window is
    charged the reported input and the estimated output."""
    key = stack.create_key("cut-tpm", "--tpm", "1200")
    time.sleep(0.5)
    body = {"model": "mock-claude", "stream": True, "max_tokens": 1000,
            "messages": [{"role": "user", "content": "hi"}]}
    rid = abort_after(stack, MESSAGES, body, b"content_block_delta",
                      headers=b"x-mock-prompt-tokens: 100\r\n", key=key)
    r = stack.row(rid)
    assert (r["usage_source"], r["prompt_tokens"], r["completion_tokens"]) == \
        ("partial", 100, None)
    assert r["estimated_tokens"] == 1000
    assert r["estimated_cost_micros"] == 1000 * 15
    # 100 reported + 1000 estimated of 1200: the next request (~1020 tokens) waits.
    got, h, err = post(stack, MESSAGES, dict(body, stream=False), key=key)
    assert got == 429 and b"tokens per minute" in err


def test_an_answer_larger_than_the_buffer_without_usage_is_estimated(stack):
    """json_query reads only the buffer: an upstream that answers far beyond max_tokens
    leaves the row without usage, and the estimate charged."""
    body = {"model": "mock-gpt", "messages": [], "max_tokens": 5}
    got, h, _ = post(stack, CHAT, body, {"x-mock-body-bytes": str(UNARY_BUFFER + 44000)})
    assert got == 200
    r = stack.row(h["x-request-id"])
    assert (r["outcome"], r["usage_source"], r["prompt_tokens"]) == ("complete", "none", None)
    prompt = (len(json.dumps(body)) + 3) // 4
    assert (r["estimated_tokens"], r["estimated_cost_micros"]) == (prompt + 5, prompt + 10)


def test_a_decision_whose_record_never_comes_is_charged_its_estimate(stack):
    """The agent decided, HAProxy never logged: after the pending timeout the row is
    no_record, with the estimate."""
    c = sp.Client(stack.agent_port)
    c.handshake()
    body = b'{"model":"mock-gpt","max_tokens":300,"messages":[]}'
    args = {"id": "no-record-1", "secret": stack.gateway_secret(),
            "auth": f"Bearer {stack.key}", "method": "POST", "path": CHAT, "cl": 1,
            "bsize": len(body), "body": body}
    c.send(sp.notify(args, 1, 1))
    f = c.recv_frame()
    assert sp.parse_actions(f[4])["verdict"] == "allow"
    c.close()
    r = stack.row("no-record-1", timeout=10)
    assert (r["outcome"], r["usage_source"]) == ("no_record", "none")
    assert r["estimated_tokens"] == (len(body) + 3) // 4 + 300


# --- 4. the cheap unary path only when it is safe --------------------------------------

@pytest.mark.parametrize("extra", [
    {"echo": True}, {"best_of": 2}, {"top_logprobs": 5}, {"logprobs": 3},
    {"modalities": ["text", "audio"]}, {"audio": {"voice": "alloy", "format": "wav"}},
    {"web_search_options": {}},
], ids=["echo", "best_of", "top_logprobs", "logprobs-int", "modalities", "audio", "web_search"])
def test_members_that_grow_the_answer_take_the_capture_path(stack, extra):
    body = dict({"model": "mock-gpt", "messages": [], "max_tokens": 5}, **extra)
    # Audio and the provider's own tools are beyond mock-gpt's prices: refused unless
    # the key is allowed them (docs/pricing.md), as this one is.
    key = None
    if set(extra) & {"modalities", "audio", "web_search_options"}:
        if not hasattr(stack, "costly_key"):
            stack.costly_key = stack.create_key("costly", "--server-tools", "allow",
                                                "--audio", "allow")
            time.sleep(0.6)
        key = stack.costly_key
        assert post(stack, CHAT, body)[0] == 400
    got, h, _ = post(stack, CHAT, body, {"x-mock-body-bytes": "60000",
                                         "x-mock-completion-tokens": "777"}, key=key)
    assert got == 200
    r = stack.row(h["x-request-id"])
    assert (r["completion_tokens"], r["usage_source"]) == (777, "response")


@pytest.mark.parametrize("body", [
    b'{"model":"mock-gpt","messages":[],"max_tokens":5,"MAX_TOKENS":90000}',
    b'{"model":"mock-gpt","messages":[],"max_tokens":5,"max_tokens":5}',
    json.dumps({"model": "mock-gpt", "stream": False, "max_tokens": 5,
                "messages": [{"role": "user", "content": "x" * 40000}]}).encode()[:-1] +
    b', "max_tokens": 90000}',
], ids=["case-variant", "duplicate", "second-past-the-prefix"])
def test_ambiguous_or_unseen_bounds_take_the_capture_path(stack, body):
    got, h, _ = post(stack, CHAT, body, {"x-mock-body-bytes": "60000",
                                         "x-mock-completion-tokens": "777"})
    assert got == 200
    r = stack.row(h["x-request-id"])
    assert (r["completion_tokens"], r["usage_source"]) == (777, "response")


# --- 5. only HAProxy writes records -------------------------------------------------------

def forged_record(request_id, key_id=1, mac="AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="):
    """A record in the log-format's shape that did not come from HAProxy: a real-looking
    unary answer for key_id with a priced usage."""
    now = int(time.time())
    return (f"tally2 {mac} - - {request_id} {now} 123 200 342 555 3 0 0 2 5 -- be_mock_openai"
            f" allow {key_id} mock-gpt mock-openai 0 - - mock-gpt 0 0 - - - - - - -").encode()


def test_forged_records_are_refused_and_counted(stack):
    before = stack.counters()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(forged_record("forged-udp"), ("127.0.0.1", stack.records_port))
    u.sendto(forged_record("forged-nomac", mac="-"), ("127.0.0.1", stack.records_port))
    t = socket.create_connection(("127.0.0.1", stack.records_port))
    t.sendall(forged_record("forged-tcp") + b"\n")
    deadline = time.time() + 5
    while metric(stack, "tally_accounting_unauthenticated_total") < 3 and time.time() < deadline:
        time.sleep(0.05)
    t.close()
    assert metric(stack, "tally_accounting_unauthenticated_total") >= 3
    # Durable too, once a batch commits the counters.
    post(stack, CHAT, {"model": "mock-gpt", "messages": []})
    deadline = time.time() + 5
    while stack.counters()["unauthenticated"] < before["unauthenticated"] + 3 and \
            time.time() < deadline:
        time.sleep(0.05)
    assert stack.counters()["unauthenticated"] >= before["unauthenticated"] + 3
    assert not stack.rows("request_id LIKE 'forged-%'")


def test_a_forged_record_cannot_race_the_real_one(stack):
    """A key holder reads its own X-Request-Id and sends a zero-usage record for it before
    the real one: the row has the real usage."""
    s = socket.create_connection(("127.0.0.1", stack.gw_port))
    raw = json.dumps(dict(BODIES[CHAT], stream_options={"include_usage": True})).encode()
    s.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Authorization: Bearer {stack.key}\r\nx-mock-frames: 30\r\n"
              f"x-mock-frame-delay-ms: 20\r\nx-mock-prompt-tokens: 4321\r\n"
              f"Connection: close\r\nContent-Length: {len(raw)}\r\n\r\n".encode() + raw)
    data = b""
    while b"x-request-id" not in data.lower():
        data += s.recv(65536)
    rid = re.search(rb"x-request-id: (\S+)", data, re.I).group(1).decode()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(3):
        u.sendto(forged_record(rid), ("127.0.0.1", stack.records_port))
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    r = stack.row(rid)
    assert (r["prompt_tokens"], r["usage_source"], r["key_id"]) == (4321, "stream", 1)


def test_pending_table_is_bounded_and_overflow_still_ends_as_rows(tmp_path):
    s = Stack(tmp_path, agent_args=["--pending-max", "16"])
    try:
        s.start()

        def stream(_):
            got, h, _ = s.gateway("POST", CHAT, BODIES[CHAT], key=s.key, timeout=30,
                                  headers={"x-mock-frames": "40", "x-mock-frame-delay-ms": "25"})
            return got, h["x-request-id"]

        with concurrent.futures.ThreadPoolExecutor(24) as ex:
            results = list(ex.map(stream, range(24)))
        statuses = sorted(g for g, _ in results)
        assert statuses.count(503) >= 8 - 2 and statuses.count(200) <= 16 + 2
        assert set(statuses) <= {200, 503}
        rows = {r["request_id"]: r for r in s.wait_rows(24)}
        assert set(rows) == {i for _, i in results}
        busy = [r for r in rows.values() if r["status"] == 503]
        assert all((r["verdict"], r["outcome"]) == ("gateway_busy", "denied") for r in busy)
        deadline = time.time() + 5
        while s.counters()["pending_overflow"] < len(busy) and time.time() < deadline:
            time.sleep(0.05)
        assert s.counters()["pending_overflow"] == len(busy) == statuses.count(503)
        c = s.counters()
        assert c["received"] == c["written"] + c["dropped"] == 24
    finally:
        s.close()


@pytest.mark.parametrize("path,model,tail,spoiled", [
    (CHAT, "mock-gpt", {"service_tier": "flex"}, True),            # no card for it
    (CHAT, "mock-gpt", {"service_tier": "Default"}, True),         # no plain tier name
    (CHAT, "mock-gpt", {"service_tier": None}, False),
    (CHAT, "mock-gpt", {"service_tier": "default"}, False),
    (CHAT, "mock-gpt", {"modalities": ["text", "audio"]}, True),   # no audio price
    (CHAT, "mock-gpt", {"modalities": ["text"], "audio": None}, False),
    (CHAT, "mock-gpt", {"modalities": "audio"}, True),              # not a list
    (CHAT, "mock-gpt", {"web_search_options": {}}, True),
    (CHAT, "mock-gpt", {"web_search_options": None, "mcp_servers": None}, False),
    ("/v1/responses", "mock-gpt", {"tools": [{"type": "function", "name": "f"},
                                             {"type": "code_interpreter"}]}, True),
    ("/v1/responses", "mock-gpt", {"tools": [{"name": "f", "type": "function",
                                              "parameters": {"type": "object"}}]}, False),
    ("/v1/responses", "mock-gpt", {"tools": [{"Type": "file_search"}]}, True),
    ("/v1/responses", "mock-gpt", {"tools": [{"type": ["web_search"]}]}, True),
    (MESSAGES, "mock-claude", {"tools": [{"type": "web_search_20250305", "name": "w"}]}, True),
    (MESSAGES, "mock-claude", {"tools": [{"name": "mine", "input_schema": {
        "type": "object", "properties": {"type": {"type": "string",
                                                  "enum": ["web_search", "code_interpreter"]}}}},
        {"type": "bash_20250124", "name": "bash"}]}, False),
], ids=["tier-unpriced", "tier-spelled", "tier-null", "tier-default", "audio", "text-only",
        "modalities-not-a-list", "chat-search", "nulls",
        "server-tool", "client-tools", "type-variant", "type-not-a-string", "anthropic-search",
        "anthropic-client-tools"])
def test_what_costs_more_past_the_prefix_spoils_the_body(stack, path, model, tail, spoiled):
    """docs/pricing.md: a body longer than the agent sees is judged past the cut by the
    capture filter, as the agent judges a whole one: a tier the key may not ask for or
    the model does not price, audio or a tool the provider runs that its prices do not
    cover spoil the body before its end goes up; the client's own tools do not."""
    head = {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": "x" * 40000}]}
    if path == "/v1/responses":
        head = {"model": model, "input": "x" * 40000, "store": False}
    body = json.dumps(dict(head, **tail)).encode()
    status, h, answer = post(stack, path, body)
    up = stack.mock_requests()[-1]
    if spoiled:
        assert up["body_sha256"] != hashlib.sha256(body).hexdigest()   # a NUL went in
        assert_refused_past_the_cut(stack, status, h, answer, "unsupported_value")
    else:
        # Read whole by the upstream (a chat body got spaces before its brace for the
        # amendment it did not need).
        assert status == 200, answer[:200]
        assert stack.row(h["x-request-id"])["outcome"] == "complete"
        if path != CHAT:
            assert up["body_sha256"] == hashlib.sha256(body).hexdigest()
