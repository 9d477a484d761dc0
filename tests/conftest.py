"""Shared fixtures: paths to the built binaries and free loopback ports.

Every process a test starts is recorded by PID and stopped on every exit path (fixture
finalizers); nothing is ever killed by name."""
import itertools
import os
import pathlib
import random
import re
import shutil
import socket
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("TALLY_BUILD", "build")
# The HAProxy every test runs (the stack, `haproxy -c`, scripts/run.sh): TALLY_HAPROXY,
# else "haproxy" on PATH. `make test HAPROXY=3.4` sets it to the wrapper that
# scripts/haproxy-version.sh prepares.
HAPROXY = os.environ.get("TALLY_HAPROXY") or "haproxy"
# The Node.js the npm tools are pinned for (scripts/install-deps.sh puts it in
# build/node), ahead of any other on PATH: node, npx and the tools' bin scripts find it.
if (ROOT / "build" / "node" / "bin" / "node").exists():
    os.environ["PATH"] = f"{ROOT / 'build' / 'node' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"


def _haproxy_version():
    try:
        out = subprocess.run([HAPROXY, "-v"], capture_output=True, text=True).stdout
    except OSError:
        return (0, 0)
    m = re.search(r"version (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _cfg_size(name):
    cfg = (ROOT / "haproxy" / "tally.cfg").read_text()
    return int(re.search(rf"^\s*{re.escape(name)} (\d+)$", cfg, re.M).group(1))


HAPROXY_VERSION = _haproxy_version()
# The buffer HAProxy's json_query reads a unary answer in, as tally.cfg sets it: its
# large buffers on 3.4+, else tune.bufsize. An answer longer than this hides its usage
# from json_query.
UNARY_BUFFER = _cfg_size("tune.bufsize.large" if HAPROXY_VERSION >= (3, 4) else "tune.bufsize")
# The longest request body the agent judges whole, sent to it in pieces (3.4+); 0 where
# it judges the first frame's worth only and the capture filter reads the rest.
_WHOLE = re.search(r"\{ req\.body_size le (\d+) \}", (ROOT / "haproxy" / "tally.cfg").read_text())
JUDGED_WHOLE = int(_WHOLE.group(1)) if HAPROXY_VERSION >= (3, 4) else 0


# The schema this tree writes (common/db.h): one place, so that a migration does not
# touch every test that names it.
SCHEMA = int(re.search(r"#define DB_SCHEMA_VERSION (\d+)", (ROOT / "common" / "db.h").read_text()).group(1))


def binary(name):
    path = BUILD / name
    if not path.exists():
        pytest.fail(f"{path} is not built (run make)")
    return path


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


_EPHEMERAL = _ephemeral_range()
_next_port = [random.randrange(10000, 20000)]


def free_port():
    """A loopback port free for TCP and UDP now, outside the kernel's ephemeral range:
    a port picked from that range can be taken by any outgoing connection (HAProxy's to
    the mock, say) before the process meant to listen on it binds it."""
    for _ in range(1000):
        port = _next_port[0]
        _next_port[0] = 10000 + (port - 10000 + 1) % 20000
        if _EPHEMERAL[0] <= port <= _EPHEMERAL[1]:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t, \
                 socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                t.bind(("127.0.0.1", port))
                u.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
    raise RuntimeError("no free loopback port outside the ephemeral range")


@pytest.fixture
def port():
    return free_port()


# A private PostgreSQL server (tests/pgserver.py) for the store-dependent suites: one
# per session, started on first use. Never skipped: if it cannot start, the test fails.
@pytest.fixture(scope="session")
def pg_server():
    from pgserver import PgServer
    tmpdir = tempfile.mkdtemp(prefix="tally-pg-")
    server = PgServer(tmpdir)
    try:
        try:
            server.start()
        except Exception as e:
            pytest.fail(f"cannot start PostgreSQL: {e}", pytrace=False)
        yield server
    finally:
        server.close()
        shutil.rmtree(tmpdir, ignore_errors=True)


_pg_dbs = itertools.count(1)


@pytest.fixture
def pg_url(pg_server, request):
    """A fresh empty database for this test: its postgresql:// URL."""
    name = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]
    return pg_server.create_db(f"t{next(_pg_dbs)}_{name}")
