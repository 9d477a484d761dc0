"""Runs every C unit-test binary ($TALLY_BUILD/test_*) as one pytest case.

TALLY_BUILD (default "build") is relative to the repository root unless absolute.
TALLY_VALGRIND=1 runs each binary under valgrind memcheck; any memcheck error or
definite leak fails the case.

A binary whose source (tests/unit/NAME.c, or a header of tests/unit/ it includes) reads
TALLY_TEST_PG_URL runs its store tests on PostgreSQL too: it gets a fresh empty database
on the session's private server (conftest.py's pg_server) in that variable; the others
run without it, and without starting the server. test_pg_outage stops and starts a server of
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
    """True when tests/unit/NAME.c, or a header of tests/unit/ it includes (say
    teststore.h), reads TALLY_TEST_PG_URL."""
    unit = ROOT / "tests" / "unit"
    todo, seen = [unit / f"{binary.name}.c"], set()
    while todo:
        src = todo.pop()
        if src in seen or not src.exists():
            continue
        seen.add(src)
        text = src.read_text(errors="replace")
        if "TALLY_TEST_PG_URL" in text:
            return True
        todo += [unit / h for h in re.findall(r'^#include "([^"/]+)"', text, re.M)]
    return False


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


def _sqlite_shape(schema):
    """sql/schema.sql applied to a new SQLite database: each table's columns (name,
    type, not null, default), primary key, unique keys, foreign keys, CHECK count and
    indexes."""
    import sqlite3
    db = sqlite3.connect(":memory:")
    db.executescript(schema)
    types = {"INTEGER": "bigint", "TEXT": "text", "BLOB": "bytea"}
    shape = {}
    # sqlite_sequence is SQLite's own (AUTOINCREMENT's counters): no table of ours.
    for name, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"
                                " AND name <> 'sqlite_sequence'"):
        info = db.execute(f"PRAGMA table_info({name})").fetchall()
        cols = [(c[1], types[c[2]], bool(c[3] or c[5]),
                 None if c[4] is None else c[4].strip("'")) for c in info]
        pk = tuple(c[1] for c in sorted((c for c in info if c[5]), key=lambda c: c[5]))
        uniques, indexes = set(), set()
        for _, iname, unique, origin, _ in db.execute(f"PRAGMA index_list({name})"):
            icols = tuple(r[2] for r in db.execute(f"PRAGMA index_info({iname})"))
            if origin == "u":
                uniques.add(icols)
            elif origin == "c":
                indexes.add((iname, icols))
        # An index of a rowid table ends with the rowid (an INTEGER PRIMARY KEY is its
        # alias): PostgreSQL's may name that column last, or leave it out.
        if len(pk) == 1 and dict((c[1], c[2]) for c in info)[pk[0]] == "INTEGER":
            indexes = {(i, (c, c + pk)) for i, c in indexes}
        else:
            indexes = {(i, (c,)) for i, c in indexes}
        fks = {(r[3], r[2], r[4], r[6]) for r in db.execute(f"PRAGMA foreign_key_list({name})")}
        shape[name] = {"columns": cols, "pk": pk, "unique": uniques, "fk": fks,
                       "checks": sql.count("CHECK ("), "indexes": indexes}
    return shape


def _pg_shape(server, url):
    """The same for sql/pg/schema.sql applied to an empty PostgreSQL database."""
    q = lambda sql, *p: server.query(url, sql, p)
    q((ROOT / "sql" / "pg" / "schema.sql").read_text())
    actions = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL",
               "d": "SET DEFAULT"}
    shape = {}
    for (name,) in q("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"):
        cols = [(c, t, nn == "NO", None if d is None else d.split("::")[0].strip("'"))
                for c, t, nn, d in q(
                    "SELECT column_name, data_type, is_nullable, column_default"
                    " FROM information_schema.columns WHERE table_schema = 'public'"
                    " AND table_name = %s ORDER BY ordinal_position", name)]
        cons = q("SELECT c.contype, c.conname,"
                 " ARRAY(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, o)"
                 "  JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n"
                 "  ORDER BY k.o),"
                 " ARRAY(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, o)"
                 "  JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n"
                 "  ORDER BY k.o),"
                 " c.confrelid::regclass::text, c.confdeltype"
                 " FROM pg_constraint c WHERE c.conrelid = %s::regclass", name)
        pk = next((tuple(k) for t, _, k, _, _, _ in cons if t == "p"), ())
        uniques = {tuple(k) for t, _, k, _, _, _ in cons if t == "u"}
        fks = {(k[0], ft, fk[0], actions[d]) for t, _, k, fk, ft, d in cons if t == "f"}
        checks = sum(1 for t, *_ in cons if t == "c")
        indexes = {(i, tuple(c)) for i, c in q(
            "SELECT ic.relname, ARRAY(SELECT a.attname FROM unnest(x.indkey::int2[])"
            "  WITH ORDINALITY k(n, o) JOIN pg_attribute a ON a.attrelid = x.indrelid"
            "  AND a.attnum = k.n ORDER BY k.o)"
            " FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid"
            " WHERE x.indrelid = %s::regclass AND NOT EXISTS"
            "  (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)", name)}
        shape[name] = {"columns": cols, "pk": pk, "unique": uniques, "fk": fks,
                       "checks": checks, "indexes": indexes}
    return shape


def test_schema_parity(pg_server, pg_url):
    """sql/schema.sql and sql/pg/schema.sql describe the same tables: columns in the
    same order with the same types (INTEGER is BIGINT, BLOB is BYTEA), nullability and
    defaults, keys, foreign keys, CHECKs and indexes, and the same version."""
    sqlite_schema = (ROOT / "sql" / "schema.sql").read_text()
    lite = _sqlite_shape(sqlite_schema)
    pg = _pg_shape(pg_server, pg_url)
    assert sorted(lite) == sorted(pg)
    for table in lite:
        indexes = dict(lite[table].pop("indexes"))
        pg_indexes = dict(pg[table].pop("indexes"))
        assert lite[table] == pg[table], table
        assert sorted(indexes) == sorted(pg_indexes), table
        for name, cols in pg_indexes.items():
            assert cols in indexes[name], (table, name, cols)
    version = int(re.search(r"PRAGMA user_version = (\d+)", sqlite_schema).group(1))
    assert pg_server.query(pg_url, "SELECT value FROM meta WHERE name = 'schema_version'") \
        == [(version,)]
