"""Running tally like production: the compose file validates, the HAProxy integration
guide quotes the configuration the tests run (no drift), the optional parts of
tally.cfg (TLS with HTTP/2, health, hosted providers) work on HAProxy 2.6, the
systemd units pass only flags the binaries know, and docs/operations.md's backup and
retention procedures work against a live agent that keeps writing meanwhile."""
import json
import os
import re
import shutil
import sqlite3
import subprocess
import threading
import time
import http.client
import urllib.request

import pytest
import yaml

from conftest import BUILD, HAPROXY, ROOT, binary, free_port
from stack import Stack, make_cert

GUIDE = ROOT / "docs" / "haproxy-integration.md"
OPERATIONS = ROOT / "docs" / "operations.md"


# --- docker compose -----------------------------------------------------------------

def compose_cmd():
    """`docker compose` (v2 plugin) when present, else Debian's docker-compose (v1)."""
    if shutil.which("docker"):
        r = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if r.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` nor `docker-compose` is installed "
                "(scripts/install-deps.sh installs docker-compose)")


def compose_config(*profiles, token="test-operator-token",
                   gateway_secret="dGVzdC1nYXRld2F5LXNlY3JldC10ZXN0LWdhdGV3YXkh"):
    """`config` with .env.example as the env file, as a fresh checkout would run it, and
    TALLY_OPERATOR_TOKEN (which the example leaves empty on purpose) from the shell.
    Returns (exit status, parsed configuration or stderr)."""
    args = compose_cmd() + ["--env-file", str(ROOT / ".env.example"),
                            "-f", str(ROOT / "docker-compose.yml")]
    for p in profiles:
        args += ["--profile", p]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    if token:
        env["TALLY_OPERATOR_TOKEN"] = token
    if gateway_secret:
        env["TALLY_GATEWAY_SECRET"] = gateway_secret
    r = subprocess.run(args + ["config"], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=60)
    if r.returncode != 0:
        return r.returncode, r.stderr
    return 0, yaml.safe_load(r.stdout)


def test_compose_config_validates():
    rc, cfg = compose_config()
    assert rc == 0, cfg
    services = cfg["services"]
    assert {"haproxy", "agent", "queryd"} <= set(services)
    for name in ("haproxy", "agent", "queryd"):
        assert not services[name].get("profiles"), f"{name} must start without a profile"
    rc, demo = compose_config("demo")
    assert rc == 0, demo
    for name in ("mock", "demo-seed"):
        assert demo["services"][name]["profiles"] == ["demo"]

    for name in ("haproxy", "agent", "queryd"):
        s = services[name]
        assert s.get("healthcheck", {}).get("test"), f"{name} has no health check"
        assert s["build"]["dockerfile"].endswith("docker/Dockerfile")
        assert s["build"]["target"] == name
        assert s.get("restart") == "unless-stopped"

    # Without an operator token, or a gateway secret, the stack does not even configure.
    rc, err = compose_config(token=None)
    assert rc != 0 and "TALLY_OPERATOR_TOKEN" in err
    rc, err = compose_config(gateway_secret=None)
    assert rc != 0 and "TALLY_GATEWAY_SECRET" in err

    # Only HAProxy reaches the agent's SPOP and records listeners: unix sockets in the
    # volume the two containers share (same uid), and it shares the agent's network
    # namespace besides.
    assert services["haproxy"]["network_mode"] == "service:agent"
    assert "networks" not in services["haproxy"]
    conf = dict(line.split(None, 1) for line in
                (ROOT / "docker" / "agent.conf").read_text().splitlines()
                if line and not line.startswith("#"))
    assert conf["listen"].startswith("unix:/run/tally/")
    assert conf["records"].startswith("unix:/run/tally/")
    env = services["haproxy"]["environment"]
    assert env["TALLY_AGENT_ADDR"] == conf["listen"].replace("unix:", "unix@")
    assert env["TALLY_RECORDS_ADDR"] == conf["records"].replace("unix:", "unix@")
    assert env["TALLY_RECORDS_LOG_ADDR"] == env["TALLY_RECORDS_ADDR"] + ".dgram"
    assert env["TALLY_GATEWAY_SECRET"] == services["agent"]["environment"]["TALLY_GATEWAY_SECRET"]

    # One named volume for the database: the agent writes it, queryd reads it.
    def mounts(svc):
        out = {}
        for v in services[svc].get("volumes", []):
            if isinstance(v, dict):
                out[v["source"]] = v["target"]
            else:
                src, dst = v.split(":")[:2]
                out[src] = dst
        return out
    assert "tally-data" in cfg["volumes"]
    assert mounts("agent").get("tally-data") == "/var/lib/tally"
    assert mounts("queryd").get("tally-data") == "/var/lib/tally"
    assert "--db" in services["queryd"]["command"]

    # HAProxy runs this repository's tally.cfg, with the variables the tests set.
    env = services["haproxy"]["environment"]
    for var in ("TALLY_GATEWAY_ADDR", "TALLY_AGENT_ADDR", "TALLY_RECORDS_ADDR",
                "TALLY_HAPROXY_DIR", "TALLY_SPOE_CONF", "TALLY_RUN_DIR",
                "TALLY_FAIL_POLICY", "TALLY_FAILOPEN_BACKEND", "TALLY_MOCK_ADDR",
                "TALLY_MOCK_CREDENTIAL"):
        assert var in env, f"haproxy service lacks {var}"
    cmd = services["haproxy"]["command"]
    assert cmd[-4:-2] == ["-f", "/etc/tally/haproxy/tally.cfg"], cmd
    assert cmd[-2:] == ["-f", "/etc/tally/haproxy/demo.cfg"], cmd

    # Secrets come from the env file, and each service gets only its own.
    assert env["TALLY_OPENAI_API_KEY"] == "" and "TALLY_OPERATOR_TOKEN" not in env
    assert services["queryd"]["environment"]["TALLY_OPERATOR_TOKEN"] == "test-operator-token"
    assert "TALLY_OPENAI_API_KEY" not in services["queryd"].get("environment", {})
    assert not any("TOKEN" in k or "API_KEY" in k for k in services["agent"].get("environment", {}))
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "/.env" in ignored


def test_dockerfile_builds_as_make_does():
    """The build stage runs the same two steps as a developer: install-deps, make build;
    the runtime stages are the local Debian 12 base (HAProxy's the base with 3.4) and run
    as a non-root user."""
    text = (ROOT / "docker" / "Dockerfile").read_text()
    bases = dict(re.findall(r"^ARG (TALLY_\w*BASE)=(\S+)", text, re.M))
    assert bases == {"TALLY_BASE": "tally/base:bookworm", "TALLY_HAPROXY_BASE": "tally/base:sid"}
    stages = re.findall(r"^FROM (\S+) AS (\S+)", text, re.M)
    assert stages[0] == ("${TALLY_BASE}", "build")
    assert all(image in ("${TALLY_BASE}", "runtime") for image, t in stages if t != "haproxy")
    assert ("${TALLY_HAPROXY_BASE}", "haproxy") in stages
    assert re.search(r"^RUN .*bash scripts/install-deps\.sh", text, re.M)
    assert re.search(r"^RUN make build\b", text, re.M)
    targets = dict((t, i) for i, (_, t) in enumerate(stages))
    assert {"agent", "queryd", "mock", "haproxy"} <= set(targets)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and "root" not in users and "0" not in users
    for name in ("tally-agent", "tallyctl", "tally-queryd", "mock-upstream"):
        assert f"/src/build/{name}" in text, f"{name} is not taken from make's build/"


# --- the integration guide quotes tally.cfg ---------------------------------------

EXTRACT = re.compile(r"<!-- extract: (\S+) -->\n```[a-z]*\n(.*?)```", re.S)


def test_guide_blocks_are_verbatim_extracts_of_the_tested_config():
    text = GUIDE.read_text()
    blocks = EXTRACT.findall(text)
    assert len(blocks) >= 8
    quoted = set()
    for path, block in blocks:
        source = (ROOT / path).read_text()
        assert block in source, f"guide block not found verbatim in {path}:\n{block}"
        quoted.add(path)
    assert quoted == {"haproxy/tally.cfg", "haproxy/demo.cfg", "haproxy/spoe-tally.conf"}
    # Every fenced block of the guide is either an extract or says it is not one.
    lines, inside = text.split("\n"), False
    for i, line in enumerate(lines):
        if not line.startswith("```"):
            continue
        if not inside:
            assert re.match(r"<!-- (extract: \S+|not an extract[^>]*) -->$", lines[i - 1]), \
                f"unmarked fenced block at line {i + 1} of the guide"
        inside = not inside
    assert not inside
    joined = "".join(b for _, b in blocks)
    for line in ("filter spoe engine tally config", "http-request send-spoe-group tally decide",
                 "lua-load-per-thread", "ring tally-records", "backend tally-agents",
                 "spoe-message tally-request", "alpn h2,http/1.1", "ca-file @system-ca",
                 "retry-on conn-failure", "tune.bufsize 16384"):
        assert line in joined, f"the guide does not quote {line!r}"


