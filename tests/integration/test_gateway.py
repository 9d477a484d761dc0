"""End-to-end: requests through the real HAProxy 2.6, decided by the real tally-agent,
served by the mock upstream, with keys and models in a real SQLite database (and, for
the tests parametrized by store, in PostgreSQL too)."""
import concurrent.futures
import http.client
import hashlib
import json
import re
import signal
import socket
import sqlite3
import time
import urllib.request

import pytest

from conftest import JUDGED_WHOLE
from stack import BOTH_STORES, MOCK_CREDENTIAL, Stack, store, store_params  # noqa: F401 (a fixture)

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
# tally.cfg's unique-id-format: accept time in ms, pid, request counter, 64 random bits
# (hex). Ids sort by time, so the request_id index grows at its end.
REQUEST_ID = re.compile(r"^\d{13}-[0-9A-F]+-[0-9A-F]+-[0-9A-F]{16}$")


@pytest.fixture
def stack(tmp_path, store, request):
    s = Stack(tmp_path, **store_params(store, request))
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


def chat(model="mock-gpt", stream=False, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    if stream:
        body["stream"] = True
    body.update(extra)
    return body


def headers_of(req):
    return {k.lower(): v for k, v in req["headers"].items()} if isinstance(req["headers"], dict) \
        else {k.lower(): v for k, v in req["headers"]}


def last_upstream_request(stack):
    reqs = stack.mock_requests()
    assert reqs, "the upstream saw no request"
    return reqs[-1]


def assert_error(status, headers, body, want_status, code):
    assert status == want_status, body
    assert headers["content-type"].startswith("application/json")
    assert REQUEST_ID.match(headers["x-request-id"])
    err = json.loads(body)
    assert err["error"]["code"] == code, err
    return err


def wait_for(predicate, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_unary_openai_is_byte_exact_and_credential_swapped(stack):
    body = chat()
    status, hdrs, got = stack.gateway("POST", CHAT, body, key=stack.key,
                                      headers={"Accept-Encoding": "gzip, br"})
    assert status == 200, got
    assert REQUEST_ID.match(hdrs["x-request-id"])
    assert abs(int(hdrs["x-request-id"][:13]) - time.time() * 1000) < 60000
    up = headers_of(last_upstream_request(stack))
    assert up["authorization"] == f"Bearer {MOCK_CREDENTIAL}"
    assert stack.key not in json.dumps(stack.mock_requests())
    assert "accept-encoding" not in up
    assert up["x-request-id"] == hdrs["x-request-id"]
    _, _, want = stack.direct("POST", CHAT, body)
    assert got == want
    assert json.loads(got)["usage"]["prompt_tokens"] > 0


def test_stream_openai_is_byte_exact(stack):
    # A stream that asked for usage passes untouched; one that did not is amended
    # (test_accounting.py checks what its client receives).
    body = chat(stream=True, stream_options={"include_usage": True})
    status, hdrs, got = stack.gateway("POST", CHAT, body, key=stack.key,
                                      headers={"x-mock-frames": "25"})
    assert status == 200
    assert hdrs["content-type"].startswith("text/event-stream")
    _, _, want = stack.direct("POST", CHAT, body, headers={"x-mock-frames": "25"})
    assert got == want
    assert got.count(b"data: ") == 28 and got.endswith(b"data: [DONE]\n\n")


def test_anthropic_with_x_api_key_unary_and_stream(stack):
    for stream in (False, True):
        body = {"model": "mock-claude", "max_tokens": 64, "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]}
        status, hdrs, got = stack.gateway("POST", MESSAGES, body,
                                          headers={"x-api-key": stack.key,
                                                   "anthropic-version": "2023-06-01"})
        assert status == 200, got
        up = headers_of(last_upstream_request(stack))
        assert up["x-api-key"] == MOCK_CREDENTIAL
        assert "authorization" not in up
        _, _, want = stack.direct("POST", MESSAGES, body,
                                  headers={"x-api-key": MOCK_CREDENTIAL,
                                           "anthropic-version": "2023-06-01"})
        assert got == want
        if stream:
            assert b"event: message_start" in got and b"event: message_stop" in got


def test_missing_and_unknown_keys_are_401_and_never_reach_upstream(stack):
    stack.mock_clear()
    assert_error(*stack.gateway("POST", CHAT, chat()), 401, "missing_api_key")
    assert_error(*stack.gateway("POST", CHAT, chat(), key="tly_" + "A" * 43), 401, "invalid_api_key")
    assert_error(*stack.gateway("POST", CHAT, chat(), headers={"Authorization": "Basic Zm9vOmJhcg=="}),
                 401, "missing_api_key")
    assert stack.mock_requests() == []


def test_anthropic_path_gets_anthropic_error_shape(stack):
    status, hdrs, body = stack.gateway("POST", MESSAGES, {"model": "mock-claude"},
                                       headers={"x-api-key": "nope"})
    assert status == 401
    err = json.loads(body)
    assert err["type"] == "error" and err["error"]["type"] == "authentication_error"


@BOTH_STORES
def test_key_revoked_while_running(stack):
    key = stack.create_key("soon-revoked")
    assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=key)[0] == 200, 3)
    stack.tallyctl("key", "revoke", "soon-revoked")
    assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=key)[0] == 401, 3)
    err = assert_error(*stack.gateway("POST", CHAT, chat(), key=key), 401, "revoked_api_key")
    assert key[:12] in err["error"]["message"]
    # other keys are untouched
    assert stack.gateway("POST", CHAT, chat(), key=stack.key)[0] == 200


@BOTH_STORES
def test_key_created_while_running_works_without_restart(stack):
    agent_pid = stack.procs["agent"].pid
    key = stack.create_key("fresh")
    assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=key)[0] == 200, 3)
    assert stack.procs["agent"].pid == agent_pid


