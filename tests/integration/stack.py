"""The real gateway stack for integration tests: mock upstream, tally-agent and HAProxy
(2.6 from PATH, or TALLY_HAPROXY's) on free loopback ports, with a fresh store seeded
through tallyctl: a SQLite database (store="sqlite", the default) or a PostgreSQL
database (store="postgres": pg is the PgServer of tests/pgserver.py, url the database's,
from the pg_url fixture). Several Stacks may share one PostgreSQL URL, each its own node
(node=...): the scale-out layout, one HAProxy and agent per node and one store.

Processes are tracked by PID and stopped by Stack.close(), which the fixtures call on
every exit path."""
import http.client
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import HAPROXY, ROOT, binary, free_port

sys.path.insert(0, str(ROOT / "scripts"))
import lift  # noqa: E402 (scripts/lift.py, after its path)

MOCK_CREDENTIAL = "mock-provider-credential"


class Proc:
    def __init__(self, name, argv, logdir, env=None, preexec=None):
        self.name = name
        self.log_path = logdir / f"{name}.log"
        self.log = open(self.log_path, "ab")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, preexec_fn=preexec)

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.p.pid, sig)

    def stop(self, timeout=10):
        if self.alive():
            self.p.terminate()
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        return self.p.returncode

    def output(self):
        self.log.flush()
        return self.log_path.read_text(errors="replace")


