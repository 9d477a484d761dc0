"""Runs the Lua files' own tests (tests/lua/test_capture.lua: the capture filter,
haproxy/capture.lua with scanner.lua; tests/lua/test_scanner.lua: scanner.lua alone) under
each stock Lua that an HAProxy tally supports embeds: 5.3 (Debian 12's HAProxy 2.6) and
5.4 (3.4). scripts/install-deps.sh installs both; a missing interpreter is a failure, not a
skip. And checks that scanner.lua holds spoa/reqrules.c's lists as scripts/luarules.c
writes them today (`make lua-rules`).
"""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
INTERPRETERS = ["lua5.3", "lua5.4"]
SUITES = ["tests/lua/test_capture.lua", "tests/lua/test_scanner.lua"]


@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("lua", INTERPRETERS)
def test_lua_suite(lua, suite):
    exe = shutil.which(lua)
    if exe is None:
        pytest.fail(f"{lua} not found: run scripts/install-deps.sh", pytrace=False)
    proc = subprocess.run([exe, suite], cwd=ROOT,
                          capture_output=True, text=True, errors="replace", timeout=300)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"{lua} {suite} exited {proc.returncode}\n{out}", pytrace=False)
    assert " 0 failed" in out, out


def test_scanner_lua_holds_the_request_rules_of_the_agent():
    build = pathlib.Path(os.environ.get("TALLY_BUILD", ROOT / "build"))
    gen = subprocess.run([str(build / "luarules")], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    lua = (ROOT / "haproxy" / "scanner.lua").read_text()
    assert gen.startswith("-- BEGIN reqrules") and gen.endswith("-- END reqrules\n")
    assert gen in lua, "haproxy/scanner.lua's reqrules block is stale: run make lua-rules"
