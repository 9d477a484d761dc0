"""Cost as providers bill it (docs/pricing.md), through the real HAProxy, agent, mock
and SQLite: every usage class the mock reports on request lands in its column, and each
row's cost equals, to the micro-dollar, the price sheet below worked out here in Python
(the card of the tier served, else asked for, with the largest threshold below the
prompt; each class out of the count it belongs to; a class the card does not price at
the card's dearest token rate, a web search at $0.05, a tier without a card at the
dearest tier's card, each named in priced_fallback). The row is priced by the model
routed to, whatever other name the answer gives."""
import json
import re
import socket
import time
import urllib.request

import pytest

from stack import Stack

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"

CLASSES = ["input", "cached", "cache_write", "cache_write_1h", "output", "reasoning",
           "audio_input", "audio_output"]

# model -> [(tier, above_tokens, {class: micro-dollars per Mtok, "web_search": per call})]
SHEET = {
    "mock-gpt": [
        ("default", 0, {"input": 2500000, "cached": 1250000, "cache_write": 3125000,
                        "output": 10000000, "audio_input": 40000000,
                        "audio_output": 80000000}),
        ("priority", 0, {"input": 4250000, "cached": 2125000, "cache_write": 5000000,
                         "output": 17000000, "reasoning": 20000000,
                         "audio_input": 70000000, "audio_output": 140000000,
                         "web_search": 25000}),
        ("flex", 0, {"input": 1250000, "cached": 625000, "cache_write": 1500000,
                     "output": 5000000}),
    ],
    "mock-claude": [
        ("default", 0, {"input": 3000000, "cached": 300000, "cache_write": 3750000,
                        "cache_write_1h": 6000000, "output": 15000000, "web_search": 10000}),
        ("default", 200000, {"input": 6000000, "cached": 600000, "cache_write": 7500000,
                             "cache_write_1h": 12000000, "output": 22500000,
                             "web_search": 10000}),
        ("priority", 0, {"input": 5000000, "cached": 500000, "cache_write": 6250000,
                         "output": 25000000}),
    ],
}

OPTION = {"input": "--input-micros", "cached": "--cached-micros",
          "cache_write": "--cache-write-micros", "cache_write_1h": "--cache-write-1h-micros",
          "output": "--output-micros", "reasoning": "--reasoning-micros",
          "audio_input": "--audio-input-micros", "audio_output": "--audio-output-micros",
          "web_search": "--web-search-micros-per-call"}


FALLBACK_WEB_SEARCH = 50000   # micro-dollars per call (spoa/price.h)


def card_of(model, tier, prompt):
    tier = "default" if tier in (None, "", "standard", "auto") else tier
    best = None
    for t, above, prices in SHEET[model]:
        if t == tier and (best is None or above < prompt):
            best = prices
    return best


def expected_priced(row):
    """(cost, priced_fallback) of the row under SHEET: a tier without a card is priced
    by the tier whose card charges it most."""
    model, prompt = row["model_requested"], row["prompt_tokens"] or 0
    card = card_of(model, row["service_tier"], prompt)
    if card is not None:
        return card_cost(card, row)
    tiers = {t for t, _, _ in SHEET[model]}
    cost, names = max(card_cost(card_of(model, t, prompt), row) for t in tiers
                      if card_of(model, t, prompt) is not None)
    return cost, ",".join(filter(None, [names, "tier"]))


def expected_cost(row):
    return expected_priced(row)[0]