def wait_port(port, proc, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited early:\n{proc.output()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{proc.name} did not listen on {port}:\n{proc.output()}")


def wait_unix(path, proc, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited early:\n{proc.output()}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{proc.name} did not listen on {path}:\n{proc.output()}")


@pytest.fixture
def store(request):
    """The store a test runs on, "sqlite" unless parametrized (BOTH_STORES); a module
    imports this fixture to use it."""
    return getattr(request, "param", "sqlite")


BOTH_STORES = pytest.mark.parametrize("store", ["sqlite", "postgres"], indirect=True)


def store_params(store, request):
    """Stack keyword arguments for store (the store fixture's value): for "postgres", the
    session's server and a fresh database (the pg_server and pg_url fixtures)."""
    if store == "sqlite":
        return {}
    assert store == "postgres", store
    return {"store": store, "pg": request.getfixturevalue("pg_server"),
            "url": request.getfixturevalue("pg_url")}


def make_cert(tmp):
    """A self-signed certificate for localhost, chain and key in one PEM."""
    pem = tmp / "gateway.pem"
    if not pem.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=localhost", "-keyout", str(tmp / "key.pem"),
                        "-out", str(tmp / "cert.pem")], check=True, capture_output=True)
        pem.write_bytes((tmp / "cert.pem").read_bytes() + (tmp / "key.pem").read_bytes())
    return pem


def lifted_operator_cfg(tmp):
    """The sample operator configuration with the guide's diff applied (scripts/lift.py)."""
    cfg = tmp / "operator.cfg"
    cfg.write_text(lift.lifted())
    return cfg


class Stack:
    # Every Stack runs HAProxy behind the sample operator configuration when set
    # (tests/integration/test_lifted_*.py).
    LIFTED = False

    def __init__(self, tmp, fail_policy="closed", agent_args=(), bufsize=None, haproxy_env=None,
                 store="sqlite", pg=None, url=None, node=None, spoe_processing=None,
                 unix=False, agent_env=None):
        """unix: the SPOP and records listeners on unix sockets (in a short directory
        of their own: a socket's path is at most 107 bytes), as make run has them.
        agent_env: variables added to the agent's environment (a fake clock's)."""
        self.tmp = tmp
        self.unix_dir = tempfile.mkdtemp(prefix="tally-") if unix else None
        self.store = store
        self.pg = pg
        if store == "postgres":
            assert pg is not None and url, "a PostgreSQL stack needs pg and url"
            self.db = url
            # No path to derive it from: the one secret of every node, given to each.
            self.secret = tmp / "tally.secret"
            self.node = node or "node1"
        else:
            assert store == "sqlite", store
            self.db = tmp / "tally.db"
            self.secret = None
            self.node = node or "local"
        self.explicit_node = node is not None
        self.gw_port = free_port()
        self.agent_port = free_port()
        self.mock_port = free_port()
        self.records_port = free_port()
        self.metrics_port = free_port()
        self.fail_policy = fail_policy
        self.spoe_processing = spoe_processing
        self.agent_args = list(agent_args)
        self.agent_env = dict(os.environ, **agent_env) if agent_env else None
        self.bufsize = bufsize
        self.extra_haproxy_env = dict(haproxy_env or {})
        self.procs = {}
        self.lifted = Stack.LIFTED
        if self.lifted:
            self.op_tls_port = free_port()

    # --- processes -------------------------------------------------------------
    def start(self, seed=True):
        """seed=False: the store holds the keys and models already (another node's)."""
        if seed:
            self.seed()
        self.start_mock()
        self.start_agent()
        self.start_haproxy()
        self.wait_agent_state("UP")
        return self

    def start_mock(self):
        p = Proc("mock", [str(binary("mock-upstream")), "--listen",
                          f"127.0.0.1:{self.mock_port}", "--quiet"], self.tmp)
        self.procs["mock"] = p
        wait_port(self.mock_port, p)

    def agent_addr(self, haproxy=False):
        """Where the agent's SPOP listener is, as the agent or HAProxy writes it."""
        if self.unix_dir:
            return ("unix@" if haproxy else "unix:") + f"{self.unix_dir}/spop.sock"
        return f"127.0.0.1:{self.agent_port}"

    def records_addr(self, haproxy=False):
        if self.unix_dir:
            return ("unix@" if haproxy else "unix:") + f"{self.unix_dir}/records.sock"
        return f"127.0.0.1:{self.records_port}"

    def start_agent(self, extra=(), preexec=None):
        argv = [str(binary("tally-agent")), "--listen", self.agent_addr(),
                "--db", str(self.db), "--threads", "2",
                "--records", self.records_addr(),
                "--metrics", f"127.0.0.1:{self.metrics_port}",
                "--haproxy-socket", str(self.tmp / "haproxy.sock"),
                *self.store_args(agent=True), *self.agent_args, *extra]
        if os.environ.get("TALLY_VALGRIND") == "1":
            argv = ["valgrind", "--error-exitcode=99", "--leak-check=full",
                    "--errors-for-leak-kinds=definite", "-q"] + argv
        p = Proc("agent", argv, self.tmp, env=self.agent_env, preexec=preexec)
        self.procs["agent"] = p
        if self.unix_dir:
            wait_unix(f"{self.unix_dir}/spop.sock", p, timeout=30)
        else:
            wait_port(self.agent_port, p, timeout=30)

    def spoe_conf(self):
        """The SPOE file as shipped; under valgrind the agent is ~50x slower, and a test
        may ask to outlast a starved CPU (spoe_processing, e.g. "2s"): then a copy with
        that longer processing timeout stands in (nothing else differs)."""
        conf = ROOT / "haproxy" / "spoe-tally.conf"
        timeout = "5s" if os.environ.get("TALLY_VALGRIND") == "1" else self.spoe_processing
        if not timeout:
            return conf
        slow = self.tmp / "spoe-tally.conf"
        text = conf.read_text()
        assert "timeout processing 250ms" in text
        slow.write_text(text.replace("timeout processing 250ms", f"timeout processing {timeout}"))
        return slow

    def haproxy_env(self):
        env = dict(os.environ)
        env.update({
            "TALLY_GATEWAY_ADDR": f"127.0.0.1:{self.gw_port}",
            "TALLY_AGENT_ADDR": self.agent_addr(haproxy=True),
            "TALLY_SPOE_CONF": str(self.spoe_conf()),
            "TALLY_RUN_DIR": str(self.tmp),
            "TALLY_FAIL_POLICY": self.fail_policy,
            "TALLY_FAILOPEN_BACKEND": "be_mock_openai",
            "TALLY_MOCK_ADDR": f"127.0.0.1:{self.mock_port}",
            "TALLY_MOCK_CREDENTIAL": MOCK_CREDENTIAL,
            "TALLY_RECORDS_ADDR": self.records_addr(haproxy=True),
            "TALLY_HAPROXY_DIR": str(ROOT / "haproxy"),
            "TALLY_GATEWAY_SECRET": self.gateway_secret(),
            "TALLY_NBTHREAD": "2",
        })
        if self.unix_dir:
            env["TALLY_RECORDS_LOG_ADDR"] = self.records_addr(haproxy=True) + ".dgram"
        if self.lifted:
            # Clients reach the operator's frontend, which hands /v1/ to tally's on a
            # socket of its own (docs/haproxy-integration.md, "Adding tally to your HAProxy").
            del env["TALLY_NBTHREAD"]   # the operator's file says (nbthread 2)
            env.update({
                "TALLY_GATEWAY_ADDR": f"abns@tally-gateway-{self.gw_port}",
                "OP_HTTP_ADDR": f"127.0.0.1:{self.gw_port}",
                "OP_TLS_ADDR": f"127.0.0.1:{self.op_tls_port}",
                "OP_TLS_CERT": str(make_cert(self.tmp)),
                "OP_RUN_DIR": str(self.tmp),
            })
            if os.getuid() == 0:   # workers that are not root, as in production
                env.update(OP_USER="nobody", OP_GROUP="nogroup")
        env.update(self.extra_haproxy_env)
        return env

    def gateway_secret(self):
        """What the agent expects HAProxy to send (derived from the key secret)."""
        if not getattr(self, "_gateway_secret", None):
            self._gateway_secret = self.tallyctl("gateway-secret").stdout.strip()
        return self._gateway_secret

    def haproxy_cfg(self):
        cfg = ROOT / "haproxy" / "tally.cfg"
        if self.bufsize:   # the shipped file but for its buffer size
            text = cfg.read_text()
            assert "tune.bufsize 16384" in text
            cfg = self.tmp / "tally.cfg"
            cfg.write_text(text.replace("tune.bufsize 16384", f"tune.bufsize {self.bufsize}"))
        return cfg

    def haproxy_files(self):
        """HAProxy's -f arguments: tally.cfg and the demo's mock providers, after the
        operator's own configuration when lifted."""
        files = [self.haproxy_cfg(), ROOT / "haproxy" / "demo.cfg"]
        if self.lifted:
            files.insert(0, lifted_operator_cfg(self.tmp))
        return [a for f in files for a in ("-f", str(f))]

    def start_haproxy(self):
        p = Proc("haproxy", [HAPROXY, "-db", *self.haproxy_files()], self.tmp,
                 env=self.haproxy_env())
        self.procs["haproxy"] = p
        wait_port(self.gw_port, p)

    def reload_haproxy(self):
        """A seamless soft reload, as master-worker does it: a new process takes the old
        one's listening sockets over its stats socket (-x; a fresh bind beside the old one
        would see connections queued in the old socket reset when it closes) and asks the
        old one (-sf) to finish its streams and exit. Returns the old process."""
        old = self.procs["haproxy"]
        self.reloads = getattr(self, "reloads", 0) + 1
        p = Proc(f"haproxy-{self.reloads}", [HAPROXY, "-db", *self.haproxy_files(),
                                             "-x", str(self.tmp / "haproxy.sock"),
                                             "-sf", str(old.pid)],
                 self.tmp, env=self.haproxy_env())
        self.procs["haproxy"] = p
        self.procs[f"haproxy-old-{self.reloads}"] = old
        return old

    def kill_agent(self, sig=signal.SIGKILL):
        p = self.procs.pop("agent")
        p.signal(sig)
        p.p.wait(10)
        p.log.close()
        return p

    def kill_node(self, sig=signal.SIGKILL):
        """The machine dies: its agent and HAProxy get sig at once (the mock upstream,
        another machine's, stays). Returns the two stopped Procs."""
        dead = [self.procs.pop("agent"), self.procs.pop("haproxy")]
        for p in dead:
            p.signal(sig)
        for p in dead:
            p.p.wait(10)
            p.log.close()
        return dead

    def stop_agent(self):
        return self.procs.pop("agent").stop()

    def close(self):
        codes = {}
        for name in [n for n in self.procs if n.startswith("haproxy")] + ["agent", "mock"]:
            p = self.procs.pop(name, None)
            if p:
                codes[name] = p.stop()
        if self.unix_dir:
            shutil.rmtree(self.unix_dir, ignore_errors=True)
        return codes

    def logs(self):
        return "\n".join(f"--- {n} ---\n{p.output()}" for n, p in self.procs.items())

    # --- HAProxy runtime API -------------------------------------------------------
    def haproxy_cmd(self, cmd):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.tmp / "haproxy.sock"))
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def agent_state(self):
        lines = self.haproxy_cmd("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("pxname") == "tally-agents" and row.get("svname") == "agent1":
                return row["status"]
        raise AssertionError("agent server not in stats")

    def wait_agent_state(self, prefix, timeout=15):
        deadline = time.time() + timeout
        state = None
        while time.time() < deadline:
            try:
                state = self.agent_state()
            except OSError as e:   # stats socket not there yet
                state = repr(e)
            if state.startswith(prefix):
                return state
            time.sleep(0.1)
        raise AssertionError(f"agent state {state!r}, wanted {prefix}\n{self.logs()}")

    # --- database ----------------------------------------------------------------
    def store_args(self, agent=False):
        """What a binary needs beside --db for this store: on PostgreSQL the shared
        secret, and for the agent its node and the files a URL cannot name."""
        args = []
        if self.store == "postgres":
            args += ["--secret", str(self.secret)]
            if agent:
                args += ["--journal", str(self.tmp / "tally.journal"),
                         "--control", str(self.tmp / "tally.ctl")]
        if agent and (self.store == "postgres" or self.explicit_node):
            args += ["--node", self.node]
        return args

    def tallyctl(self, *args, check=True):
        r = subprocess.run([str(binary("tallyctl")), "--db", str(self.db), *self.store_args(),
                            *args], capture_output=True, text=True, timeout=30)
        if check and r.returncode != 0:
            raise AssertionError(f"tallyctl {args} -> {r.returncode}: {r.stderr}")
        return r

    def seed(self):
        self.tallyctl("provider", "set", "mock-openai", "--api", "openai",
                      "--backend", "be_mock_openai")
        self.tallyctl("provider", "set", "mock-anthropic", "--api", "anthropic",
                      "--backend", "be_mock_anthropic")
        self.tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai",
                      "--input-micros", "150000", "--output-micros", "600000")
        self.tallyctl("model", "set", "mock-claude", "--provider", "mock-anthropic",
                      "--input-micros", "3000000", "--output-micros", "15000000")
        self.key = self.create_key("demo", "--default-model", "mock-gpt")

    def create_key(self, name, *args):
        return self.tallyctl("key", "create", "--name", name, *args).stdout.strip()

    # --- HTTP ----------------------------------------------------------------------
    def _request(self, port, method, path, body=None, headers=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            hdrs = {"Content-Type": "application/json"} if data is not None else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def gateway(self, method, path, body=None, key=None, headers=None, **kw):
        hdrs = dict(headers or {})
        if key is not None:
            hdrs.setdefault("Authorization", f"Bearer {key}")
        return self._request(self.gw_port, method, path, body, hdrs, **kw)

    def direct(self, method, path, body=None, headers=None, **kw):
        hdrs = {"Authorization": f"Bearer {MOCK_CREDENTIAL}"}
        hdrs.update(headers or {})
        return self._request(self.mock_port, method, path, body, hdrs, **kw)

    def mock_requests(self):
        status, _, body = self._request(self.mock_port, "GET", "/_mock/requests")
        assert status == 200
        return json.loads(body)

    def mock_clear(self):
        self._request(self.mock_port, "DELETE", "/_mock/requests")

    # --- accounting ------------------------------------------------------------------
    def pg_rows(self, sql, args=()):
        """Rows of a PostgreSQL query (SQLite's "?" parameters) as dicts."""
        sql = sql.replace("?", "%s")
        return [r[0] for r in self.pg.query(self.db, f"SELECT row_to_json(t) FROM ({sql}) t",
                                            tuple(args))]

    def rows(self, where="1", args=()):
        """Usage rows as dicts, oldest first (the agent writes them; we only read)."""
        if self.store == "postgres":
            return self.pg_rows("SELECT * FROM requests WHERE "
                                f"{'TRUE' if where == '1' else where} ORDER BY id", args)
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        con.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in con.execute(
                f"SELECT * FROM requests WHERE {where} ORDER BY id", args)]
        finally:
            con.close()

    def wait_rows(self, n, where="1", args=(), timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            rows = self.rows(where, args)
            if len(rows) >= n:
                return rows
            time.sleep(0.05)
        raise AssertionError(f"{len(self.rows(where, args))} rows, wanted {n}\n{self.logs()}")

    def row(self, request_id, timeout=15):
        return self.wait_rows(1, "request_id = ?", (request_id,), timeout)[0]

    def scalar(self, sql, args=()):
        """The first column of sql's first row ("?" parameters), on either store."""
        if self.store == "postgres":
            return self.pg.query(self.db, sql.replace("?", "%s"), tuple(args))[0][0]
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            return con.execute(sql, args).fetchone()[0]
        finally:
            con.close()

    def counters(self):
        """This node's accounting row."""
        if self.store == "postgres":
            rows = self.pg_rows("SELECT * FROM accounting WHERE node = ?", (self.node,))
            return rows[0] if rows else None
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            con.row_factory = sqlite3.Row
            return dict(con.execute("SELECT * FROM accounting WHERE node = ?",
                                    (self.node,)).fetchone())
        finally:
            con.close()

    def counters_all(self):
        """Every node's accounting rows summed (counts only)."""
        names = ("received", "written", "dropped", "duplicates", "timed_out", "unpriced",
                 "unauthenticated", "pending_overflow")
        sums = ", ".join(f"CAST(COALESCE(SUM({n}), 0) AS BIGINT) AS {n}" for n in names)
        if self.store == "postgres":
            return self.pg_rows(f"SELECT {sums} FROM accounting")[0]
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            con.row_factory = sqlite3.Row
            return dict(con.execute(f"SELECT {sums} FROM accounting").fetchone())
        finally:
            con.close()
