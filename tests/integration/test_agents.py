"""Real coding agents and the OpenAI Agents SDK (Node packages pinned in tests/agents)
through the real gateway to the mock upstream, offline: Claude Code (`claude -p`, the
Messages API with `?beta=true`), Codex CLI (`codex exec`, the Responses API over HTTPS)
and the Agents SDK (the Responses API, unary and streamed). Each must finish its task,
and every request it made must be exactly one row with the usage the mock reported."""
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import ROOT
from readme_clients import base_url, exports, with_addr
from stack import Stack

AGENTS_DIR = ROOT / "tests" / "agents"
BIN = AGENTS_DIR / "node_modules" / ".bin"
WORDS = "mock0 mock1 mock2 mock3 mock4 mock5 mock6 mock7 mock8 mock9"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("agents"))
    try:
        yield s.start()
    finally:
        s.close()


def clean_env(**extra):
    """The environment without any provider or client setting of the caller's (a base URL
    or key there would send a client elsewhere), plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_"))}
    env.update(extra)
    return env


def tool(name):
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make deps` (or `npm ci` in tests/agents)")
    return str(path)


def key_for(stack, name, *args):
    key = stack.create_key(name, *args)
    deadline = time.time() + 3    # the agent's next configuration poll
    while time.time() < deadline:
        if stack.gateway("GET", "/v1/models", key=key)[0] == 200:
            return key
        time.sleep(0.1)
    return key


def rows_of(stack, key_name, n):
    """The key's n rows, oldest first, once all of them are written."""
    where = "key_id = (SELECT id FROM keys WHERE name = ?) AND verdict <> 'models_listed'"
    return stack.wait_rows(n, where, (key_name,))


def run(argv, env, cwd, timeout=120):
    r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{argv[0]} -> {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r


def exact(rows, stream, path_count):
    """Every row the client's requests made is the mock's usage, to the token."""
    assert len(rows) == path_count, rows
    for r in rows:
        assert (r["verdict"], r["status"], r["outcome"]) == ("allow", 200, "complete"), r
        assert (r["prompt_tokens"], r["completion_tokens"], r["stream"], r["usage_source"]) == \
            (10, 20, stream, "stream" if stream else "response"), r


def test_claude_code(stack, tmp_path):
    """`claude -p` set up as README.md's Clients section says (ANTHROPIC_BASE_URL at the
    gateway, ANTHROPIC_MODEL) with a key allowed only its model: its ~49 KB first request
    (model first, stream past the cut) is served and accounted."""
    claude = tool("claude")
    key = key_for(stack, "claude-code", "--models", "mock-claude", "--default-model", "mock-claude")
    stack.mock_clear()
    env = clean_env(HOME=str(tmp_path),
                    **exports("claude-code", f"127.0.0.1:{stack.gw_port}", key))
    out = run([claude, "-p", "say hi"], env, tmp_path)
    assert WORDS in out.stdout
    sent = [m for m in stack.mock_requests() if m["path"].startswith("/v1/messages")]
    assert sent and all(m["path"] == "/v1/messages?beta=true" for m in sent)
    assert max(m["body_len"] for m in sent) > 16384   # longer than the agent's first frame
    exact(rows_of(stack, "claude-code", len(sent)), 1, len(sent))


def test_codex_exec(stack, tmp_path):
    """`codex exec` with README.md's model provider at the gateway (the Responses API): it prints
    the answer and counts the tokens the row holds. Its requests offer a web search,
    which the gateway refuses unless the model prices one (docs/pricing.md), and then
    counts (none here)."""
    codex = tool("codex")
    stack.tallyctl("prices", "set", "mock-gpt", "--web-search-micros-per-call", "10000")
    key = key_for(stack, "codex", "--models", "mock-gpt", "--default-model", "mock-gpt")
    home = tmp_path / "codex-home"
    home.mkdir()
    # README.md's config.toml, as a user copies it
    (home / "config.toml").write_text(with_addr("codex", f"127.0.0.1:{stack.gw_port}"))
    stack.mock_clear()
    env = clean_env(HOME=str(tmp_path), CODEX_HOME=str(home), TALLY_KEY=key)
    out = run([codex, "exec", "--skip-git-repo-check", "say hi"], env, tmp_path)
    assert WORDS in out.stdout
    assert "tokens used\n30" in out.stderr, out.stderr[-2000:]
    sent = [m for m in stack.mock_requests() if m["path"] == "/v1/responses"]
    assert sent
    rows = rows_of(stack, "codex", len(sent))
    exact(rows, 1, len(sent))
    assert all(r["web_search_calls"] == 0 for r in rows), rows


def test_openai_agents_sdk(stack):
    """An Agents SDK run, unary then streamed: both finish with the mock's answer and the
    SDK's usage equals the rows'."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH (run `make deps` as root)")
    tool("codex")   # the packages are installed together
    key = key_for(stack, "agents-sdk", "--models", "mock-gpt")
    env = clean_env(TALLY_BASE_URL=base_url("openai-node", f"127.0.0.1:{stack.gw_port}"),
                    TALLY_KEY=key)
    out = run([node, "agents.mjs", "mock-gpt"], env, AGENTS_DIR)
    runs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["stream"] for r in runs] == [False, True]
    rows = rows_of(stack, "agents-sdk", 2)
    for got, row in zip(runs, rows):
        assert got["output"].strip() == WORDS
        assert (got["usage"]["inputTokens"], got["usage"]["outputTokens"]) == \
            (row["prompt_tokens"], row["completion_tokens"]) == (10, 20)
        assert row["stream"] == int(got["stream"])
