"""The Python clients of README.md's "Clients" section, run as they are written there
against the real gateway: the official OpenAI and Anthropic Python SDKs and the `llm`
chat client (Debian sid's packages, scripts/python-clients.sh). Each request they make
is a row with the usage the mock upstream reported, which is what the client saw."""
import json
import os
import sqlite3
import subprocess

import pytest

from conftest import ROOT
from readme_clients import with_addr
from stack import store  # noqa: F401  (test_accounting's stack takes it)
from test_accounting import stack  # noqa: F401  (the fixture, reused)


@pytest.fixture(scope="module")
def clients():
    """The directory of the python3 and llm wrappers (prepared on first use: root)."""
    r = subprocess.run(["bash", str(ROOT / "scripts" / "python-clients.sh")],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"scripts/python-clients.sh -> {r.returncode}\n{r.stderr}"
    return r.stdout.strip()


# Each case's client calls, after the README's block (which makes `client`); prints
# what the client received, with the request ids the gateway answered with.
OPENAI_CASES = """
import json
def knobs(**k):
    return {f"x-mock-{n.replace('_', '-')}": str(v) for n, v in k.items()}
out = {}
raw = client.chat.completions.with_raw_response.create(
    model="mock-gpt", messages=[{"role": "user", "content": "Say hi."}],
    extra_headers=knobs(prompt_tokens=21, completion_tokens=8, cached_tokens=5))
c = raw.parse()
out["unary"] = {"id": raw.headers["x-request-id"], "usage": c.usage.model_dump(),
                "text": c.choices[0].message.content}
raw = client.chat.completions.with_raw_response.create(
    model="mock-gpt", messages=[{"role": "user", "content": "Say hi."}], stream=True,
    extra_headers=knobs(frames=7, prompt_tokens=22, completion_tokens=9))
text, usage = "", []
for chunk in raw.parse():
    text += "".join(ch.delta.content or "" for ch in chunk.choices)
    usage.append(chunk.usage)
out["stream"] = {"id": raw.headers["x-request-id"], "text": text, "usage": usage}
print(json.dumps(out))
"""

ANTHROPIC_CASES = """
import json
def knobs(**k):
    return {f"x-mock-{n.replace('_', '-')}": str(v) for n, v in k.items()}
out = {}
raw = client.messages.with_raw_response.create(
    model="mock-claude", max_tokens=64, messages=[{"role": "user", "content": "Say hi."}],
    extra_headers=knobs(prompt_tokens=31, completion_tokens=11))
m = raw.parse()
out["unary"] = {"id": raw.headers["x-request-id"], "usage": m.usage.model_dump(),
                "text": "".join(b.text for b in m.content)}
raw = client.messages.with_raw_response.create(
    model="mock-claude", max_tokens=64, messages=[{"role": "user", "content": "Say hi."}],
    stream=True, extra_headers=knobs(frames=6, prompt_tokens=32, completion_tokens=12,
                                     cached_tokens=100, cache_creation_tokens=200))
start, delta = None, None
for ev in raw.parse():
    if ev.type == "message_start":
        start = ev.message.usage.model_dump()
    elif ev.type == "message_delta":
        delta = ev.usage.model_dump()
out["stream"] = {"id": raw.headers["x-request-id"], "start": start, "delta": delta}
print(json.dumps(out))
"""


def run_python(clients, stack, name, cases):
    """README block NAME with the test's gateway, then cases, in the clients' Python."""
    script = with_addr(name, f"127.0.0.1:{stack.gw_port}") + cases
    env = {"PATH": os.environ["PATH"], "TALLY_KEY": stack.key}
    r = subprocess.run([f"{clients}/python3", "-c", script], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{name} -> {r.returncode}\n{r.stderr}\n{stack.logs()}"
    return json.loads(r.stdout)


def tokens(stack, request_id):
    r = stack.row(request_id)
    assert (r["outcome"], r["status"], r["verdict"]) == ("complete", 200, "allow"), r
    return (r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"],
            r["cache_creation_tokens"], r["usage_source"], r["stream"])


def test_openai_python_sdk_from_the_readme(clients, stack):
    out = run_python(clients, stack, "openai-python", OPENAI_CASES)
    assert out["unary"]["text"]
    assert out["unary"]["usage"]["prompt_tokens"] == 21
    assert out["unary"]["usage"]["completion_tokens"] == 8
    assert tokens(stack, out["unary"]["id"]) == (21, 8, 5, None, "response", 0)
    # The SDK did not ask for usage: the gateway asked for it and kept the usage chunk
    # from the client, whose chunks all say "usage": null.
    assert out["stream"]["text"] == "".join(f"mock{i} " for i in range(7))
    assert out["stream"]["usage"] and all(u is None for u in out["stream"]["usage"])
    assert tokens(stack, out["stream"]["id"]) == (22, 9, None, None, "stream", 1)


def test_anthropic_python_sdk_from_the_readme(clients, stack):
    out = run_python(clients, stack, "anthropic-python", ANTHROPIC_CASES)
    assert out["unary"]["text"]
    assert (out["unary"]["usage"]["input_tokens"], out["unary"]["usage"]["output_tokens"]) == (31, 11)
    assert tokens(stack, out["unary"]["id"]) == (31, 11, None, None, "response", 0)
    s = out["stream"]
    assert (s["start"]["input_tokens"], s["start"]["cache_read_input_tokens"],
            s["start"]["cache_creation_input_tokens"]) == (32, 100, 200)
    assert s["delta"]["output_tokens"] == 12
    # Anthropic's prompt is the whole input: fresh + cache read + cache write.
    assert tokens(stack, s["id"]) == (332, 12, 100, 200, "stream", 1)


def test_llm_chat_from_the_readme(clients, stack, tmp_path):
    """The README's lines for `llm`, typed as they are, then a chat of two prompts: two
    rows whose usage is what llm itself logged for its two answers."""
    block = with_addr("llm", f"127.0.0.1:{stack.gw_port}")
    # A user who never ran llm: its directory (~/.config/io.datasette.llm) not made yet.
    env = {"PATH": f"{clients}:{os.environ['PATH']}", "TALLY_KEY": stack.key,
           "HOME": str(tmp_path)}
    r = subprocess.run(["bash", "-euc", block], input="Say hi.\nAnd again.\nexit\n",
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"llm -> {r.returncode}\n{r.stdout}\n{r.stderr}\n{stack.logs()}"
    assert r.stdout.count("mock0 ") == 2, r.stdout
    con = sqlite3.connect(tmp_path / ".config" / "io.datasette.llm" / "logs.db")
    try:
        # llm 0.36 logs each answer as a turn (older ones: the responses table)
        logged = con.execute("SELECT json_extract(response_json, '$.model'), input_tokens, "
                             "output_tokens FROM turns ORDER BY datetime_utc").fetchall()
    finally:
        con.close()
    rows = stack.wait_rows(2)
    assert len(rows) == 2 and len(logged) == 2
    for row, (model, prompt, completion) in zip(sorted(rows, key=lambda x: x["id"]), logged):
        assert model == "mock-gpt"
        assert (row["model"], row["outcome"], row["verdict"]) == ("mock-gpt", "complete", "allow")
        assert (row["prompt_tokens"], row["completion_tokens"]) == (prompt, completion)
        assert row["usage_source"] == "stream" and row["stream"] == 1
