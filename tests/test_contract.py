"""The contract between HAProxy and the agent exists once: the agent's tables say it
(spoa/record.h's record fields, spoa/txnvar.h's transaction variables, spoa/usage.h's
usage members), build/contract prints what HAProxy's side must then hold, and these tests
compare that with haproxy/. A failure names the field, variable or member that
disagrees, and the file that holds the other copy."""
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
HAPROXY = ROOT / "haproxy"


def contract(what):
    build = pathlib.Path(os.environ.get("TALLY_BUILD", ROOT / "build"))
    return subprocess.run([str(build / "contract"), what], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def cfg_lines():
    """tally.cfg's directives, comments dropped (a log-format's # is no comment)."""
    for line in (HAPROXY / "tally.cfg").read_text().splitlines():
        s = line.strip()
        if s.startswith("#"):
            continue
        if not s.startswith(("log-format", "setenv")):
            s = s.split(" #", 1)[0]
        yield s


def log_format():
    lines = [m.group(1) for m in (re.match(r'log-format "(tally\d .*)"$', s) for s in cfg_lines())
             if m]
    assert len(lines) == 1, lines
    return lines[0]


def test_haproxy_prints_the_record_the_agent_reads():
    want = contract("log-format").rstrip("\n")
    got = log_format()
    # Field by field first, so that a failure names the field that disagrees.
    for i, (g, w) in enumerate(zip(got.split(" "), want.split(" "))):
        assert g == w, f"tally.cfg's log-format field {i} is {g!r}; spoa/record.h says {w!r}"
    assert got == want, "tally.cfg's log-format differs from spoa/record.h's table"


VAR = r"txn\.tally\.(\w+)"


def observed_vars():
    """Who writes and who reads each txn.tally variable in haproxy/, as the files say."""
    writers, readers = {}, {}

    def note(table, name, who):
        table.setdefault(name, set()).add(who)

    for s in cfg_lines():
        for m in re.finditer(r"(?:set-var|unset-var)\(" + VAR + r"\)", s):
            note(writers, m.group(1), "cfg")
        for m in re.finditer(VAR, re.sub(r"(?:set-var|unset-var)\(" + VAR + r"\)", "", s)):
            note(readers, m.group(1), "cfg")
    lua = "".join(p.read_text() for p in sorted(HAPROXY.glob("*.lua")))
    for m in re.finditer(r'(set_var|unset_var|get_var)\("' + VAR + '"', lua):
        note(readers if m.group(1) == "get_var" else writers, m.group(2), "lua")
    # Any other spelling (a name built at run time, say) would escape this test.
    named = re.findall(r'_var\("(?:' + VAR + r'|proc\.\w+)"', lua)
    assert len(named) == len(re.findall(r"_var\(", lua)), \
        "a Lua file names a transaction variable other than as a literal"
    spoe = [l for l in (HAPROXY / "spoe-tally.conf").read_text().splitlines()
            if not l.strip().startswith("#")]
    for line in spoe:
        for m in re.finditer(VAR, line):
            note(readers, m.group(1), "spoe")
        m = re.match(r"\s*option (?:set-on-error|set-process-time) (\w+)", line)
        if m:
            note(writers, m.group(1), "spoe")
    return writers, readers


def test_every_transaction_variable_is_in_the_table_with_its_writers_and_readers():
    table = {}
    for line in contract("vars").splitlines():
        name, w, r = line.split(" ")
        table[name] = (set(w.split(",")) - {"-"}, set(r.split(",")) - {"-"})
    writers, readers = observed_vars()
    for name in sorted(set(writers) | set(readers)):
        assert name in table, f"txn.tally.{name} is used in haproxy/ but not in spoa/txnvar.h"
    for name, (w, r) in table.items():
        # The agent's writes are the table's by construction (session.c sets them by it).
        seen_w = writers.get(name, set()) | (w & {"agent"})
        assert seen_w == w, f"txn.tally.{name}: written by {sorted(seen_w)} in haproxy/, " \
                            f"spoa/txnvar.h says {sorted(w)}"
        seen_r = readers.get(name, set())
        want_r = r - {"operator"}
        assert seen_r == want_r, f"txn.tally.{name}: read by {sorted(seen_r)} in haproxy/, " \
                                 f"spoa/txnvar.h says {sorted(want_r)}"
        if "operator" in r:
            doc = (ROOT / "docs" / "haproxy-integration.md").read_text()
            assert f"txn.tally.{name}" in doc, \
                f"txn.tally.{name} is offered to operators but docs/haproxy-integration.md " \
                "does not list it"


def test_every_record_variable_is_a_transaction_variable_haproxy_reads():
    table = {line.split(" ")[0]: line for line in contract("vars").splitlines()}
    for name in re.findall(r"var\(" + VAR, contract("log-format")):
        assert name in table, f"record.h's txn.tally.{name} is not in spoa/txnvar.h"


def test_the_session_sets_variables_only_by_the_table():
    src = (ROOT / "spoa" / "session.c").read_text()
    assert not re.search(r'session_set_\w+\(out, "', src), \
        "session.c sets a variable by a literal name, not by spoa/txnvar.h's table"


DIALECTS = {"chat", "responses", "messages"}


def dialects_of(condition, probe):
    """The APIs whose answers pass a json_query line's condition: the ACL that a chat
    answer's usage.prompt_tokens was found (probe) and the Responses path ACL."""
    out = set()
    for term in condition.split("||"):
        d = set(DIALECTS)
        for word in re.sub(r"\{[^}]*\}", "", term).split():
            if word == probe:
                d &= {"chat"}
            elif word == "!" + probe:
                d -= {"chat"}
            elif word == "tally_responses":
                d &= {"responses"}
            elif word == "!tally_responses":
                d -= {"responses"}
        out |= d
    return out


def test_every_json_query_reads_the_member_usage_c_reads():
    lines = list(cfg_lines())
    acls = {}
    for s in lines:
        m = re.match(r"acl (\w+) (.*)$", s)
        if m:
            acls.setdefault(m.group(1), []).append(m.group(2))
    probe = [name for name, defs in acls.items() if defs == ["var(txn.tally.u_pt) -m found"]]
    assert len(probe) == 1, "tally.cfg must tell a chat answer by its u_pt alone"
    probe_acl, probe_var = probe[0], "u_pt"
    got = {}
    for s in lines:
        m = re.match(r"http-response set-var\(" + VAR +
                     r"\) res\.body,json_query\('([^']+)'(?:,'int')?\) if (.*)$", s)
        if m:
            var, path, cond = m.groups()
            got.setdefault((var, path), set()).update(dialects_of(cond, probe_acl))
    want = {}
    for line in contract("members").splitlines():
        var, path, dialects = line.split(" ")
        want[(var, path)] = set(dialects.split(","))
    # The probe is read from every answer: that it is found is what makes one a chat's.
    want[(probe_var, "$.usage.prompt_tokens")] = set(DIALECTS)
    for key in sorted(set(got) | set(want)):
        var, path = key
        assert key in got, f"tally.cfg reads no {path} into txn.tally.{var}; usage.h has it"
        assert key in want, f"tally.cfg reads {path} into txn.tally.{var}; usage.h does not"
        assert got[key] == want[key], \
            f"tally.cfg reads {path} into txn.tally.{var} from {sorted(got[key])} answers; " \
            f"usage.h says {sorted(want[key])}"


def test_repeated_blocks_are_written_out():
    """tally.cfg's repeated blocks are what scripts/repeats.awk writes from each block's
    first unit (`make haproxy-repeats`), and the long body's pieces cover what the agent
    assembles: the first piece and the rest, each of spoe-tally.conf's piece size, reach
    the largest body the frontend sends in pieces, spoa/longbody.h's LONGBODY_BODY_MAX."""
    cfg = (HAPROXY / "tally.cfg").read_text()
    out = subprocess.run(["awk", "-f", str(ROOT / "scripts" / "repeats.awk"),
                          str(HAPROXY / "tally.cfg")], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    for i, (got, want) in enumerate(zip(cfg.splitlines(), out.splitlines())):
        assert got == want, f"tally.cfg line {i + 1} is not what make haproxy-repeats writes"
    assert cfg == out, "tally.cfg's repeated blocks are not written out: make haproxy-repeats"
    spoe = (HAPROXY / "spoe-tally.conf").read_text()
    piece = int(re.search(r"data=req\.body,bytes\(txn\.tally\.off,(\d+)\)", spoe).group(1))
    longbody = (ROOT / "spoa" / "longbody.h").read_text()
    m = re.search(r"#define LONGBODY_BODY_MAX \((\d+) << (\d+)\)", longbody)
    body_max = int(m.group(1)) << int(m.group(2))
    assert f"{{ req.body_size le {body_max} }}" in cfg, "tally.cfg's piece limit is not LONGBODY_BODY_MAX"
    first = int(re.search(r"tgn=.* body=req\.body,bytes\(0,(\d+)\)", spoe).group(1))
    assert f"{{ req.body_size gt {first} }}" in cfg, \
        "tally.cfg sends pieces past a size that is not the decision's body cap"
    n = int(re.search(r"# BEGIN repeat (\d+) x 1: .*pieces", cfg).group(1))
    pieces = 1 + n   # the first piece comes before the wait for the large buffer
    assert pieces * piece >= body_max > (pieces - 1) * piece, \
        f"{pieces} pieces of {piece} bytes for {body_max}: make the block's count " \
        f"{-(-body_max // piece) - 1}"
