"""Runs every C unit-test binary ($TALLY_BUILD/test_*) as one pytest case.

TALLY_BUILD (default "build") is relative to the repository root unless absolute.
TALLY_VALGRIND=1 runs each binary under valgrind memcheck; any memcheck error or
definite leak fails the case.

A binary whose source (tests/unit/NAME.c) reads TALLY_TEST_PG_URL runs its store tests
on PostgreSQL too: it gets a fresh empty database on the session's private server
(conftest.py's pg_server) in that variable. test_pg_outage stops and starts a server of
its own under test_db, which must then lose its connection and get it back.
"""
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("TALLY_BUILD", "build")
VALGRIND = os.environ.get("TALLY_VALGRIND") == "1"
VALGRIND_CMD = ["valgrind", "--error-exitcode=99", "--leak-check=full",
                "--errors-for-leak-kinds=definite", "-q"]
TIMEOUT = 600 if VALGRIND else 120
DB_ROW, DB_LOST = 1, 7   # common/db.h's enum db_status


def _unit_binaries():
    return sorted(p for p in BUILD.glob("test_*")
                  if p.is_file() and os.access(p, os.X_OK))


BINARIES = _unit_binaries()


def _uses_pg(binary):
    src = ROOT / "tests" / "unit" / f"{binary.name}.c"
    return src.exists() and "TALLY_TEST_PG_URL" in src.read_text(errors="replace")


@pytest.mark.parametrize("binary", BINARIES or [None],
                         ids=[p.name for p in BINARIES] or ["no-binaries"])
def test_unit(binary, request):
    if binary is None:
        pytest.fail(f"no unit-test binaries ({BUILD}/test_*): run `make unit-bins` first")
    cmd = [str(binary)]
    if VALGRIND:
        if shutil.which("valgrind") is None:
            pytest.fail("TALLY_VALGRIND=1 but valgrind is not installed")
        cmd = VALGRIND_CMD + cmd
    env = dict(os.environ)
    if _uses_pg(binary):
        server = request.getfixturevalue("pg_server")
        name = re.sub(r"[^a-z0-9_]", "_", binary.name.lower())
        env["TALLY_TEST_PG_URL"] = server.create_db(f"unit_{name}_{os.getpid()}")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env,
                          errors="replace", timeout=TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}\n"
                    f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}",
                    pytrace=False)


def test_pg_outage():
    """The server stops under an open connection and starts again: the statement in
    progress fails with DB_LOST, so does a begin while it is down, and the next step
    after it is back reconnects and prepares the statement again."""
    from pgserver import PgServer
    binary = BUILD / "test_db"
    if not binary.exists():
        pytest.fail(f"{binary} is not built (run make unit-bins)")
    tmpdir = tempfile.mkdtemp(prefix="tally-pg-outage-")
    server = PgServer(tmpdir)
    proc = None
    try:
        server.start()
        url = server.create_db("outage")
        proc = subprocess.Popen([str(binary), "outage", url], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        first = server.pid
        server.stop()
        proc.stdin.write("down\n")
        proc.stdin.flush()
        assert proc.stdout.readline().split() == ["down", str(DB_LOST)]
        server.start()
        assert server.pid != first
        proc.stdin.write("up\n")
        proc.stdin.flush()
        assert proc.stdout.readline().split() == ["up", str(DB_ROW), "0"]
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        server.close()
        shutil.rmtree(tmpdir, ignore_errors=True)
