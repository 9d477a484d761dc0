"""The contract between HAProxy and the agent exists once: the record's fields are
spoa/record.h's table (RECORD_FIELD_TABLE), which record.c parses and MACs by, and
haproxy/haproxy.cfg's log-format must be the line build/recformat prints from it."""
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def log_format():
    cfg = (ROOT / "haproxy" / "haproxy.cfg").read_text()
    lines = re.findall(r'^\s*log-format "(tally\d .*)"$', cfg, re.M)
    assert len(lines) == 1, lines
    return lines[0]


def test_haproxy_prints_the_record_the_agent_reads():
    build = pathlib.Path(os.environ.get("TALLY_BUILD", ROOT / "build"))
    want = subprocess.run([str(build / "recformat")], capture_output=True, text=True,
                          check=True, timeout=60).stdout.rstrip("\n")
    got = log_format()
    # Field by field first, so that a failure names the field that disagrees.
    for i, (g, w) in enumerate(zip(got.split(" "), want.split(" "))):
        assert g == w, f"haproxy.cfg's log-format field {i} is {g!r}; spoa/record.h says {w!r}"
    assert got == want, "haproxy.cfg's log-format differs from spoa/record.h's table"
