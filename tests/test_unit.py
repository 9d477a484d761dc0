"""Runs every C unit-test binary ($TALLY_BUILD/test_*) as one pytest case.

TALLY_BUILD (default "build") is relative to the repository root unless absolute.
TALLY_VALGRIND=1 runs each binary under valgrind memcheck; any memcheck error or
definite leak fails the case.
"""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("TALLY_BUILD", "build")
VALGRIND = os.environ.get("TALLY_VALGRIND") == "1"
VALGRIND_CMD = ["valgrind", "--error-exitcode=99", "--leak-check=full",
                "--errors-for-leak-kinds=definite", "-q"]
TIMEOUT = 600 if VALGRIND else 120


def _unit_binaries():
    return sorted(p for p in BUILD.glob("test_*")
                  if p.is_file() and os.access(p, os.X_OK))


BINARIES = _unit_binaries()


@pytest.mark.parametrize("binary", BINARIES or [None],
                         ids=[p.name for p in BINARIES] or ["no-binaries"])
def test_unit(binary):
    if binary is None:
        pytest.fail(f"no unit-test binaries ({BUILD}/test_*): run `make unit-bins` first")
    cmd = [str(binary)]
    if VALGRIND:
        if shutil.which("valgrind") is None:
            pytest.fail("TALLY_VALGRIND=1 but valgrind is not installed")
        cmd = VALGRIND_CMD + cmd
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          errors="replace", timeout=TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}\n"
                    f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}",
                    pytrace=False)
