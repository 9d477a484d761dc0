"""CI's short run of the load harness: loadtest/perf.sh smoke drives the real stack with
tally-stress and must end with every body equal to the mock's and every successful
request accounted exactly once. No timing thresholds: only exactness. Both run on SQLite
and on PostgreSQL (PERF_STORE=postgres: perf.sh starts its own private cluster)."""
import os
import re
import subprocess

import pytest

from conftest import ROOT

STORES = pytest.mark.parametrize("store", ["sqlite", "postgres"])


@STORES
def test_perf_smoke_is_exact(store):
    r = subprocess.run(["bash", str(ROOT / "loadtest" / "perf.sh"), "smoke"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TALLY_BUILD=os.environ.get("TALLY_BUILD", "build"),
                                PERF_STORE=store))
    assert r.returncode == 0, r.stdout + r.stderr
    levels = re.findall(r"^\s+(\d+)\s+(\d+)\s.*\s(\d+)\s+accounting (\d+)/(\d+) exact$",
                        r.stdout, re.M)
    assert len(levels) == 2, r.stdout
    for _conns, ok, errors, rows, expected in levels:
        assert int(errors) == 0 and int(ok) == int(rows) == int(expected) > 0
    print(r.stdout)


@STORES
def test_perf_overload_counts_every_drop(store):
    """Deliberate overload (small queue, database locked mid-run: SQLite's write lock, or
    PostgreSQL's exclusive lock on requests): rows are lost, but each as a counted drop,
    and received = written + dropped holds."""
    r = subprocess.run(["bash", str(ROOT / "loadtest" / "perf.sh"), "overload"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TALLY_BUILD=os.environ.get("TALLY_BUILD", "build"),
                                PERF_OVERLOAD_LEVELS="8", PERF_OVERLOAD_SECONDS="4",
                                PERF_OVERLOAD_LOCK_SECONDS="2", PERF_STORE=store))
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^overload: received (\d+) = written (\d+) \+ dropped (\d+): balanced$",
                  r.stdout, re.M)
    assert m, r.stdout
    received, written, dropped = map(int, m.groups())
    assert dropped > 0 and received == written + dropped
    level = re.search(r"^\s+8\s+(\d+)\s.*accounting (\d+)/(\d+) \+ dropped (\d+): balanced$",
                      r.stdout, re.M)
    assert level, r.stdout
    ok, rows, expected, level_dropped = map(int, level.groups())
    assert ok == expected and rows + level_dropped >= ok and rows < ok
    print(r.stdout)