def test_model_allow_list(stack):
    key = stack.create_key("gpt-only", "--models", "mock-gpt")
    assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=key)[0] == 200, 3)
    stack.mock_clear()
    err = assert_error(*stack.gateway("POST", CHAT, chat(model="mock-claude"), key=key),
                       403, "model_not_allowed")
    assert "mock-claude" in err["error"]["message"]
    assert stack.mock_requests() == []


def test_model_and_body_errors(stack):
    status, h, body = stack.gateway("POST", CHAT, chat(model="no-such-model"), key=stack.key)
    assert_error(status, h, body, 404, "model_not_found")
    # the operator sees which model the client asked for
    r = stack.row(h["x-request-id"])
    assert (r["verdict"], r["model_requested"], r["model"]) == \
        ("model_not_found", "no-such-model", "no-such-model")
    assert_error(*stack.gateway("POST", CHAT, b'{"model": "mock-gpt",,}', key=stack.key),
                 400, "invalid_body")
    assert_error(*stack.gateway("POST", CHAT, b'[1, 2]', key=stack.key), 400, "invalid_body")
    assert_error(*stack.gateway("POST", CHAT, b'{"model":"mock-gpt","model":"mock-claude"}',
                                key=stack.key), 400, "invalid_body")
    nodefault = stack.create_key("no-default")
    assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=nodefault)[0] == 200, 3)
    assert_error(*stack.gateway("POST", CHAT, {"messages": []}, key=nodefault), 400, "model_required")


def test_body_without_model_uses_key_default(stack):
    stack.mock_clear()
    status, _, body = stack.gateway("POST", CHAT, {"messages": [{"role": "user", "content": "x"}]},
                                    key=stack.key)
    assert status == 200, body
    up = headers_of(last_upstream_request(stack))
    assert up["authorization"] == f"Bearer {MOCK_CREDENTIAL}" and "x-api-key" not in up
    # demo's default (mock-gpt) speaks the OpenAI API: not served on /v1/messages
    status, _, body = stack.gateway("POST", MESSAGES, {"max_tokens": 5}, key=stack.key)
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"


