"""`make run`'s script end to end: seeds a fresh data directory, brings up the stack,
serves the printed curl, and stops every process it started on Ctrl-C."""
import json
import os
import re
import signal
import socket
import subprocess
import time

from conftest import BUILD, HAPROXY, ROOT, free_port
from stack import Stack


def children_of(pid):
    """PIDs of every descendant of pid, from /proc."""
    kids = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def as_terminal_job():
    """preexec_fn: SIGINT as a terminal's job has it. A pytest started in the background
    of a shell (`cmd &`) ignores SIGINT, its children inherit that, and a shell that
    starts with SIGINT ignored cannot trap it: Ctrl-C would then test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_run(tmp_path, ports, **extra):
    env = dict(os.environ, TALLY_BUILD=str(BUILD), TALLY_DATA_DIR=str(tmp_path / "data"),
               TALLY_GATEWAY_PORT=str(ports[0]), TALLY_AGENT_PORT=str(ports[1]),
               TALLY_MOCK_PORT=str(ports[2]), TALLY_QUERYD_PORT=str(ports[3]),
               TALLY_RECORDS_PORT=str(ports[4]), TALLY_METRICS_PORT=str(ports[5]),
               TALLY_HAPROXY=HAPROXY, **extra)
    env.pop("TALLY_OPERATOR_TOKEN", None)
    log = open(tmp_path / "run.log", "ab")
    start = log.tell()      # a second run appends: its own lines are after this
    # its own process group, as a terminal's foreground job: Ctrl-C signals the group
    p = subprocess.Popen(["bash", str(ROOT / "scripts" / "run.sh")], stdout=log,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                         start_new_session=True, preexec_fn=as_terminal_job)
    deadline = time.time() + 30
    while time.time() < deadline:
        text = (tmp_path / "run.log").read_bytes()[start:].decode(errors="replace")
        if "Ctrl-C stops everything" in text:
            return p, text
        assert p.poll() is None, text
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGKILL)
    raise AssertionError((tmp_path / "run.log").read_text())


def ctrl_c(p):
    kids = children_of(p.pid)
    os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(15)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    time.sleep(0.2)
    alive = [k for k in kids if os.path.exists(f"/proc/{k}") and
             open(f"/proc/{k}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
    # Ctrl-C is the way to stop it: exit 0, so that make prints no "Error 130"
    assert p.returncode == 0, p.returncode
    return kids, alive


# What reads like an error in a start's output (HAProxy's warnings and alerts, a failed
# read): a start where nothing is wrong prints none of it.
ALARMING = re.compile(r"WARNING|ALERT|ERROR|[Ee]rror|[Ff]ail|not read|No such file")


def clients_as_printed(tmp_path, text):
    """The printed Claude Code and Codex CLI lines, run as a user pastes them (with a
    prompt added) against the demo, answer with the mock's words."""
    bin_dir = ROOT / "tests" / "agents" / "node_modules" / ".bin"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_"))}
    env.update(HOME=str(tmp_path), PATH=f"{bin_dir}{os.pathsep}{env['PATH']}",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    claude = re.search(r"^Claude Code: (.*claude)$", text, re.M).group(1)
    codex = re.search(r"^Codex CLI: +(.*)$", text, re.M).group(1)
    # Codex offers a web search: priced here as the demo's mock-gpt may not price it
    tallyctl(tmp_path / "data" / "tally.db", "prices", "set", "mock-gpt",
             "--web-search-micros-per-call", "10000")
    for line, extra in ((claude, " -p 'say hi'"), (codex, " exec --skip-git-repo-check 'say hi'")):
        out = subprocess.run(["bash", "-c", line + extra], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=120, stdin=subprocess.DEVNULL)
        assert out.returncode == 0 and "mock0 mock1" in out.stdout, (line, out)


def test_make_run_serves_the_demo_and_stops_on_ctrl_c(tmp_path):
    ports = tuple(free_port() for _ in range(6))
    p, text = start_run(tmp_path, ports)
    try:
        assert not ALARMING.findall(text), text
        key = re.search(r"demo key: (tly_\S+)", text).group(1)
        curl = re.search(r"(curl -s http://\S+/v1/chat/completions .*?)\n\n", text, re.S).group(1)
        out = subprocess.run(["bash", "-c", curl.replace("\\\n", " ")], capture_output=True,
                             text=True, timeout=10)
        assert '"chat.completion"' in out.stdout, out
        clients_as_printed(tmp_path, text)
        s = Stack(tmp_path)
        s.gw_port = ports[0]
        status, _, _ = s.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-gpt", "messages": []}, key="tly_wrong")
        assert status == 401
        # the dashboard and its API, with the token made for this data directory
        assert f"dashboard: http://127.0.0.1:{ports[3]}/" in text
        token = (tmp_path / "data" / "operator.token").read_text().strip()
        assert oct((tmp_path / "data" / "operator.token").stat().st_mode & 0o777) == "0o600"
        assert f"operator token (kept in {tmp_path / 'data'}/operator.token): {token}" in text
        status, _, body = s._request(ports[3], "GET", "/api/health")
        assert status == 200 and json.loads(body)["data"] is True
        status, _, _ = s._request(ports[3], "GET", "/api/keys",
                                  headers={"Authorization": f"Bearer {token}"})
        assert status == 200
    finally:
        kids, alive = ctrl_c(p)
    assert len(kids) >= 4 and alive == [], (kids, alive)
    assert "tally stopped" in (tmp_path / "run.log").read_text()

    # a second run reuses the seeded database and prints the same demo key
    p, text2 = start_run(tmp_path, ports)
    try:
        assert re.search(r"demo key: (tly_\S+)", text2).group(1) == key
        assert "seeding" not in text2
    finally:
        ctrl_c(p)


def tallyctl(db, *args):
    r = subprocess.run([str(BUILD / "tallyctl"), "--db", str(db), *args], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_run_in_front_of_the_users_own_server(tmp_path):
    """TALLY_UPSTREAM points make run at an OpenAI-compatible server of the user's (the
    mock, started apart, stands in for Ollama or vLLM): its models are registered from its
    GET /v1/models, a key allowed them is printed with a curl naming one of them, and
    requests through the gateway reach that server with its API key and become rows."""
    ports = tuple(free_port() for _ in range(6))
    server_port = free_port()
    server = subprocess.Popen([str(BUILD / "mock-upstream"), "--listen", f"127.0.0.1:{server_port}",
                               "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = Stack(tmp_path)
        s.mock_port = server_port
        s.db = tmp_path / "data" / "tally.db"
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                served = json.loads(s._request(server_port, "GET", "/v1/models")[2])
                break
            except OSError:
                time.sleep(0.1)
        listed = [m["id"] for m in served["data"]]
        p, text = start_run(tmp_path, ports, TALLY_UPSTREAM=f"http://127.0.0.1:{server_port}/v1",
                            TALLY_UPSTREAM_API_KEY="server-secret")
        try:
            assert f"registered {len(listed)} models" in text
            # nothing of the demo: no mock, no demo providers, models or key
            assert "seeding" not in text and not (tmp_path / "data" / "demo.key").exists()
            assert "mock-openai" not in tallyctl(s.db, "provider", "list"), text
            assert "mock-gpt" not in tallyctl(s.db, "model", "list"), text
            key = re.search(r"upstream key: (tly_\S+)", text).group(1)
            model = re.search(r'-d .\{"model":"([^"]+)"', text).group(1)
            assert model in listed
            curl = re.search(r"(curl -s http://\S+/v1/chat/completions .*?)\n\n", text, re.S).group(1)
            out = subprocess.run(["bash", "-c", curl.replace("\\\n", " ")], capture_output=True,
                                 text=True, timeout=10)
            assert json.loads(out.stdout)["model"] == model, out
            up = s.mock_requests()[-1]
            assert ["Authorization", "Bearer server-secret"] in up["headers"] or \
                ["authorization", "Bearer server-secret"] in up["headers"], up["headers"]
            s.gw_port = ports[0]
            status, h, _ = s.gateway("POST", "/v1/chat/completions",
                                     {"model": listed[-1], "messages": []}, key=key,
                                     headers={"x-mock-prompt-tokens": "31"})
            assert status == 200
            r = s.row(h["x-request-id"])
            assert (r["model"], r["provider"], r["prompt_tokens"], r["cost_micros"]) == \
                (listed[-1], "upstream", 31, None)
            # README's way to price such a model works as written
            readme = " ".join((ROOT / "README.md").read_text().split())
            cmd = re.search(r"`(build/tallyctl --db data/tally\.db model set NAME [^`]*)`", readme).group(1)
            argv = cmd.replace("NAME", listed[-1]).replace(" N", " 7").split()[3:]
            tallyctl(s.db, *argv)
            priced = [l for l in tallyctl(s.db, "model", "list").splitlines() if f" {listed[-1]} " in l]
            assert len(priced) == 1 and "upstream" in priced[0] and " 7 " in priced[0], priced
            # the demo's models do not exist here
            status, _, _ = s.gateway("POST", "/v1/chat/completions",
                                     {"model": "mock-gpt", "messages": []}, key=key)
            assert status == 404
        finally:
            kids, alive = ctrl_c(p)
        assert alive == [], (kids, alive)
    finally:
        server.terminate()
        server.wait(10)
    # a bad TALLY_UPSTREAM is refused before anything starts
    out = subprocess.run(["bash", str(ROOT / "scripts" / "run.sh")], capture_output=True, text=True,
                         env=dict(os.environ, TALLY_BUILD=str(BUILD), TALLY_DATA_DIR=str(tmp_path / "d2"),
                                  TALLY_UPSTREAM="ftp://example"), timeout=30)
    assert out.returncode == 2 and "TALLY_UPSTREAM must be" in out.stderr



def test_make_run_names_the_port_that_is_taken(tmp_path):
    """A port held by another program is named, with the variable that moves it, before
    anything starts: not a listener that waited in vain for a process that died. (The
    agent's ports are used, and checked, with TALLY_SOCKETS=tcp.)"""
    ports = [free_port() for _ in range(6)]
    for i, var, proto in ((4, "TALLY_RECORDS_PORT", socket.SOCK_DGRAM),
                          (4, "TALLY_RECORDS_PORT", socket.SOCK_STREAM),
                          (1, "TALLY_AGENT_PORT", socket.SOCK_STREAM),
                          (5, "TALLY_METRICS_PORT", socket.SOCK_STREAM)):
        with socket.socket(socket.AF_INET, proto) as holder:
            holder.bind(("127.0.0.1", ports[i]))
            if proto == socket.SOCK_STREAM:
                holder.listen()
            out = subprocess.run(
                ["bash", str(ROOT / "scripts" / "run.sh")], capture_output=True, text=True,
                timeout=60, stdin=subprocess.DEVNULL,
                env=dict(os.environ, TALLY_BUILD=str(BUILD), TALLY_DATA_DIR=str(tmp_path / "data"),
                         TALLY_GATEWAY_PORT=str(ports[0]), TALLY_AGENT_PORT=str(ports[1]),
                         TALLY_MOCK_PORT=str(ports[2]), TALLY_QUERYD_PORT=str(ports[3]),
                         TALLY_RECORDS_PORT=str(ports[4]), TALLY_METRICS_PORT=str(ports[5]),
                         TALLY_SOCKETS="tcp", TALLY_HAPROXY=HAPROXY))
        assert out.returncode != 0, out
        assert f"port {ports[i]} " in out.stderr and f"it is {var}," in out.stderr, out.stderr
        assert f"set {var} to a free port" in out.stderr, out.stderr
        assert "tally is running" not in out.stdout, out.stdout