def haproxy_env(tmp, **extra):
    env = dict(os.environ)
    env.update({
        "TALLY_GATEWAY_ADDR": f"127.0.0.1:{free_port()}",
        "TALLY_AGENT_ADDR": f"127.0.0.1:{free_port()}",
        "TALLY_RECORDS_ADDR": f"127.0.0.1:{free_port()}",
        "TALLY_HAPROXY_DIR": str(ROOT / "haproxy"),
        "TALLY_SPOE_CONF": str(ROOT / "haproxy" / "spoe-tally.conf"),
        "TALLY_RUN_DIR": str(tmp),
        "TALLY_FAIL_POLICY": "closed",
        "TALLY_FAILOPEN_BACKEND": "be_no_route",
        "TALLY_GATEWAY_SECRET": "g" * 43,
    })
    env.update(extra)
    return env


def test_haproxy_cfg_with_every_option_is_valid(tmp_path):
    """haproxy -c on Debian's 2.6.12 with the TLS listener, the health frontend and both
    hosted providers defined (their names need not resolve: init-addr none)."""
    env = haproxy_env(tmp_path, TALLY_TLS_ADDR=f"127.0.0.1:{free_port()}",
                      TALLY_TLS_CERT=str(make_cert(tmp_path)),
                      TALLY_HEALTH_ADDR=f"127.0.0.1:{free_port()}",
                      TALLY_OPENAI_API_KEY="sk-test", TALLY_ANTHROPIC_API_KEY="sk-ant-test")
    r = subprocess.run([HAPROXY, "-c", "-f", str(ROOT / "haproxy" / "tally.cfg")],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    # Warnings are only the hosted names this sandbox cannot resolve.
    for line in (r.stdout + r.stderr).splitlines():
        if "[WARNING]" in line:
            assert "could not resolve address 'api." in line, line
    # Without the optional variables none of it is defined (what the other tests run).
    plain = haproxy_env(tmp_path)
    r = subprocess.run([HAPROXY, "-c", "-f", str(ROOT / "haproxy" / "tally.cfg")],
                       env=plain, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "WARNING" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_http2_over_tls_is_decided_and_accounted(tmp_path):
    tls_port, health_port = free_port(), free_port()
    s = Stack(tmp_path, haproxy_env={"TALLY_TLS_ADDR": f"127.0.0.1:{tls_port}",
                                     "TALLY_TLS_CERT": str(make_cert(tmp_path)),
                                     "TALLY_HEALTH_ADDR": f"127.0.0.1:{health_port}"})
    try:
        s.start()
        body = json.dumps({"model": "mock-gpt", "max_tokens": 50, "messages": []})
        r = subprocess.run(["curl", "-sk", "--http2", "-o", "-", "-D", "-",
                            "-w", "\n%{http_version}",
                            f"https://localhost:{tls_port}/v1/chat/completions",
                            "-H", f"Authorization: Bearer {s.key}",
                            "-H", "Content-Type: application/json", "-d", body],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout.rstrip().endswith("\n2"), r.stdout   # HTTP/2 negotiated
        assert r.stdout.startswith("HTTP/2 200"), r.stdout
        rid = re.search(r"^x-request-id: (\S+)", r.stdout, re.M | re.I).group(1)
        row = s.row(rid)
        assert row["status"] == 200 and row["outcome"] == "complete"
        assert row["prompt_tokens"] is not None
        # A key the agent refuses is refused over HTTP/2 as well.
        r = subprocess.run(["curl", "-sk", "--http2", "-o", "/dev/null", "-w", "%{http_code}",
                            f"https://localhost:{tls_port}/v1/chat/completions",
                            "-H", "Authorization: Bearer tly_" + "A" * 43, "-d", body],
                           capture_output=True, text=True, timeout=30)
        assert r.stdout == "401"
        # Health and HAProxy's own metrics, on their own port.
        status, _, _ = s._request(health_port, "GET", "/healthz")
        assert status == 200
        status, _, metrics = s._request(health_port, "GET", "/metrics")
        assert status == 200
        # What docs/operations.md alerts on when the agent is down.
        assert re.search(rb'^haproxy_server_status\{proxy="tally-agents",server="agent1",'
                         rb'state="UP"\} 1$', metrics, re.M), metrics[:2000]
    finally:
        s.close()


@pytest.mark.parametrize("policy", ["closed", "open"])
def test_healthz_fails_while_the_node_cannot_serve(tmp_path, policy):
    """/healthz is what an L4 balancer follows: under fail-closed a node whose agent is
    down refuses every request, so its /healthz answers 503 until the agent is back;
    under fail-open it still forwards, and stays healthy."""
    port = free_port()
    s = Stack(tmp_path, fail_policy=policy, haproxy_env={"TALLY_HEALTH_ADDR": f"127.0.0.1:{port}"})

    def health():
        return s._request(port, "GET", "/healthz")[0]

    def settles(want, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline and health() != want:
            time.sleep(0.05)
        return health() == want

    try:
        s.start()
        assert health() == 200
        s.kill_agent()
        down = time.time()
        if policy == "closed":
            # spop-check: fall 2 at inter 1s then fastinter 250ms
            assert settles(503), s.logs()
            assert time.time() - down < 3
        else:
            time.sleep(2.5)
            assert health() == 200
        s.start_agent()
        assert settles(200), s.logs()
    finally:
        s.close()


# --- systemd units ------------------------------------------------------------------

def unit_flags(unit):
    text = (ROOT / "systemd" / unit).read_text()
    m = re.search(r"^ExecStart=(.*(?:\\\n.*)*)", text, re.M)
    cmd = m.group(1).replace("\\\n", " ")
    return cmd.split()[0], re.findall(r"(?<!\S)(--[a-z-]+)", cmd)


def test_systemd_units_pass_only_known_flags():
    exe, flags = unit_flags("tally-agent.service")
    assert exe == "/usr/local/bin/tally-agent"
    help_text = subprocess.run([str(binary("tally-agent")), "--help"], capture_output=True,
                               text=True).stdout
    for f in flags:
        assert re.search(rf"^\s+{re.escape(f)}\b", help_text, re.M), f"agent has no {f}"
    exe, flags = unit_flags("tally-queryd.service")
    assert exe == "/usr/local/bin/tally-queryd"
    # The contract of tally-queryd's command line (docs/operations.md).
    assert set(flags) <= {"--db", "--listen", "--control", "--threads", "--static",
                          "--log-level", "--token-file"}
    # The drop-in's environment file makes a valid configuration of tally's tally.cfg.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    for line in (ROOT / "systemd" / "haproxy.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            k, v = line.split("=", 1)
            env[k] = v
    env.update(TALLY_HAPROXY_DIR=str(ROOT / "haproxy"),
               TALLY_SPOE_CONF=str(ROOT / "haproxy" / "spoe-tally.conf"))
    r = subprocess.run([HAPROXY, "-c", "-f", str(ROOT / "haproxy" / "tally.cfg")], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    queryd = BUILD / "tally-queryd"
    if queryd.exists():
        help_text = subprocess.run([str(queryd), "--help"], capture_output=True,
                                   text=True).stdout
        for f in flags:
            assert f in help_text, f"queryd has no {f}"


# --- backup and retention, as docs/operations.md says, against a live agent ----------

def procedure(name):
    """The shell lines of the block marked <!-- procedure: NAME --> in operations.md."""
    m = re.search(rf"<!-- procedure: {name} -->\n```sh\n(.*?)```", OPERATIONS.read_text(), re.S)
    assert m, f"docs/operations.md has no procedure {name}"
    return m.group(1)


def run_procedure(name, stack, **env):
    e = dict(os.environ)
    e.update({"PATH": f"{BUILD}:{e['PATH']}", "TALLY_DB": str(stack.db)}, **env)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", procedure(name)], env=e,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"procedure {name}: {r.stdout}\n{r.stderr}"
    return r.stdout


OLD_ROWS = 20000
OLD_DAYS = 120          # older than the procedure's --older-than-days


def seed_old_rows(db):
    """Raw rows and one hourly rollup from OLD_DAYS ago, as an agent would have left them."""
    old_ms = int((time.time() - OLD_DAYS * 86400) * 1000)
    con = sqlite3.connect(db, timeout=10)
    try:
        with con:
            con.executemany(
                "INSERT INTO requests (request_id, key_id, model, status, outcome, usage_source,"
                " started_at, prompt_tokens, completion_tokens) VALUES (?, 1, 'mock-gpt', 200,"
                " 'complete', 'response', ?, 10, 5)",
                ((f"old-{i:06d}", old_ms + i) for i in range(OLD_ROWS)))
            cols = [(r[1], r[2].upper()) for r in con.execute("PRAGMA table_info(usage_hourly)")]
            values = {"hour": old_ms // 3600000 * 3600, "key_id": 1, "model": "mock-gpt",
                      "requests": OLD_ROWS}
            row = [values.get(n, "" if t == "TEXT" else 0) for n, t in cols]
            con.execute(f"INSERT INTO usage_hourly ({','.join(n for n, _ in cols)}) VALUES "
                        f"({','.join('?' * len(cols))})", row)
    finally:
        con.close()
    return values["hour"]


class Load(threading.Thread):
    """Sequential chat completions through the gateway on one keep-alive connection,
    noting each response's id, status and when it was sent."""

    def __init__(self, stack):
        super().__init__(daemon=True)
        self.stack, self.done, self.sent = stack, threading.Event(), []
        self.error = None

    def run(self):
        body = json.dumps({"model": "mock-gpt", "max_tokens": 20, "messages": []})
        conn = None
        try:
            while not self.done.is_set():
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.stack.gw_port, timeout=10)
                t = time.time()
                conn.request("POST", "/v1/chat/completions", body,
                             {"Authorization": f"Bearer {self.stack.key}",
                              "Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                self.sent.append((t, resp.status, resp.getheader("x-request-id")))
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
                time.sleep(0.002)
        except Exception as e:   # reported by the test, not lost in the thread
            self.error = e
        finally:
            if conn:
                conn.close()

    def sent_between(self, t0, t1):
        return [s for s in self.sent if t0 <= s[0] <= t1]


def settled(stack, transactions, timeout=15):
    """The counters once every transaction's record has arrived (the last ones may
    still be on their way after their responses) and nothing is in flight."""
    deadline = time.time() + timeout
    while True:
        c = stack.counters()
        if (c["received"] >= transactions and c["received"] == c["written"] + c["dropped"]) \
                or time.time() > deadline:
            return c
        time.sleep(0.1)


def test_backup_and_retention_procedures_while_the_agent_writes(tmp_path):
    s = Stack(tmp_path)
    load = None
    try:
        s.seed()
        old_hour = seed_old_rows(s.db)
        s.start_mock()
        s.start_agent()
        s.start_haproxy()
        s.wait_agent_state("UP")
        load = Load(s)
        load.start()
        time.sleep(1.0)

        # Backup while rows keep arriving.
        backups = tmp_path / "backups"
        backups.mkdir()
        t0 = time.time()
        out = run_procedure("backup", s, BACKUP_DIR=str(backups))
        t1 = time.time()
        assert "integrity ok" in out
        time.sleep(0.5)

        # Retention while rows keep arriving.
        p0 = time.time()
        out = run_procedure("prune", s)
        p1 = time.time()
        assert f"pruned {OLD_ROWS} requests rows" in out, out
        time.sleep(1.0)
        load.done.set()
        load.join(15)
        assert load.error is None, load.error
        assert not load.is_alive()

        sent = load.sent
        assert len(sent) > 100 and all(st == 200 for _, st, _ in sent)
        during_prune = load.sent_between(p0, p1)
        assert during_prune, "no request went through while prune ran"

        c = settled(s, len(sent))
        # The writer never waited out its 100 ms lock timeout behind a prune batch
        # (valgrind slows everything down too much to promise that).
        with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics_port}/metrics") as m:
            busy = re.search(r'^tally_errors_total\{kind="write_busy"\} (\d+)$',
                             m.read().decode(), re.M)
        assert busy, "no write_busy counter in the agent's metrics"
        if os.environ.get("TALLY_VALGRIND") != "1":
            assert busy.group(1) == "0"
        # The accounting invariant holds and nothing was dropped: the writer kept up.
        assert c["received"] == c["written"] + c["dropped"], c
        assert c["dropped"] == 0, c
        assert c["received"] == len(sent), (c, len(sent))
        rows = {r["request_id"]: r for r in s.rows()}
        # Every gateway transaction has its row, including those written during prune...
        missing = [rid for _, _, rid in sent if rid not in rows]
        assert not missing, f"{len(missing)} rows missing"
        assert all(rows[rid]["status"] == 200 for _, _, rid in during_prune)
        # ...and only the old rows went; their rollup stays.
        assert not [rid for rid in rows if rid.startswith("old-")]
        assert len(rows) == len(sent)
        con = sqlite3.connect(f"file:{s.db}?mode=ro", uri=True, timeout=10)
        try:
            kept = con.execute("SELECT requests FROM usage_hourly WHERE hour = ? AND key_id = 1",
                               (old_hour,)).fetchone()
        finally:
            con.close()
        assert kept == (OLD_ROWS,)

        # The backup: one complete file, integrity ok, with the old rows and the rows
        # committed before it was taken, and counters matching its rows.
        files = list(backups.iterdir())
        assert len(files) == 1 and files[0].suffix == ".db", files
        b = sqlite3.connect(f"file:{files[0]}?mode=ro", uri=True)
        try:
            assert b.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert b.execute("SELECT count(*) FROM requests WHERE request_id LIKE 'old-%'"
                             ).fetchone() == (OLD_ROWS,)
            live = b.execute("SELECT count(*) FROM requests WHERE request_id NOT LIKE 'old-%'"
                             ).fetchone()[0]
            written = b.execute("SELECT written FROM accounting").fetchone()[0]
            assert live == written
            assert len([x for x in sent if x[0] < t0]) - 50 <= live <= len([x for x in sent if x[0] < t1])
            assert b.execute("SELECT count(*) FROM keys").fetchone()[0] >= 1
        finally:
            b.close()
        assert not (files[0].parent / (files[0].name + "-wal")).exists()
    finally:
        if load:
            load.done.set()
            load.join(15)
        s.close()


@pytest.mark.parametrize("umask", [0o022, 0o000, 0o277], ids=["022", "000", "277"])
def test_backup_is_mode_0600_whatever_the_umask(tmp_path, umask):
    """The copy holds key hashes and usage: owner-only whatever the umask (SQLite left
    alone made it 0644 under 022 and 000, 0400 under 277)."""
    ctl = str(binary("tallyctl"))
    db = tmp_path / "tally.db"
    subprocess.run([ctl, "--db", str(db), "provider", "set", "p", "--api", "openai",
                    "--backend", "be_p"], check=True, capture_output=True)
    backups = tmp_path / "backups"
    backups.mkdir()
    dest = backups / "copy.db"
    r = subprocess.run([ctl, "--db", str(db), "backup", str(dest)], capture_output=True,
                       text=True, preexec_fn=lambda: os.umask(umask))
    assert r.returncode == 0, r.stderr
    assert oct(dest.stat().st_mode & 0o7777) == oct(0o600)
    assert [p.name for p in backups.iterdir()] == ["copy.db"]   # no temporary left


def test_backup_refuses_to_overwrite_and_prune_refuses_a_missing_db(tmp_path):
    ctl = str(binary("tallyctl"))
    db = tmp_path / "tally.db"
    subprocess.run([ctl, "--db", str(db), "provider", "set", "p", "--api", "openai",
                    "--backend", "be_p"], check=True, capture_output=True)
    dest = tmp_path / "copy.db"
    dest.write_bytes(b"precious")
    r = subprocess.run([ctl, "--db", str(db), "backup", str(dest)], capture_output=True, text=True)
    assert r.returncode == 1 and "exists" in r.stderr
    assert dest.read_bytes() == b"precious"
    r = subprocess.run([ctl, "--db", str(tmp_path / "nope.db"), "prune", "--older-than-days", "30"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert not (tmp_path / "nope.db").exists()
    r = subprocess.run([ctl, "--db", str(db), "prune", "--older-than-days", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    r = subprocess.run([ctl, "--db", str(db), "prune", "--older-than-days", "30", "--dry-run"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("would prune 0 requests rows"), r.stdout