def card_cost(card, row):
    dearest = max(v for k, v in card.items() if k != "web_search")
    fallback = []
    n = {k: row[k] or 0 for k in row if k.endswith("_tokens") or k == "web_search_calls"}
    reasoning = n["reasoning_tokens"] if "reasoning" in card else 0
    parts = [
        ("input", n["prompt_tokens"] - n["cached_tokens"] - n["cache_creation_tokens"]
         - n["audio_input_tokens"]),
        ("cached", n["cached_tokens"]),
        ("cache_write", n["cache_creation_tokens"] - n["cache_creation_1h_tokens"]),
        ("cache_write_1h" if "cache_write_1h" in card else "cache_write",
         n["cache_creation_1h_tokens"]),
        ("audio_input", n["audio_input_tokens"]),
        ("output", n["completion_tokens"] - n["audio_output_tokens"] - reasoning),
        ("reasoning", reasoning),
        ("audio_output", n["audio_output_tokens"]),
    ]
    total = 0
    for cls, count in parts:
        if count:
            if cls not in card and cls not in fallback:
                fallback.append(cls)
            total += count * card.get(cls, dearest)
    if n["web_search_calls"]:
        if "web_search" not in card:
            fallback.append("web_search")
        total += n["web_search_calls"] * card.get("web_search", FALLBACK_WEB_SEARCH) * 1000000
    order = CLASSES + ["web_search"]
    return (total + 500000) // 1000000, ",".join(sorted(fallback, key=order.index))


@pytest.fixture
def stack(tmp_path):
    s = Stack(tmp_path)
    try:
        s.start()
        for model, cards in SHEET.items():
            for tier, above, prices in cards:
                args = ["prices", "set", model, "--tier", tier, "--above", str(above)]
                for cls, v in prices.items():
                    args += [OPTION[cls], str(v)]
                s.tallyctl(*args)
        time.sleep(0.6)   # the agent reloads prices within its reload interval
        yield s
    finally:
        s.close()


def ask(stack, path, model, knobs, stream=False, extra=None):
    body = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    if path == RESPONSES:
        body = {"model": model, "input": "hi", "max_output_tokens": 64, "store": False}
    if stream:
        body["stream"] = True
    body.update(extra or {})
    status, h, data = stack.gateway("POST", path, body, key=stack.key,
                                    headers={f"x-mock-{k}": str(v) for k, v in knobs.items()})
    assert status == 200, data
    return stack.row(h["x-request-id"])


OPENAI_CLASSES = {"prompt-tokens": 1000, "completion-tokens": 400, "cached-tokens": 200,
                  "cache-write-tokens": 50, "audio-input-tokens": 300,
                  "audio-output-tokens": 100, "reasoning-tokens": 60,
                  "accepted-prediction-tokens": 20, "rejected-prediction-tokens": 10}


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("stream", [False, True])
def test_openai_classes_and_tiers(stack, stream, path):
    for tier in ("priority", "default", None):
        knobs = dict(OPENAI_CLASSES)
        if tier:
            knobs["service-tier"] = tier
        row = ask(stack, path, "mock-gpt", knobs, stream)
        assert (row["prompt_tokens"], row["completion_tokens"], row["cached_tokens"],
                row["cache_creation_tokens"], row["reasoning_tokens"]) == (1000, 400, 200, 50, 60)
        assert (row["audio_input_tokens"], row["audio_output_tokens"],
                row["accepted_prediction_tokens"], row["rejected_prediction_tokens"]) == \
            (300, 100, 20, 10)
        assert row["service_tier"] == tier
        assert row["usage_source"] == ("stream" if stream else "response")
        assert row["cost_micros"] == expected_cost(row) is not None, row
    # priority: 450 x 4.25 + 200 x 2.125 + 50 x 5 + 300 x 70 + 240 x 17 + 60 x 20
    # + 100 x 140 (dollars per Mtok) = $0.0428675, rounded to the nearest micro-dollar
    assert stack.rows("service_tier = 'priority'")[0]["cost_micros"] == 42868


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_hour_writes_searches_and_long_context(stack, stream):
    knobs = {"prompt-tokens": 1000, "completion-tokens": 500, "cached-tokens": 2000,
             "cache-creation-tokens": 3000, "cache-1h-tokens": 1000,
             "web-search-requests": 2, "service-tier": "standard"}
    row = ask(stack, MESSAGES, "mock-claude", knobs, stream)
    assert (row["prompt_tokens"], row["cache_creation_tokens"], row["cache_creation_1h_tokens"],
            row["web_search_calls"], row["service_tier"]) == (6000, 3000, 1000, 2, "standard")
    # $0.003 + 0.0006 + 0.0075 + 0.006 + 0.0075 + 2 searches x $0.01
    assert row["cost_micros"] == expected_cost(row) == 44600
    knobs["prompt-tokens"] = 245000
    row = ask(stack, MESSAGES, "mock-claude", knobs, stream)
    assert row["prompt_tokens"] == 250000
    assert row["cost_micros"] == expected_cost(row) == 1529450
    assert row["priced_fallback"] is None
    # Served at priority, whose card has no web-search price: never free, each search
    # at the stated $0.05, and the row says so.
    knobs.update({"prompt-tokens": 1000, "service-tier": "priority"})
    row = ask(stack, MESSAGES, "mock-claude", knobs, stream)
    assert (row["cost_micros"], row["priced_fallback"]) == expected_priced(row)
    assert row["priced_fallback"] == "web_search"
    # $0.005 + 2000 x 0.5 + 2000 x 6.25 + 1000 x 6.25 (dollars per Mtok; no hour price:
    # at cache_write) + 500 x 25 + 2 x $0.05
    assert row["cost_micros"] == 5000 + 1000 + 12500 + 6250 + 12500 + 100000
    knobs["web-search-requests"] = 0
    del knobs["cache-1h-tokens"]
    row = ask(stack, MESSAGES, "mock-claude", knobs, stream)
    assert row["cost_micros"] == expected_cost(row) is not None
    assert row["priced_fallback"] is None


