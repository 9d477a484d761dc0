"""tally-agent --self-check and tally-queryd --self-check, run as built: a good setup
passes (exit 0) and leaves every file as it was; each failure (a database at another
schema or missing, a secret or token file others can read, a port already taken, a
tally.cfg that does not send to the agent) exits 1 with a FAIL line naming it.

The data directory is made by the real tallyctl, the HAProxy configuration is the
shipped haproxy/tally.cfg (or a copy with one line taken out). Ports come from
free_port; the one process started here (a running agent) is stopped by its PID in a
finally block."""
import os
import signal
import socket
import sqlite3
import subprocess
import time

import pytest

from conftest import ROOT, SCHEMA, binary, free_port
from stack import Proc, wait_port

HAPROXY_CFG = ROOT / "haproxy" / "tally.cfg"
SPOE_CONF = ROOT / "haproxy" / "spoe-tally.conf"
VALGRIND = ["valgrind", "--error-exitcode=99", "--leak-check=full",
            "--errors-for-leak-kinds=definite", "-q"] \
    if os.environ.get("TALLY_VALGRIND") == "1" else []
TOKEN = "op-token-0123456789abcdef"


def tallyctl(db, *args):
    r = subprocess.run([str(binary("tallyctl")), "--db", str(db), *args], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


class Setup:
    """A data directory as tallyctl makes it (database + key-hashing secret), the
    agent's addresses on free ports, and HAProxy's environment for tally.cfg."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.db = tmp / "tally.db"
        tallyctl(self.db, "provider", "set", "mock-openai", "--api", "openai",
                 "--backend", "be_mock_openai")
        self.gateway_secret = tallyctl(self.db, "gateway-secret")
        self.spop, self.records, self.metrics = free_port(), free_port(), free_port()
        self.haproxy_cfg = HAPROXY_CFG

    def env(self, **override):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
        env.update({
            "TALLY_AGENT_ADDR": f"127.0.0.1:{self.spop}",
            "TALLY_RECORDS_ADDR": f"127.0.0.1:{self.records}",
            "TALLY_SPOE_CONF": str(SPOE_CONF),
            "TALLY_HAPROXY_DIR": str(ROOT / "haproxy"),
            "TALLY_RUN_DIR": str(self.tmp),
            "TALLY_GATEWAY_SECRET": self.gateway_secret,
        })
        for k, v in override.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def flags(self):
        return ["--db", str(self.db), "--listen", f"127.0.0.1:{self.spop}",
                "--records", f"127.0.0.1:{self.records}",
                "--metrics", f"127.0.0.1:{self.metrics}", "--haproxy-cfg", str(self.haproxy_cfg)]

    def check(self, *extra, flags=None, env=None):
        argv = [str(binary("tally-agent")), *(self.flags() if flags is None else flags), *extra,
                "--self-check"]
        return run(argv, self.env() if env is None else env)


class Result:
    def __init__(self, r):
        self.rc = r.returncode
        self.stdout = r.stdout
        self.stderr = r.stderr
        self.lines = r.stdout.splitlines()
        self.checks = [line for line in self.lines if not line.startswith("tally-")]
        self.failed = [line for line in self.checks if line.startswith("FAIL ")]

    def fail(self, *words):
        """The one FAIL line holding every word."""
        hits = [line for line in self.failed if all(w in line for w in words)]
        assert len(hits) == 1, f"no single FAIL line with {words}:\n{self.stdout}{self.stderr}"
        return hits[0]

    def __repr__(self):
        return f"exit {self.rc}\n{self.stdout}{self.stderr}"


def run(argv, env):
    r = subprocess.run(VALGRIND + argv, capture_output=True, text=True, timeout=60, env=env)
    return Result(r)


def snapshot(directory):
    """Every file under directory with its mode, size and modification time."""
    out = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            st = os.lstat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), directory)] = \
                (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def set_version(db, v):
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA user_version = {v}")
    con.close()


def version(db):
    """PRAGMA user_version, read without leaving -wal and -shm files behind."""
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute("PRAGMA user_version").fetchone()[0]
    finally:
        con.close()


def assert_all_ok(res):
    assert res.rc == 0, res
    assert res.checks and all(line.startswith("ok   ") for line in res.checks), res
    assert res.lines[-1] == f"tally-agent --self-check: {len(res.checks)} checks passed" or \
        res.lines[-1] == f"tally-queryd --self-check: {len(res.checks)} checks passed", res


# --- the agent ----------------------------------------------------------------------

def test_agent_good_setup_from_its_config_file_passes_and_writes_nothing(tmp_path):
    s = Setup(tmp_path)
    conf = tmp_path / "agent.conf"
    conf.write_text(f"# as systemd/agent.conf, plus the HAProxy configuration to check\n"
                    f"listen 127.0.0.1:{s.spop}\n"
                    f"records 127.0.0.1:{s.records}\n"
                    f"metrics 127.0.0.1:{s.metrics}\n"
                    f"db {s.db}\n"
                    f"haproxy-cfg {HAPROXY_CFG}\n")
    before = snapshot(tmp_path)
    res = s.check("--config", str(conf), flags=[])
    assert_all_ok(res)
    assert f"ok   configuration: {conf} and the command line" in res.lines
    assert f"ok   database {s.db}: schema version {SCHEMA}" in res.lines
    out = res.stdout
    for what in (f"SPOP listener 127.0.0.1:{s.spop}", f"records listener (TCP) 127.0.0.1:{s.records}",
                 f"records listener (UDP) 127.0.0.1:{s.records}",
                 f"metrics listener 127.0.0.1:{s.metrics}", f"control socket {s.db}.ctl",
                 f"key-hashing secret {s.db}.secret", "gateway secret: from TALLY_GATEWAY_SECRET",
                 f"journal {s.db}.journal"):
        assert f"ok   {what}" in out, what
    assert f"SPOP address 127.0.0.1:{s.spop} is server agent1 of backend tally-agents" in out
    assert f"records address 127.0.0.1:{s.records} is the server of ring tally-records" in out
    assert f"records address 127.0.0.1:{s.records} is a log target" in out
    # Nothing created (no -wal, -shm, journal, socket), nothing changed.
    assert snapshot(tmp_path) == before
    # What it checked is what a start takes: the same file starts the agent.
    p = Proc("agent", [str(binary("tally-agent")), "--config", str(conf)], tmp_path,
             env=s.env())
    try:
        wait_port(s.spop, p, timeout=30)
    finally:
        assert p.stop() == 0


def test_agent_derives_the_gateway_secret_without_the_environment(tmp_path):
    s = Setup(tmp_path)
    res = s.check(flags=s.flags()[:-2],     # no --haproxy-cfg
                  env=s.env(TALLY_GATEWAY_SECRET=None))
    assert_all_ok(res)
    assert "ok   gateway secret: derived from the key-hashing secret" in res.stdout
    assert "tally.cfg" not in res.stdout


@pytest.mark.parametrize("v,message", [
    (SCHEMA - 1, f"schema version {SCHEMA - 1} is older than {SCHEMA}; run tallyctl or start the agent once to migrate it"),
    (99, f"schema version 99 is newer than this binary supports ({SCHEMA}); upgrade tally"),
])
def test_agent_refuses_another_schema_and_never_migrates(tmp_path, v, message):
    s = Setup(tmp_path)
    set_version(s.db, v)
    before = snapshot(tmp_path)
    res = s.check()
    assert res.rc == 1, res
    assert res.fail(f"database {s.db}", message)
    assert len(res.failed) == 1, res
    assert version(s.db) == v
    assert snapshot(tmp_path) == before


def test_agent_missing_database_is_not_created(tmp_path):
    s = Setup(tmp_path)
    data = tmp_path / "empty"
    data.mkdir()
    flags = s.flags()
    flags[1] = str(data / "tally.db")
    res = s.check(flags=flags)
    assert res.rc == 1, res
    assert res.fail(f"database {data}/tally.db", "No such file or directory",
                    "start the agent or run tallyctl once to create it")
    assert res.fail("key-hashing secret", "does not exist")
    assert os.listdir(data) == []


def test_agent_secret_readable_by_others_is_refused(tmp_path):
    s = Setup(tmp_path)
    secret = tmp_path / "tally.db.secret"
    secret.chmod(0o644)
    res = s.check()
    assert res.rc == 1, res
    line = res.fail("key-hashing secret", str(secret))
    assert "accessible by group or others (mode 644); it must be mode 0600" in line
    # The gateway secret comes from the environment here, so it is still fine.
    assert len(res.failed) == 1, res
    assert secret.stat().st_mode & 0o777 == 0o644


def test_agent_bad_gateway_secret(tmp_path):
    s = Setup(tmp_path)
    res = s.check(env=s.env(TALLY_GATEWAY_SECRET="too-short"))
    assert res.rc == 1, res
    assert res.fail("gateway secret (TALLY_GATEWAY_SECRET)", "base64")


@pytest.mark.parametrize("which", ["listen", "records", "records-udp", "metrics"])
def test_agent_port_already_in_use(tmp_path, which):
    s = Setup(tmp_path)
    port = free_port()
    taken = socket.socket(socket.AF_INET,
                          socket.SOCK_DGRAM if which == "records-udp" else socket.SOCK_STREAM)
    try:
        taken.bind(("127.0.0.1", port))
        if which != "records-udp":
            taken.listen()
        flags = s.flags()
        flag = "--records" if which == "records-udp" else f"--{which}"
        flags[flags.index(flag) + 1] = f"127.0.0.1:{port}"
        # HAProxy's side follows, so that only the port fails.
        spop = port if which == "listen" else s.spop
        records = port if which.startswith("records") else s.records
        env = s.env(TALLY_AGENT_ADDR=f"127.0.0.1:{spop}", TALLY_RECORDS_ADDR=f"127.0.0.1:{records}")
        res = s.check(flags=flags, env=env)
    finally:
        taken.close()
    assert res.rc == 1, res
    what = {"listen": "SPOP listener", "records": "records listener (TCP)",
            "records-udp": "records listener (UDP)", "metrics": "metrics listener"}[which]
    res.fail(f"{what}:", f"127.0.0.1:{port}", "Address already in use")
    assert len(res.failed) == 1, res


def test_agent_running_agent_holds_every_listener(tmp_path):
    """A second start beside a running agent: every listener and the control socket are
    taken; the check leaves the running agent as it was."""
    s = Setup(tmp_path)
    p = Proc("agent", [str(binary("tally-agent")), *s.flags()[:-2]], tmp_path, env=s.env())
    try:
        wait_port(s.spop, p, timeout=30)
        res = s.check()
        assert res.rc == 1, res
        res.fail("SPOP listener:", "Address already in use")
        res.fail("records listener (TCP):", "Address already in use")
        res.fail("records listener (UDP):", "Address already in use")   # probed exclusively
        res.fail("metrics listener:", "Address already in use")
        res.fail(f"control socket {s.db}.ctl", "in use")
        assert f"ok   database {s.db}: schema version {SCHEMA}" in res.lines
        assert p.alive()
        socket.create_connection(("127.0.0.1", s.spop), timeout=2).close()
        assert (tmp_path / "tally.db.ctl").exists()
    finally:
        assert p.stop() == 0


def test_haproxy_cfg_without_the_records_log_line(tmp_path):
    s = Setup(tmp_path)
    text = HAPROXY_CFG.read_text()
    line = '    log "${TALLY_RECORDS_ADDR}" len 8192 format raw local0 info\n'
    assert text.count(line) == 1
    s.haproxy_cfg = tmp_path / "tally.cfg"
    s.haproxy_cfg.write_text(text.replace(line, ""))
    res = s.check()
    assert res.rc == 1, res
    fail = res.fail(f"records address 127.0.0.1:{s.records} is on no log line")
    assert "ring@tally-records" in fail          # what the log lines send to instead
    assert len(res.failed) == 1, res             # the ring still has it
    assert f"records address 127.0.0.1:{s.records} is the server of ring" in res.stdout


def test_haproxy_cfg_sending_records_elsewhere(tmp_path):
    s = Setup(tmp_path)
    other = f"127.0.0.1:{free_port()}"
    res = s.check(env=s.env(TALLY_RECORDS_ADDR=other))
    assert res.rc == 1, res
    res.fail(f"records address 127.0.0.1:{s.records} is on no ring's server line", other)
    res.fail(f"records address 127.0.0.1:{s.records} is on no log line", other)
    assert len(res.failed) == 2, res
    # Unset in this environment: the line says so.
    res = s.check(env=s.env(TALLY_RECORDS_ADDR=None))
    assert res.rc == 1, res
    res.fail("is on no log line", "TALLY_RECORDS_ADDR is not set here")


def test_haproxy_cfg_sending_decisions_elsewhere(tmp_path):
    s = Setup(tmp_path)
    other = f"127.0.0.1:{free_port()}"
    res = s.check(env=s.env(TALLY_AGENT_ADDR=other))
    assert res.rc == 1, res
    res.fail(f"backend tally-agents (use-backend of {SPOE_CONF}) has no server at "
             f"127.0.0.1:{s.spop}", other)
    assert len(res.failed) == 1, res


def test_haproxy_cfg_that_haproxy_would_refuse(tmp_path):
    """Without TALLY_GATEWAY_SECRET tally.cfg stops at its .alert; a missing file is
    reported too."""
    s = Setup(tmp_path)
    res = s.check(env=s.env(TALLY_GATEWAY_SECRET=None))
    assert res.rc == 1, res
    res.fail(f"HAProxy configuration {HAPROXY_CFG}", ".alert", "TALLY_GATEWAY_SECRET is not set")
    s.haproxy_cfg = tmp_path / "none.cfg"
    res = s.check()
    assert res.rc == 1, res
    res.fail(f"HAProxy configuration {tmp_path}/none.cfg", "No such file")


def test_agent_bad_configuration_is_a_failed_check(tmp_path):
    s = Setup(tmp_path)
    res = s.check("--threads", "0")
    assert res.rc == 1, res
    assert res.checks == ["FAIL configuration: command line: invalid value '0' for threads"]
    res = s.check("--node", "two words")
    assert res.checks == ["FAIL configuration: command line: invalid value 'two words' for node"]
    conf = tmp_path / "agent.conf"
    conf.write_text("# first line\ncolour blue\n")
    res = s.check("--config", str(conf))
    assert res.rc == 1, res
    res.fail(f"configuration: {conf}:2: unknown setting 'colour'")
    # Without --self-check the same is a usage error, as before.
    r = subprocess.run([str(binary("tally-agent")), "--threads", "0"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "invalid value '0' for threads" in r.stderr


def test_agent_help_lists_the_flags():
    r = subprocess.run([str(binary("tally-agent")), "--help"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0
    assert "--self-check" in r.stdout and "--haproxy-cfg PATH" in r.stdout
    assert "--node NAME" in r.stdout and "postgresql://" in r.stdout


def pg_flags(tmp_path, url):
    return ["--db", url, "--secret", str(tmp_path / "tally.secret"), "--node", "n1",
            "--listen", f"127.0.0.1:{free_port()}", "--records", f"127.0.0.1:{free_port()}",
            "--metrics", "off", "--journal", str(tmp_path / "journal"),
            "--control", str(tmp_path / "agent.ctl")]


def test_agent_on_postgresql_checks_the_schema_and_writes_nothing(tmp_path, pg_server, pg_url):
    s = Setup(tmp_path)
    url = pg_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
    tallyctl(url, "--secret", str(tmp_path / "tally.secret"), "key", "create", "--name", "k")
    before = snapshot(tmp_path)
    res = s.check(flags=pg_flags(tmp_path, url), env=s.env(TALLY_GATEWAY_SECRET=None))
    assert_all_ok(res)
    assert f"schema version {SCHEMA}" in res.stdout
    assert "hunter2" not in res.stdout + res.stderr
    assert snapshot(tmp_path) == before


def test_agent_on_an_empty_postgresql_database_fails_and_creates_nothing(tmp_path, pg_server,
                                                                          pg_url):
    s = Setup(tmp_path)
    (tmp_path / "tally.secret").write_bytes(os.urandom(32))
    (tmp_path / "tally.secret").chmod(0o600)
    res = s.check(flags=pg_flags(tmp_path, pg_url), env=s.env(TALLY_GATEWAY_SECRET=None))
    assert res.rc == 1, res
    assert len(res.failed) == 1 and "database" in res.failed[0], res
    assert pg_server.query(pg_url, "SELECT count(*) FROM pg_tables"
                                   " WHERE schemaname = 'public'") == [(0,)]


def test_agent_on_postgresql_needs_the_shared_secret(tmp_path, pg_url):
    s = Setup(tmp_path)
    flags = pg_flags(tmp_path, pg_url)
    del flags[2:4]
    res = s.check(flags=flags)
    assert res.rc == 1, res
    res.fail("configuration", "PostgreSQL URL: give --secret")
    # Given but missing: never made by an agent, whose keys would then match nothing.
    tallyctl(pg_url, "--secret", str(tmp_path / "made-by-tallyctl"), "provider", "set", "p",
             "--api", "openai", "--backend", "b")
    res = s.check(flags=pg_flags(tmp_path, pg_url), env=s.env(TALLY_GATEWAY_SECRET=None))
    assert res.rc == 1, res
    res.fail("key-hashing secret", "a start on PostgreSQL refuses")
    r = subprocess.run([str(binary("tally-agent")), *pg_flags(tmp_path, pg_url)],
                       capture_output=True, text=True, timeout=30, env=s.env())
    assert r.returncode != 0 and "tally.secret" in r.stdout + r.stderr, r
    assert not (tmp_path / "tally.secret").exists()


# --- queryd -------------------------------------------------------------------------

def queryd_check(tmp_path, *args, env=None, port=None):
    argv = [str(binary("tally-queryd")), "--db", str(tmp_path / "tally.db"),
            "--listen", f"127.0.0.1:{port or free_port()}", *args, "--self-check"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    base.update(env or {})
    return run(argv, base)


def token_file(tmp_path, mode=0o600):
    tf = tmp_path / "operator.token"
    tf.write_text(TOKEN + "\n")
    tf.chmod(mode)
    return tf


def test_queryd_good_setup_passes_and_writes_nothing(tmp_path):
    Setup(tmp_path)
    tf = token_file(tmp_path)
    before = snapshot(tmp_path)
    res = queryd_check(tmp_path, "--token-file", str(tf))
    assert_all_ok(res)
    assert f"ok   database {tmp_path}/tally.db: schema version {SCHEMA}" in res.lines
    assert f"ok   operator token: from {tf}, private" in res.lines
    assert any(line.startswith("ok   dashboard: ") and "embedded" in line for line in res.lines)
    assert snapshot(tmp_path) == before
    res = queryd_check(tmp_path, env={"TALLY_OPERATOR_TOKEN": TOKEN})
    assert_all_ok(res)
    assert "ok   operator token: from TALLY_OPERATOR_TOKEN" in res.lines


def test_queryd_refuses_an_older_schema(tmp_path):
    s = Setup(tmp_path)
    set_version(s.db, 4)
    res = queryd_check(tmp_path, env={"TALLY_OPERATOR_TOKEN": TOKEN})
    assert res.rc == 1, res
    res.fail(f"database {s.db}", f"schema version 4 is older than {SCHEMA}", "tallyctl")
    assert len(res.failed) == 1, res
    assert version(s.db) == 4


def test_queryd_missing_database(tmp_path):
    res = queryd_check(tmp_path, env={"TALLY_OPERATOR_TOKEN": TOKEN})
    assert res.rc == 1, res
    res.fail(f"database {tmp_path}/tally.db", "No such file or directory")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("mode,message", [(0o644, "open to others (mode 644"),
                                          (0o620, "writable by its group (mode 620")])
def test_queryd_token_file_not_private(tmp_path, mode, message):
    Setup(tmp_path)
    tf = token_file(tmp_path, mode)
    res = queryd_check(tmp_path, "--token-file", str(tf))
    assert res.rc == 1, res
    res.fail("operator token", str(tf), message, "chmod 600")
    assert len(res.failed) == 1, res


def test_queryd_token_file_unusable(tmp_path):
    Setup(tmp_path)
    res = queryd_check(tmp_path, "--token-file", str(tmp_path / "none.token"))
    assert res.rc == 1, res
    res.fail("operator token", "none.token", "No such file")
    tf = token_file(tmp_path)
    tf.write_text(" " + TOKEN + "\n")
    res = queryd_check(tmp_path, "--token-file", str(tf))
    assert res.rc == 1, res
    res.fail("operator token", "whitespace")


def test_queryd_port_in_use(tmp_path):
    Setup(tmp_path)
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        res = queryd_check(tmp_path, port=port, env={"TALLY_OPERATOR_TOKEN": TOKEN})
    assert res.rc == 1, res
    res.fail(f"listener: listen on 127.0.0.1:{port}", "Address already in use")
    assert len(res.failed) == 1, res


def test_queryd_bad_flags_are_a_failed_check(tmp_path):
    res = queryd_check(tmp_path, "--threads", "0")
    assert res.rc == 1, res
    assert res.checks == ["FAIL configuration: bad value for --threads: 0"]
    r = subprocess.run([str(binary("tally-queryd")), "--help"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "--self-check" in r.stdout


def test_agent_stopped_as_soon_as_its_port_answers_shuts_down_cleanly(tmp_path):
    """The agent handles SIGTERM before it listens: a supervisor that stops it the moment
    its port answers (as a test or systemd may) gets a clean exit 0, never death by the
    signal. The window it closed was short: the stop is tried on several starts."""
    s = Setup(tmp_path)
    for i in range(40):
        p = Proc(f"agent{i}", [*VALGRIND, str(binary("tally-agent")), *s.flags()[:-2]], tmp_path,
                 env=s.env())
        try:
            deadline = time.time() + 30
            while time.time() < deadline:
                assert p.alive(), p.output()
                with socket.socket() as c:
                    if c.connect_ex(("127.0.0.1", s.spop)) == 0:
                        break
            p.signal(signal.SIGTERM)
        finally:
            rc = p.stop(timeout=30)
        assert rc == 0, f"start {i}: exit {rc}\n{p.log_path.read_text()}"