def test_only_inference_endpoints_are_served(stack):
    stack.mock_clear()
    assert_error(*stack.gateway("POST", "/v1/models", key=stack.key), 404, "unsupported_endpoint")
    # the Responses WebSocket transport cannot be accounted: refused, so that clients
    # (Codex CLI) fall back to HTTPS
    assert_error(*stack.gateway("GET", RESPONSES, key=stack.key,
                                headers={"Connection": "Upgrade", "Upgrade": "websocket",
                                         "Sec-WebSocket-Version": "13",
                                         "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}),
                 404, "unsupported_endpoint")
    assert_error(*stack.gateway("DELETE", "/v1/files/file-1", key=stack.key), 404,
                 "unsupported_endpoint")
    assert_error(*stack.gateway("POST", "/v1/files", {"purpose": "batch"}, key=stack.key), 404,
                 "unsupported_endpoint")
    assert stack.mock_requests() == []
    status, _, body = stack.gateway("POST", "/v1/embeddings", {"model": "mock-gpt", "input": "x"},
                                    key=stack.key)
    assert status == 200, body
    assert len(stack.mock_requests()) == 1


@BOTH_STORES
def test_embeddings_are_accounted(stack):
    """/v1/embeddings end to end: the vector reaches the client whole, the row has the
    upstream's prompt tokens, no completion tokens (NULL: none reported) and their cost,
    however long the vector (its usage comes last, past HAProxy's buffer)."""
    stack.tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai",
                   "--input-micros", "20000", "--output-micros", "0")
    time.sleep(0.5)
    for size in (0, 300000):
        status, h, got = stack.gateway("POST", "/v1/embeddings",
                                       {"model": "mock-gpt", "input": ["hello", "world"]},
                                       key=stack.key, headers={"x-mock-prompt-tokens": "4321",
                                                               "x-mock-body-bytes": str(size)})
        assert status == 200, got
        answer = json.loads(got)
        assert answer["usage"]["prompt_tokens"] == 4321 and len(answer["data"][0]["embedding"]) > 1
        assert size == 0 or len(got) > 200000
        r = stack.row(h["x-request-id"])
        assert (r["model"], r["prompt_tokens"], r["completion_tokens"], r["outcome"]) == \
            ("mock-gpt", 4321, None, "complete")
        # 4321 tokens at 0.02 $ per million, rounded to the micro-dollar
        assert (r["cost_micros"], r["usage_source"], r["stream"]) == (86, "response", 0)


def test_count_tokens_is_judged_forwarded_and_free(stack):
    """Claude Code asks /v1/messages/count_tokens before compacting: the key and its
    allow-list are checked as for a message, the count is forwarded, --rpm counts the
    call, and its row bills nothing (no usage, no estimate)."""
    key = stack.create_key("counting", "--models", "mock-claude", "--rpm", "2")
    body = {"model": "mock-claude", "messages": [{"role": "user", "content": "x" * 20000}]}
    path = "/v1/messages/count_tokens?beta=true"
    assert wait_for(lambda: stack.gateway("POST", path, body, headers={"x-api-key": key})[0] == 200, 3)
    status, h, got = stack.gateway("POST", path, body, headers={"x-api-key": key,
                                                                "x-mock-prompt-tokens": "5003"})
    assert (status, json.loads(got)) == (200, {"input_tokens": 5003})
    up = last_upstream_request(stack)
    assert up["path"].startswith("/v1/messages/count_tokens")
    r = stack.row(h["x-request-id"])
    assert (r["model"], r["verdict"], r["status"], r["outcome"]) == ("mock-claude", "allow", 200,
                                                                     "complete")
    assert (r["prompt_tokens"], r["cost_micros"], r["estimated_tokens"],
            r["estimated_cost_micros"]) == (None, None, None, None)
    # the third call in the minute is refused, in Anthropic's shape
    status, h, got = stack.gateway("POST", path, body, headers={"x-api-key": key})
    assert status == 429 and json.loads(got)["type"] == "error"
    status, _, got = stack.gateway("POST", path, dict(body, model="mock-gpt"),
                                   headers={"x-api-key": key})
    assert status == 403 and json.loads(got)["error"]["type"] == "permission_error"
    unknown = stack.gateway("POST", path, body, headers={"x-api-key": "tly_" + "Q" * 43})
    assert unknown[0] == 401


def test_model_lists_are_the_gateways_own(stack):
    """GET /v1/models (Open WebUI, LibreChat, Claude Code) is answered by the gateway from
    the key's allow-list, never by a provider: OpenAI's shape, or Anthropic's for a client
    that sends anthropic-version or x-api-key; one model by id; a row per call that
    bills nothing."""
    stack.mock_clear()
    status, h, got = stack.gateway("GET", "/v1/models", key=stack.key)
    assert status == 200 and h["content-type"] == "application/json", got
    listed = json.loads(got)
    assert listed["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in listed["data"]] == \
        [("mock-gpt", "model", "mock-openai")]
    assert isinstance(listed["data"][0]["created"], int)
    r = stack.row(h["x-request-id"])
    assert (r["verdict"], r["status"], r["outcome"], r["prompt_tokens"], r["cost_micros"],
            r["estimated_tokens"], r["estimated_cost_micros"]) == \
        ("models_listed", 200, "complete", None, None, None, None)
    status, _, got = stack.gateway("GET", "/v1/models",
                                   headers={"x-api-key": stack.key, "anthropic-version": "2023-06-01"})
    listed = json.loads(got)
    assert status == 200 and [m["id"] for m in listed["data"]] == ["mock-claude"]
    assert (listed["data"][0]["type"], listed["has_more"], listed["first_id"], listed["last_id"]) == \
        ("model", False, "mock-claude", "mock-claude")
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", listed["data"][0]["created_at"])
    # a restricted key sees what it may use, and nothing else exists for it
    key = stack.create_key("lister", "--models", "mock-claude")
    assert wait_for(lambda: stack.gateway("GET", "/v1/models/mock-claude",
                                          headers={"x-api-key": key})[0] == 200, 3)
    status, _, got = stack.gateway("GET", "/v1/models", key=key)
    assert (status, json.loads(got)["data"]) == (200, [])
    status, h, got = stack.gateway("GET", "/v1/models/mock-gpt", headers={"x-api-key": key})
    assert status == 404 and json.loads(got)["error"]["type"] == "not_found_error"
    assert_error(*stack.gateway("GET", "/v1/models", key="tly_" + "W" * 43), 401,
                 "invalid_api_key")
    assert_error(*stack.gateway("GET", "/v1/models"), 401, "missing_api_key")
    assert stack.mock_requests() == []


RESPONSE_USAGE = {"x-mock-prompt-tokens": "1000", "x-mock-cached-tokens": "200",
                  "x-mock-completion-tokens": "500", "x-mock-reasoning-tokens": "50"}


def test_responses_api_is_accounted_exactly(stack):
    """POST /v1/responses (Codex CLI, the Agents SDK): unary answers read by json_query or
    the capture filter, streams whose only usage is their terminal event
    (response.completed, .incomplete or .failed), each row exact to the token and the
    micro-dollar; the stream reaches the client as the upstream sent it; a stream cut
    before its terminal event is charged its estimate, never 0."""
    stack.tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai", "--input-micros",
                   "1000000", "--output-micros", "4000000", "--cached-micros", "500000")
    time.sleep(0.5)
    # 800 fresh + 200 cached input, 500 output (50 of them reasoning): 800 + 100 + 2000
    want = (1000, 500, 200, 50, 2900)
    for bound in ({"max_output_tokens": 600}, {}):   # json_query, then (2.6) the capture
        body = dict({"model": "mock-gpt", "input": "Say hi."}, **bound)
        status, h, got = stack.gateway("POST", RESPONSES, body, key=stack.key, headers=RESPONSE_USAGE)
        assert status == 200, got
        assert json.loads(got)["usage"]["input_tokens_details"]["cached_tokens"] == 200
        r = stack.row(h["x-request-id"])
        assert (r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"],
                r["reasoning_tokens"], r["cost_micros"]) == want, r
        assert (r["model"], r["stream"], r["usage_source"], r["outcome"]) == \
            ("mock-gpt", 0, "response", "complete")
    body = {"model": "mock-gpt", "input": "Say hi.", "stream": True}
    for end in ("0", "1", "2"):   # completed, incomplete, failed
        headers = dict(RESPONSE_USAGE, **{"x-mock-response-end": end, "x-mock-frames": "40"})
        status, h, got = stack.gateway("POST", RESPONSES, body, key=stack.key, headers=headers)
        assert status == 200
        # the same request as the upstream saw it (a create's id names its X-Request-Id)
        direct = stack.direct("POST", RESPONSES, body,
                              headers=dict(headers, **{"X-Request-Id": h["x-request-id"]}))[2]
        assert got == direct   # untouched: Responses streams are never amended
        assert got.count(b"event: response.output_text.delta") == 40
        r = stack.row(h["x-request-id"])
        assert (r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"],
                r["reasoning_tokens"], r["cost_micros"]) == want, (end, r)
        assert (r["stream"], r["usage_source"], r["estimated_tokens"]) == (1, "stream", None)
    # cut before the terminal event: no usage seen, the estimate is charged
    conn = http.client.HTTPConnection("127.0.0.1", stack.gw_port, timeout=10)
    try:
        conn.request("POST", RESPONSES, json.dumps(dict(body, max_output_tokens=300)),
                     {"Authorization": f"Bearer {stack.key}", "x-mock-disconnect-after": "3"})
        resp = conn.getresponse()
        rid = resp.getheader("x-request-id")
        with pytest.raises(http.client.IncompleteRead):
            resp.read()
    finally:
        conn.close()
    r = stack.row(rid)
    assert r["prompt_tokens"] is None and r["usage_source"] == "none"
    assert r["estimated_tokens"] >= 300 and r["estimated_cost_micros"] > 0
    # compaction is billed as a response; an input count is judged and bills nothing
    status, h, got = stack.gateway("POST", RESPONSES + "/compact", {"model": "mock-gpt", "input": "x"},
                                   key=stack.key, headers=RESPONSE_USAGE)
    assert status == 200 and json.loads(got)["object"] == "response.compaction"
    r = stack.row(h["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"],
            r["reasoning_tokens"], r["cost_micros"]) == want, r
    status, h, got = stack.gateway("POST", RESPONSES + "/input_tokens",
                                   {"model": "mock-gpt", "input": "x" * 30000}, key=stack.key,
                                   headers={"x-mock-prompt-tokens": "7777"})
    assert (status, json.loads(got)["input_tokens"]) == (200, 7777)
    r = stack.row(h["x-request-id"])
    assert (r["outcome"], r["prompt_tokens"], r["cost_micros"], r["estimated_tokens"]) == \
        ("complete", None, None, None)
    assert_no_classes(r)
    # building on state stored upstream: a response no key made, a conversation, or an
    # item whose response (and key) the gateway cannot tell
    stack.mock_clear()
    ref = [{"type": "item_reference", "id": "msg_abc"}]
    for stored, code in (({"previous_response_id": "resp_abc"}, (404, "response_not_found")),
                         ({"conversation": "conv_abc"}, (400, "unsupported_parameter")),
                         ({"input": ref}, (400, "unsupported_parameter"))):
        status, h, got = stack.gateway("POST", RESPONSES, dict({"model": "mock-gpt", "input": "x"},
                                                               **stored), key=stack.key)
        assert_error(status, h, got, *code)
        assert_no_classes(stack.row(h["x-request-id"]))
    assert stack.mock_requests() == []
    # an Anthropic model is not served here, and a key's allow-list holds
    assert_error(*stack.gateway("POST", RESPONSES, {"model": "mock-claude", "input": "x"},
                                key=stack.key), 400, "model_api_mismatch")
    key = stack.create_key("responses-claude-only", "--models", "mock-claude")
    assert wait_for(lambda: stack.gateway("POST", RESPONSES, {"model": "mock-gpt", "input": "x"},
                                          key=key)[0] == 403, 3)


def response_id_of(body):
    """The id of a Responses answer: a unary object's, or a stream's first event's."""
    if body.startswith(b"{"):
        return json.loads(body)["id"]
    first = next(line for line in body.split(b"\n") if line.startswith(b"data:"))
    event = json.loads(first[5:])
    assert event["type"] == "response.created"
    return event["response"]["id"]


def stored_paths(rid):
    return (("GET", f"{RESPONSES}/{rid}"), ("DELETE", f"{RESPONSES}/{rid}"),
            ("POST", f"{RESPONSES}/{rid}/cancel"), ("GET", f"{RESPONSES}/{rid}/input_items"))


# Schema 7's usage classes: NULL in a row that bills nothing, as the other counts.
USAGE_CLASSES = ("cache_creation_1h_tokens", "audio_input_tokens", "audio_output_tokens",
                 "accepted_prediction_tokens", "rejected_prediction_tokens", "web_search_calls")


def assert_no_classes(row):
    assert {c: row[c] for c in USAGE_CLASSES} == dict.fromkeys(USAGE_CLASSES), row


def test_stored_responses_belong_to_the_key_that_made_them(stack):
    """GET and DELETE /v1/responses/ID, its cancel and input_items reach the upstream only
    for the key whose create made ID, read at once after the create (the gateway waits
    for the create's record), whether its answer was read by json_query, by the capture
    filter, or streamed; another key, or an id no key made, gets 404 before any upstream
    sees it; the reads bill nothing though the answers carry usage; the ownership
    outlives the agent."""
    other = stack.create_key("stored-other", "--default-model", "mock-gpt")
    assert wait_for(lambda: stack.gateway("GET", "/v1/models", key=other)[0] == 200, 3)
    made = []
    for n, extra in enumerate(({"max_output_tokens": 100}, {}, {"stream": True})):
        body = dict({"model": "mock-gpt", "input": f"remember {n}"}, **extra)
        status, _, got = stack.gateway("POST", RESPONSES, body, key=stack.key,
                                       headers=RESPONSE_USAGE)
        assert status == 200, got
        rid = response_id_of(got)
        status, h, got = stack.gateway("GET", f"{RESPONSES}/{rid}", key=stack.key,
                                       headers=RESPONSE_USAGE)
        assert status == 200, (extra, got)
        assert json.loads(got)["id"] == rid and json.loads(got)["usage"]["input_tokens"] == 1000
        r = stack.row(h["x-request-id"])
        assert (r["outcome"], r["model"], r["provider"], r["verdict"]) == \
            ("complete", "mock-gpt", "mock-openai", "allow"), r
        assert (r["prompt_tokens"], r["completion_tokens"], r["cost_micros"],
                r["estimated_tokens"], r["usage_source"]) == (None, None, None, None, "none"), r
        assert_no_classes(r)
        made.append(rid)
    assert len(set(made)) == 3
    # Without the wait about a quarter of these reads came before the create's record.
    for n in range(20):
        body = {"model": "mock-gpt", "input": f"at once {n}", "stream": n % 2 == 1}
        rid = response_id_of(stack.gateway("POST", RESPONSES, body, key=stack.key)[2])
        status, _, got = stack.gateway("GET", f"{RESPONSES}/{rid}", key=stack.key)
        assert status == 200, (n, got)
    # store false (Codex CLI): nothing stored upstream, nothing kept here
    unstored = response_id_of(stack.gateway("POST", RESPONSES, {"model": "mock-gpt", "input": "x",
                                                               "store": False}, key=stack.key)[2])
    stack.mock_clear()
    assert_error(*stack.gateway("GET", f"{RESPONSES}/{unstored}", key=stack.key), 404,
                 "response_not_found")
    for method, path in stored_paths(made[0]):
        assert_error(*stack.gateway(method, path, key=other), 404, "response_not_found")
    for method, path in stored_paths("resp_nobody"):
        assert_error(*stack.gateway(method, path, key=stack.key), 404, "response_not_found")
    assert_error(*stack.gateway("PUT", f"{RESPONSES}/{made[0]}", key=stack.key), 404,
                 "unsupported_endpoint")
    assert stack.mock_requests() == []
    for method, path in stored_paths(made[1]):
        status, _, got = stack.gateway(method, path, key=stack.key)
        assert status == 200, (method, path, got)
    assert [(q["method"], q["path"]) for q in stack.mock_requests()] == list(stored_paths(made[1]))
    # the writer commits within ~10 ms of the last create's row
    assert wait_for(lambda: stored_count(stack) == 23, 5)
    con = sqlite3.connect(f"file:{stack.db}?mode=ro", uri=True)
    try:
        kept = con.execute("SELECT response_id, key_id, model FROM stored_responses"
                           " ORDER BY created_at, rowid").fetchall()
    finally:
        con.close()
    key_id = stack.rows("request_id = ?", (h["x-request-id"],))[0]["key_id"]
    assert kept[:3] == [(rid, key_id, "mock-gpt") for rid in made] and len(kept) == 23
    # a create may build on the key's own stored response, read at once, and is billed
    # as any create; on another key's it is refused before any upstream sees it
    chained = []
    for n in range(10):
        body = {"model": "mock-gpt", "input": f"next {n}",
                "previous_response_id": chained[-1] if chained else made[0]}
        status, h, got = stack.gateway("POST", RESPONSES, body, key=stack.key,
                                       headers=RESPONSE_USAGE)
        assert status == 200, (n, got)
        chained.append(json.loads(got)["id"])
        r = stack.row(h["x-request-id"])
        assert (r["prompt_tokens"], r["completion_tokens"], r["usage_source"]) == \
            (1000, 500, "response"), r
    stack.mock_clear()
    assert_error(*stack.gateway("POST", RESPONSES, {"model": "mock-gpt", "input": "x",
                                                    "previous_response_id": chained[-1]},
                                key=other), 404, "response_not_found")
    assert_error(*stack.gateway("POST", RESPONSES, {"model": "mock-gpt", "input": "x",
                                                    "previous_response_id": made[0],
                                                    "conversation": "conv_1"},
                                key=stack.key), 400, "unsupported_parameter")
    assert stack.mock_requests() == []
    # a new agent loads who made what
    stack.stop_agent()
    stack.start_agent()
    status, _, got = stack.gateway("GET", f"{RESPONSES}/{made[2]}", key=stack.key)
    assert status == 200, got
    assert_error(*stack.gateway("GET", f"{RESPONSES}/{made[2]}", key=other), 404,
                 "response_not_found")


def stored_count(s):
    return s.scalar("SELECT count(*) FROM stored_responses")


@BOTH_STORES
def test_two_keys_equal_creates_each_read_their_own(stack):
    """Two keys send the same Responses create: the upstream gives each its own id (as
    OpenAI does; the mock mixes in the gateway's X-Request-Id), so each key reads its
    own response, and neither the other's."""
    other = stack.create_key("same-create", "--default-model", "mock-gpt")
    assert wait_for(lambda: stack.gateway("GET", "/v1/models", key=other)[0] == 200, 3)
    body = {"model": "mock-gpt", "input": "the same words"}
    ids = []
    for key in (stack.key, other):
        status, _, got = stack.gateway("POST", RESPONSES, body, key=key)
        assert status == 200, got
        ids.append(response_id_of(got))
    assert ids[0] != ids[1]
    for key, mine, theirs in ((stack.key, ids[0], ids[1]), (other, ids[1], ids[0])):
        assert stack.gateway("GET", f"{RESPONSES}/{mine}", key=key)[0] == 200
        assert_error(*stack.gateway("GET", f"{RESPONSES}/{theirs}", key=key), 404,
                     "response_not_found")


def test_stored_responses_past_the_table_are_read_from_the_database(tmp_path, store, request):
    """An agent that keeps two ids in memory still knows who made the older ones: a full
    table sends a miss to stored_responses. Another key's flood of creates therefore
    costs nobody their responses."""
    s = Stack(tmp_path, agent_args=("--stored-responses", "2"), **store_params(store, request))
    try:
        s.start()
        other = s.create_key("flooder", "--default-model", "mock-gpt")
        assert wait_for(lambda: s.gateway("GET", "/v1/models", key=other)[0] == 200, 3)
        mine = response_id_of(s.gateway("POST", RESPONSES, {"model": "mock-gpt", "input": "keep"},
                                        key=s.key)[2])
        for n in range(5):
            assert s.gateway("POST", RESPONSES, {"model": "mock-gpt", "input": f"flood {n}"},
                             key=other)[0] == 200
        # (a table of two forgets ids faster than the writer stores them)
        assert wait_for(lambda: stored_count(s) == 6, 5)
        assert s.gateway("GET", f"{RESPONSES}/{mine}", key=s.key)[0] == 200
        assert_error(*s.gateway("GET", f"{RESPONSES}/{mine}", key=other), 404,
                     "response_not_found")
        assert_error(*s.gateway("GET", f"{RESPONSES}/resp_nobody", key=s.key), 404,
                     "response_not_found")
    finally:
        s.close()


def test_stored_response_waits_are_bounded(stack):
    """While the key has a create in flight, a read of an id nobody made waits for the
    create's record, 200 ms at most, then gets its 404; if the agent dies meanwhile, the
    fail policy answers, not the stale refusal. Background work and a chosen request_id
    are refused: one's usage would come only to unbilled reads, the other names the
    response on some servers."""
    for extra in ({"background": True}, {"request_id": "resp_mine"}):
        assert_error(*stack.gateway("POST", RESPONSES, dict({"model": "mock-gpt", "input": "x"},
                                                            **extra), key=stack.key),
                     400, "unsupported_parameter")
    pool = concurrent.futures.ThreadPoolExecutor(2)
    try:
        slow = pool.submit(stack.gateway, "POST", RESPONSES, {"model": "mock-gpt", "input": "slow"},
                           key=stack.key, headers={"x-mock-ttfb-ms": "4000"})
        time.sleep(0.5)
        t0 = time.monotonic()
        assert_error(*stack.gateway("GET", f"{RESPONSES}/resp_nobody", key=stack.key), 404,
                     "response_not_found")
        assert 0.15 <= time.monotonic() - t0 < 1.5
        waiting = pool.submit(stack.gateway, "GET", f"{RESPONSES}/resp_nobody", key=stack.key)
        time.sleep(0.08)
        stack.kill_agent()
        assert_error(*waiting.result(timeout=10), 503, "gateway_unavailable")
        assert slow.result(timeout=10)[0] == 200
    finally:
        pool.shutdown()
    stack.start_agent()


def test_ambiguous_bodies_are_refused(stack):
    for body in (b'{"model":"mock-gpt","MODEL":"mock-claude"}',
                 b'{"Model":"mock-claude"}',
                 b'{"model":"mock-gpt","\\u017ftream":true}',
                 b'{"model":"mock-gpt","mod\\u0065l":"mock-claude"}'):
        assert_error(*stack.gateway("POST", CHAT, body, key=stack.key), 400, "invalid_body")


def test_client_request_id_and_account_headers_do_not_pass(stack):
    stack.mock_clear()
    status, hdrs, _ = stack.gateway("POST", CHAT, chat(), key=stack.key,
                                    headers={"X-Request-Id": "client-chosen",
                                             "OpenAI-Organization": "org-x",
                                             "OpenAI-Project": "proj-y"})
    assert status == 200
    up = last_upstream_request(stack)["headers"]
    ids = [v for k, v in up if k.lower() == "x-request-id"]
    assert ids == [hdrs["x-request-id"]] and ids[0] != "client-chosen"
    names = {k.lower() for k, _ in up}
    assert "openai-organization" not in names and "openai-project" not in names


def test_body_larger_than_the_buffer(stack):
    prompt = "x" * 40000
    # model first: read from the prefix the agent sees
    body = json.dumps({"model": "mock-claude", "max_tokens": 5,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    status, _, got = stack.gateway("POST", MESSAGES, body, headers={"x-api-key": stack.key})
    assert status == 200, got
    assert json.loads(got)["model"] == "mock-claude"
    assert last_upstream_request(stack)["body_len"] == len(body)
    # model after the prompt (as the OpenAI SDK sends it)
    body = json.dumps({"messages": [{"role": "user", "content": prompt}],
                       "model": "mock-gpt"}).encode()
    status, _, got = stack.gateway("POST", CHAT, body, key=stack.key)
    assert status == 200, got
    up = last_upstream_request(stack)
    if JUDGED_WHOLE:
        # judged whole (3.4+): the body goes up as it came
        assert up["body_sha256"] == hashlib.sha256(body).hexdigest()
    else:
        # routed by the key's default; whether it is a stream shows only after the
        # cut: the body went up 40 bytes longer, the room the usage amendment would
        # have taken, as spaces before its last brace
        assert up["body_len"] == len(body) + 40
        assert up["body_sha256"] == hashlib.sha256(body[:-1] + b" " * 40 + b"}").hexdigest()
    # a key restricted to some models, without a default, is served too: the agent
    # judges the whole body (3.4+), or routes it to the one provider of its models and
    # the capture filter judges the model past the cut
    key = stack.create_key("restricted", "--models", "mock-gpt")
    assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=key)[0] == 200, 3)
    status, h, got = stack.gateway("POST", CHAT, body, key=key,
                                   headers={"x-mock-prompt-tokens": "10100"})
    assert status == 200, got
    r = stack.row(h["x-request-id"])
    assert (r["model"], r["prompt_tokens"], r["outcome"]) == ("mock-gpt", 10100, "complete")
    # ...and a model it may not use is never served
    other = body.replace(b'"mock-gpt"', b'"mock-claude"')
    status, h, got = stack.gateway("POST", CHAT, other, key=key)
    if JUDGED_WHOLE:
        assert_error(status, h, got, 403, "model_not_allowed")
    else:
        # spoiled past the cut: the gateway's refusal, not the upstream's answer to it
        assert_error(status, h, got, 403, "model_not_allowed")
        assert last_upstream_request(stack)["body_sha256"] != hashlib.sha256(other).hexdigest()
    r = stack.row(h["x-request-id"])
    assert (r["verdict"], r["outcome"]) == ("model_not_allowed", "denied")
    # ...while a body that fits the inspected window (about 14 KiB with the default
    # tune.bufsize) is judged whole
    fits = json.dumps({"messages": [{"role": "user", "content": "y" * 12000}],
                       "model": "mock-gpt"}).encode()
    assert stack.gateway("POST", CHAT, fits, key=key)[0] == 200
    assert_error(*stack.gateway("POST", CHAT, fits.replace(b'"mock-gpt"', b'"mock-claude"'),
                                key=key), 403, "model_not_allowed")


def long_prompt(size, tail, head=None):
    """A chat body of exactly size bytes, its prompt first and tail's members last."""
    start = json.dumps(dict(head or {}, messages=[{"role": "user", "content": ""}]))
    rest = json.dumps(tail)[1:]
    pad = size - len(start) - len(rest) - 1
    return (start[:-4] + "x" * pad + '"}]' + ", " + rest).encode()


def long_bodies_metric(stack, result):
    text = urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics",
                                  timeout=5).read().decode()
    m = re.search(rf'^tally_long_bodies_total{{result="{result}"}} (\d+)$', text, re.M)
    return int(m.group(1))