@pytest.mark.parametrize("stream", [False, True])
def test_responses_cache_writes_and_tier(stack, stream):
    knobs = {"prompt-tokens": 900, "completion-tokens": 300, "cached-tokens": 100,
             "cache-write-tokens": 40, "reasoning-tokens": 30, "service-tier": "flex"}
    row = ask(stack, RESPONSES, "mock-gpt", knobs, stream)
    assert (row["prompt_tokens"], row["cached_tokens"], row["cache_creation_tokens"],
            row["service_tier"]) == (900, 100, 40, "flex")
    assert row["cost_micros"] == expected_cost(row) is not None


@pytest.mark.parametrize("stream", [False, True])
def test_openai_web_searches_are_counted_in_the_answer(stack, stream):
    """OpenAI's usage does not count its web searches: the capture filter counts the
    answer's web_search_call items (a stream's web_search_call.completed events), and
    the row is priced per call on the card that prices them."""
    tools = {"tools": [{"type": "web_search"}], "service_tier": "priority"}
    knobs = {"prompt-tokens": 2000, "completion-tokens": 300, "web-search-requests": 3,
             "service-tier": "priority"}
    row = ask(stack, RESPONSES, "mock-gpt", knobs, stream, extra=tools)
    assert (row["web_search_calls"], row["service_tier"]) == (3, "priority")
    # 2000 x $4.25 + 300 x $17 per Mtok + 3 x $0.025
    assert row["cost_micros"] == expected_cost(row) == 8500 + 5100 + 75000
    # None run: counted as 0, not unknown.
    knobs["web-search-requests"] = 0
    row = ask(stack, RESPONSES, "mock-gpt", knobs, stream, extra=tools)
    assert row["web_search_calls"] == 0 and row["cost_micros"] == 13600
    # The default card prices no web search: refused before the provider.
    status, _, _ = stack.gateway("POST", RESPONSES, {"model": "mock-gpt", "input": "x",
                                                     "tools": [{"type": "web_search"}]},
                                 key=stack.key)
    assert status == 400


def test_tier_asked_for_prices_an_answer_that_names_none(stack):
    """The mock reports no tier unless told: the tier the request named prices it."""
    row = ask(stack, CHAT, "mock-gpt", {"prompt-tokens": 1000, "completion-tokens": 100},
              extra={"service_tier": "flex"})
    assert row["service_tier"] == "flex"
    assert row["cost_micros"] == expected_cost(row) == 1750
    # A tier the model has no card for is priced by its dearest tier's card (priority:
    # 1000 x $4.25 + 100 x $17 per Mtok), named, and not counted unpriced.
    before = stack.counters()["unpriced"]
    row = ask(stack, CHAT, "mock-gpt", {"prompt-tokens": 1000, "completion-tokens": 100,
                                        "service-tier": "scale"})
    assert row["service_tier"] == "scale"
    assert (row["cost_micros"], row["priced_fallback"]) == expected_priced(row) == \
        (5950, "tier")
    assert stack.counters()["unpriced"] == before


def test_mixed_run_costs_to_the_micro_dollar(stack):
    """Every class, tier, API and path together: the sum of the rows' costs and of the
    rollups' is the sheet's, +-0 micro-dollars."""
    cases = []
    for i in range(24):
        knobs = {"prompt-tokens": 100 + 37 * i, "completion-tokens": 50 + 11 * i}
        if i % 3 == 0:
            path, model = MESSAGES, "mock-claude"
            knobs.update({"cached-tokens": 13 * i, "cache-creation-tokens": 20 + i,
                          "cache-1h-tokens": i % 7, "web-search-requests": i % 4})
            if i % 6 == 0:
                knobs["prompt-tokens"] = 200001 + i
        elif i % 3 == 1:
            path, model = CHAT, "mock-gpt"
            knobs.update({"cached-tokens": 7 * i, "audio-input-tokens": 3 * i,
                          "audio-output-tokens": 2 * i, "reasoning-tokens": i,
                          "service-tier": ["default", "priority", "flex"][i % 3]})
        else:
            path, model = RESPONSES, "mock-gpt"
            knobs.update({"cached-tokens": 5 * i, "cache-write-tokens": i,
                          "reasoning-tokens": i, "service-tier": "priority"})
        cases.append(ask(stack, path, model, knobs, stream=i % 2 == 1))
    want = [expected_priced(r) for r in cases]
    assert [(r["cost_micros"], r["priced_fallback"] or "") for r in cases] == want
    want = [c for c, _ in want]
    ids = json.dumps([r["request_id"] for r in cases])
    assert sum(r["cost_micros"] for r in stack.rows(
        "request_id IN (SELECT value FROM json_each(?))", (ids,))) == sum(want)