def test_long_prompts_judged_whole_on_large_buffers(stack):
    """HAProxy 3.4 sends a body longer than one SPOP frame to the agent in pieces: up to
    1 MiB it is judged whole, so model, stream and the allow-list count wherever they
    stand (the OpenAI Python SDK puts model last, Claude Code stream). Older versions
    judge the first frame (the rest: test_body_larger_than_the_buffer, test_integrity)."""
    nodefault = stack.create_key("long-nodefault")
    only = stack.create_key("long-only", "--models", "mock-gpt")
    assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=only)[0] == 200, 3)
    body = long_prompt(40000, {"model": "mock-gpt"})
    status, h, got = stack.gateway("POST", CHAT, body, key=nodefault)
    if not JUDGED_WHOLE:
        assert_error(status, h, got, 400, "model_required")
        return
    whole = long_bodies_metric(stack, "whole")
    assert status == 200, got
    assert last_upstream_request(stack)["body_sha256"] == hashlib.sha256(body).hexdigest()
    # stream past the cut: the usage amendment is an exact edit, the row a stream
    body = long_prompt(60000, {"model": "mock-gpt", "stream": True})
    status, h, got = stack.gateway("POST", CHAT, body, key=nodefault,
                                   headers={"x-mock-frames": "3", "x-mock-prompt-tokens": "15000"})
    assert status == 200 and b'"usage":{' not in got
    # the agent's edit, as for a short body: the member first in the object
    sent = b'{"stream_options":{"include_usage":true},' + body[1:]
    assert last_upstream_request(stack)["body_sha256"] == hashlib.sha256(sent).hexdigest()
    r = stack.row(h["x-request-id"])
    assert (r["stream"], r["prompt_tokens"], r["usage_source"]) == (1, 15000, "stream")
    # 1 MiB, the most tally.cfg sends in pieces: the allow-list judges its last member
    body = long_prompt(JUDGED_WHOLE, {"model": "mock-claude"})
    assert len(body) == JUDGED_WHOLE
    assert_error(*stack.gateway("POST", CHAT, body, key=only), 403, "model_not_allowed")
    body = long_prompt(JUDGED_WHOLE, {"model": "mock-gpt"})
    status, h, got = stack.gateway("POST", CHAT, body, key=only)
    assert status == 200, got
    assert last_upstream_request(stack)["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert long_bodies_metric(stack, "whole") == whole + 3
    # a byte more and the first frame decides; the capture filter judges the model
    body = long_prompt(JUDGED_WHOLE + 1, {"model": "mock-claude"})
    status, h, got = stack.gateway("POST", CHAT, body, key=only)
    assert_error(status, h, got, 403, "model_not_allowed")
    assert stack.row(h["x-request-id"])["outcome"] == "denied"
    assert long_bodies_metric(stack, "whole") == whole + 3
    # a stranger's long body is answered on its first frame: HAProxy never waits for
    # the rest of it in a large buffer
    sock = socket.create_connection(("127.0.0.1", stack.gw_port), timeout=10)
    try:
        sock.sendall((f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tly_{'Z' * 43}"
                      "\r\nContent-Type: application/json\r\nContent-Length: 500000\r\n\r\n").encode()
                     + body[:20000])
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        assert resp.status == 401
    finally:
        sock.close()
    # pieces need the agent: without it the fail policy answers, as for any request
    stack.kill_agent(signal.SIGKILL)
    assert_error(*stack.gateway("POST", CHAT, long_prompt(40000, {"model": "mock-gpt"}),
                                key=only), 503, "gateway_unavailable")


@pytest.mark.parametrize("path,model,other", [(CHAT, "mock-gpt", "mock-claude"),
                                              (MESSAGES, "mock-claude", "mock-gpt")])
def test_restricted_key_long_body_with_model_first(stack, path, model, other):
    """A key restricted to some models sends a 49 KB prompt with model first (Claude
    Code, the Anthropic SDK): judged on the prefix and served, not 413. A second model
    past the cut, which the upstream would take, spoils the body before its end goes up:
    the forbidden model is never served."""
    key = stack.create_key(f"only-{model}", "--models", model)
    body = json.dumps({"model": model, "max_tokens": 5,
                       "messages": [{"role": "user", "content": "z" * 49000}]}).encode()
    assert wait_for(lambda: stack.gateway("POST", path, body, key=key)[0] == 200, 3)
    status, h, got = stack.gateway("POST", path, body, key=key,
                                   headers={"x-mock-prompt-tokens": "12300"})
    assert status == 200 and json.loads(got)["model"] == model
    up = last_upstream_request(stack)
    if path == MESSAGES:
        assert up["body_sha256"] == hashlib.sha256(body).hexdigest()
    r = stack.row(h["x-request-id"])
    assert (r["model"], r["prompt_tokens"], r["verdict"]) == (model, 12300, "allow")
    forbidden = body.replace(f'"{model}"'.encode(), f'"{other}"'.encode(), 1)
    assert stack.gateway("POST", path, forbidden, key=key)[0] == 403
    second = body[:-1] + f', "model": "{other}"}}'.encode()
    status, h, got = stack.gateway("POST", path, second, key=key)
    assert status == 400, got
    assert last_upstream_request(stack)["body_sha256"] != hashlib.sha256(second).hexdigest()
    # judged whole, or spoiled past the cut: the gateway refuses it either way
    r = stack.row(h["x-request-id"])
    assert (r["verdict"], r["outcome"]) == ("invalid_body", "denied")


def send_chunked(port, key, chunks, pause=0.3):
    """POSTs a chunked body, pausing between chunks so that HAProxy may decide on the
    first; returns (status, body)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall((f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
        try:
            for chunk in chunks:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                time.sleep(pause)
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass   # HAProxy answered before the body ended: read what it said
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, resp.read()
    finally:
        sock.close()


def test_chunked_body_cannot_slip_past_an_allow_list(stack):
    """Without a Content-Length HAProxy's body size is only what it buffered: a
    whitespace prefix filling the buffer must not pass for an empty body."""
    key = stack.create_key("gpt-only-chunked", "--models", "mock-gpt", "--default-model", "mock-gpt")
    assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=key)[0] == 200, 3)
    rest = json.dumps({"model": "mock-claude", "messages": []}).encode()
    for pad in (15000, 15100, 16000, 20000):
        status, body = send_chunked(stack.gw_port, key, [b" " * pad, rest])
        assert status in (403, 413), (pad, status, body)   # seen whole, or refused unseen
    # a whole chunked JSON object is judged as such
    status, body = send_chunked(stack.gw_port, key, [json.dumps(chat()).encode()], pause=0)
    assert status == 200, body


def test_concurrent_pipelined_decisions(stack):
    def one(i):
        status, hdrs, body = stack.gateway("POST", CHAT, chat(user=f"u{i}"), key=stack.key)
        return status, hdrs["x-request-id"]

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(400)))
    assert [s for s, _ in results] == [200] * 400
    assert len({rid for _, rid in results}) == 400


@BOTH_STORES
def test_agent_killed_fail_closed_then_restarted(stack):
    assert stack.gateway("POST", CHAT, chat(), key=stack.key)[0] == 200
    stack.kill_agent(signal.SIGKILL)
    status, hdrs, body = stack.gateway("POST", CHAT, chat(), key=stack.key)
    assert_error(status, hdrs, body, 503, "gateway_unavailable")
    assert hdrs["retry-after"] == "1"
    stack.wait_agent_state("DOWN")
    stack.mock_clear()
    assert stack.gateway("POST", CHAT, chat(), key=stack.key)[0] == 503
    assert stack.mock_requests() == []
    stack.start_agent()
    stack.wait_agent_state("UP")
    assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=stack.key)[0] == 200, 5)
    assert stack.gateway("POST", CHAT, chat(), key="tly_bad")[0] == 401


def test_agent_killed_fail_open_forwards(failopen_stack):
    stack = failopen_stack
    stack.kill_agent(signal.SIGKILL)
    stack.mock_clear()
    status, hdrs, body = stack.gateway("POST", CHAT, chat(), key=stack.key)
    assert status == 200, body
    up = headers_of(last_upstream_request(stack))
    assert up["authorization"] == f"Bearer {MOCK_CREDENTIAL}"
    assert REQUEST_ID.match(hdrs["x-request-id"])
    # a request without even a gateway key is never forwarded, whatever the policy
    stack.mock_clear()
    assert_error(*stack.gateway("POST", CHAT, chat()), 503, "gateway_unavailable")
    assert_error(*stack.gateway("POST", CHAT, chat(), headers={"Authorization": "Bearer sk-x"}),
                 503, "gateway_unavailable")
    # nor one that the agent would have refused on its face: wrong endpoint or method,
    # a key that is not even shaped like one
    assert stack.gateway("GET", "/v1/files", key=stack.key)[0] == 503
    assert stack.gateway("DELETE", "/v1/files/abc", key=stack.key)[0] == 503
    assert stack.gateway("POST", "/v1/chat/completions/x", chat(), key=stack.key)[0] == 503
    assert stack.gateway("POST", CHAT, chat(), key="tly_garbage")[0] == 503
    assert stack.gateway("POST", CHAT, chat(), headers={"x-api-key": "tly_" + "A" * 44})[0] == 503
    assert stack.mock_requests() == []
    assert stack.gateway("POST", CHAT, chat(), headers={"x-api-key": stack.key})[0] == 200


def test_larger_buffer_still_decides_every_request(tmp_path):
    """With tune.bufsize raised but the agent's frames left at their default, the capped
    SPOE arguments still fit one frame: a long body is decided, never left to the fail
    policy, which here would forward it unjudged."""
    stack = Stack(tmp_path, fail_policy="open", bufsize=32768)
    try:
        stack.start()
        key = stack.create_key("gpt-only-big", "--models", "mock-gpt")
        assert wait_for(lambda: stack.gateway("POST", CHAT, chat(), key=key)[0] == 200, 3)
        body = json.dumps({"model": "mock-claude",
                           "messages": [{"role": "user", "content": "z" * 20000}]}).encode()
        assert_error(*stack.gateway("POST", CHAT, body, key="tly_" + "B" * 43), 401,
                     "invalid_api_key")
        status, _, _ = stack.gateway("POST", CHAT, body, key=key)
        assert status in (403, 413)
        assert stack.gateway("POST", CHAT, body.replace(b"mock-claude", b"mock-gpt"),
                             key=stack.key)[0] == 200
    finally:
        stack.close()


def test_health_check_marks_agent_up_and_down(stack):
    assert stack.agent_state().startswith("UP")
    stack.kill_agent(signal.SIGTERM)
    stack.wait_agent_state("DOWN")
    stack.start_agent()
    stack.wait_agent_state("UP")


def test_agent_stops_cleanly_on_sigterm(stack):
    assert stack.gateway("POST", CHAT, chat(), key=stack.key)[0] == 200
    p = stack.kill_agent(signal.SIGTERM)
    assert p.p.returncode == 0, p.output()