def test_what_cannot_be_priced_is_refused_before_the_provider(stack):
    """docs/pricing.md: a tier without a card, a tool the provider runs that the model
    does not price (or the provider does not count), audio output the card does not
    price: 400 in the API's shape, and nothing reaches the mock. Keys' own policies
    allow or deny beyond that."""
    def send(path, model, extra, key=None):
        body = {"model": model, "max_tokens": 8, "messages": []}
        if path == RESPONSES:
            body = {"model": model, "input": "hi", "max_output_tokens": 8, "store": False}
        body.update(extra)
        return stack.gateway("POST", path, body, key=key or stack.key)

    stack.mock_clear()
    web = {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    heard = {"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}
    refused = [
        (CHAT, "mock-gpt", {"service_tier": "scale"}),
        (CHAT, "mock-gpt", {"service_tier": "flex", "modalities": ["text", "audio"],
                            "audio": {"voice": "alloy", "format": "wav"}}),
        (CHAT, "mock-gpt", {"web_search_options": {}}),
        (RESPONSES, "mock-gpt", {"tools": [{"type": "web_search"}]}),
        (RESPONSES, "mock-gpt", {"tools": [{"type": "code_interpreter",
                                            "container": {"type": "auto"}}]}),
        (MESSAGES, "mock-claude", dict(web, service_tier="priority")),
        (MESSAGES, "mock-claude", {"tools": [{"type": "function", "Type": "mcp"}]}),
        # Audio input on the flex card, which does not price it.
        (CHAT, "mock-gpt", dict(heard, service_tier="flex")),
    ]
    for path, model, extra in refused:
        status, h, body = send(path, model, extra)
        assert status == 400, (path, extra, body)
        err = json.loads(body)["error"]
        assert err["type"] == "invalid_request_error", err
        if path != MESSAGES:
            assert err["code"] == "unsupported_value", err
    assert stack.mock_requests() == []
    rows = stack.wait_rows(len(refused), "verdict = 'unsupported_value'")
    assert all(r["outcome"] == "denied" and r["cost_micros"] is None for r in rows)
    # What the sheet prices passes: a priced tier, audio where the card prices it,
    # Anthropic's counted web searches, and the client's own tools.
    allowed = [
        (CHAT, "mock-gpt", {"service_tier": "priority"}),
        (CHAT, "mock-gpt", {"modalities": ["text", "audio"], "audio": {"voice": "alloy"}}),
        (CHAT, "mock-gpt", heard),
        (MESSAGES, "mock-claude", web),
        (CHAT, "mock-gpt", {"tools": [{"type": "function",
                                       "function": {"name": "f", "parameters": {}}}]}),
        (MESSAGES, "mock-claude", {"tools": [{"name": "mine", "input_schema": {
            "type": "object", "properties": {"type": {"type": "string"}}}}]}),
    ]
    for path, model, extra in allowed:
        status, _, body = send(path, model, extra)
        assert status == 200, (path, extra, body)
    assert len(stack.mock_requests()) == len(allowed)
    # A key of its own: no web search at all, any tier on its list only.
    strict = stack.create_key("strict", "--server-tools", "deny", "--service-tiers", "default")
    loose = stack.create_key("loose", "--server-tools", "allow", "--audio", "allow")
    # Issue 28: a key's own cache-write policy, over the agent's (allow, the default).
    nocache = stack.create_key("nocache", "--cache-writes", "deny")
    time.sleep(0.6)
    marked = {"system": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}
    status, _, body = send(MESSAGES, "mock-claude", marked, key=nocache)
    assert status == 400 and "cache_control" in json.loads(body)["error"]["message"], body
    assert send(MESSAGES, "mock-claude", {}, key=nocache)[0] == 200
    assert send(MESSAGES, "mock-claude", marked)[0] == 200
    assert send(MESSAGES, "mock-claude", web, key=strict)[0] == 400
    assert send(CHAT, "mock-gpt", {"service_tier": "priority"}, key=strict)[0] == 400
    assert send(CHAT, "mock-gpt", {}, key=strict)[0] == 200
    assert send(RESPONSES, "mock-gpt", {"tools": [{"type": "web_search"}]}, key=loose)[0] == 200
    assert send(CHAT, "mock-gpt", {"service_tier": "flex", "modalities": ["audio"]},
                key=loose)[0] == 200
    assert send(CHAT, "mock-gpt", dict(heard, service_tier="flex"), key=loose)[0] == 200


def metric(stack, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics") as m:
        found = re.search(rf"^{name} (\d+)$", m.read().decode(), re.M)
    return int(found.group(1))


def test_unpriced_cached_tokens_are_charged_to_the_budget(stack):
    """Issue 28's reproduction: the README's `model set` example prices no cached tokens.
    With one cached token per answer, the row used to be unpriced and the key's $0.05
    budget charged nothing: 10 of 10 requests passed. Now the cached token is charged at
    the card's dearest token rate (output's), the row says so, and the budget refuses
    the fourth request."""
    stack.tallyctl("model", "set", "gpt-4o", "--provider", "mock-openai",
                   "--input-micros", "2500000", "--output-micros", "10000000")
    key = stack.create_key("readme", "--models", "gpt-4o", "--default-model", "gpt-4o",
                           "--budget-usd", "0.05", "--budget-period", "total")
    time.sleep(0.6)
    statuses = []
    for _ in range(10):
        status, h, data = stack.gateway(
            "POST", CHAT, {"model": "gpt-4o", "max_tokens": 64,
                           "messages": [{"role": "user", "content": "hi"}]}, key=key,
            headers={"x-mock-prompt-tokens": "1000", "x-mock-completion-tokens": "1500",
                     "x-mock-cached-tokens": "1"})
        statuses.append(status)
        if status == 200:
            # Settled before the next one asks: its cost is charged, not its estimate.
            row = stack.row(h["x-request-id"])
            # 999 x $2.5 + 1 x $10 (cached, at output's rate) + 1500 x $10 per Mtok
            assert (row["cost_micros"], row["priced_fallback"]) == (17508, "cached"), row
    assert statuses == [200] * 3 + [402] * 7, statuses


def test_priced_by_the_model_routed_to(stack):
    """An answer naming another model (a client's metadata echoed, a cheap model) is
    priced by the model the request was routed to; the row says the routed model, keeps
    the other name in model_reported, and the agent counts it. A dated snapshot of the
    routed model is the routed model, priced by its own card when it has one."""
    stack.tallyctl("model", "set", "cheap", "--provider", "mock-openai",
                   "--input-micros", "1", "--output-micros", "1")
    stack.tallyctl("model", "set", "mock-gpt-2025-01-31", "--provider", "mock-openai",
                   "--input-micros", "1000000", "--output-micros", "2000000")
    time.sleep(0.6)
    before = metric(stack, "tally_model_mismatch_total")
    knobs = {"prompt-tokens": 1000, "completion-tokens": 100}
    for stream in (False, True):
        row = ask(stack, CHAT, "mock-gpt", dict(knobs, model="cheap"), stream)
        assert (row["model"], row["model_requested"], row["model_reported"]) == \
            ("mock-gpt", "mock-gpt", "cheap")
        # mock-gpt's default card: 1000 x $2.5 + 100 x $10 per Mtok
        assert row["cost_micros"] == expected_cost(row) == 3500
    deadline = time.time() + 10
    while metric(stack, "tally_model_mismatch_total") < before + 2 and time.time() < deadline:
        time.sleep(0.05)
    assert metric(stack, "tally_model_mismatch_total") == before + 2
    # A dated snapshot with a card of its own: 1000 x $1 + 100 x $2.
    row = ask(stack, CHAT, "mock-gpt", dict(knobs, model="mock-gpt-2025-01-31"))
    assert (row["model"], row["model_reported"], row["cost_micros"]) == \
        ("mock-gpt-2025-01-31", None, 1200)
    # Anthropic's form of a snapshot without a card: the routed model's prices.
    row = ask(stack, MESSAGES, "mock-claude", dict(knobs, model="mock-claude-20250101"))
    assert (row["model"], row["model_reported"]) == ("mock-claude-20250101", None)
    assert row["cost_micros"] == 3000 + 1500
    assert metric(stack, "tally_model_mismatch_total") == before + 2


def test_a_cut_stream_is_charged_the_context_of_its_previous_response(stack):
    """A Responses stream that builds on a stored response reads that response's
    context again, and is billed for it: cut before its usage, its row is charged the
    estimate of the body, plus the tokens the stored response reported, plus its
    max_output_tokens."""
    status, h, got = stack.gateway(
        "POST", RESPONSES, {"model": "mock-gpt", "input": "hi", "max_output_tokens": 64},
        key=stack.key, headers={"x-mock-prompt-tokens": "50000",
                                "x-mock-completion-tokens": "7000"})
    assert status == 200, got
    made = json.loads(got)["id"]
    assert stack.row(h["x-request-id"])["prompt_tokens"] == 50000
    body = {"model": "mock-gpt", "input": "and then?", "stream": True,
            "max_output_tokens": 100, "previous_response_id": made}
    raw = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", stack.gw_port))
    s.sendall(f"POST {RESPONSES} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Authorization: Bearer {stack.key}\r\nx-mock-frames: 200\r\n"
              f"x-mock-frame-delay-ms: 20\r\nContent-Length: {len(raw)}\r\n\r\n".encode() + raw)
    data = b""
    while b"output_text.delta" not in data:
        data += s.recv(65536)
    rid = re.search(rb"x-request-id: (\S+)", data, re.I).group(1).decode()
    s.close()
    r = stack.row(rid)
    assert (r["usage_source"], r["prompt_tokens"]) == ("none", None), r
    prompt = (len(raw) + 3) // 4 + 50000 + 7000
    assert r["estimated_tokens"] == prompt + 100
    # mock-gpt's default card: $2.5 input, $10 output per Mtok
    assert r["estimated_cost_micros"] == (prompt * 2500000 + 100 * 10000000 + 500000) // 1000000
