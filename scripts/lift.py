"""lift.py: tally added to an operator's HAProxy configuration as the integration guide
says. Prints tests/integration/operator/haproxy.cfg (a typical operator's file: TLS
frontend, own ACLs and backends) with docs/haproxy-integration.md's one diff block
applied; the tests (tests/integration/stack.py) and make bench-decision run HAProxy on
it, before tally.cfg. A hunk whose context is not in the file fails: nothing is applied
by guess."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPERATOR_CFG = ROOT / "tests" / "integration" / "operator" / "haproxy.cfg"


def integration_diff():
    """The ```diff block of docs/haproxy-integration.md."""
    doc = (ROOT / "docs" / "haproxy-integration.md").read_text()
    blocks = re.findall(r"^```diff\n(.*?)^```$", doc, re.S | re.M)
    if len(blocks) != 1:
        raise ValueError("docs/haproxy-integration.md must hold one diff block")
    return blocks[0]


def apply_diff(text, diff):
    """text with the unified diff applied; every context and removed line must be where
    the hunk says, in order, or ValueError."""
    lines = text.splitlines()
    out, at = [], 0
    for hunk in re.split(r"^@@.*@@.*\n", diff, flags=re.M)[1:]:
        body = [line or " " for line in hunk.splitlines()]   # an empty context line
        old = [line[1:] for line in body if line[:1] in (" ", "-")]
        start = next((i for i in range(at, len(lines) - len(old) + 1)
                      if lines[i:i + len(old)] == old), None)
        if start is None:
            raise ValueError(f"the diff's hunk does not apply:\n{hunk}")
        out += lines[at:start]
        out += [line[1:] for line in body if line[:1] in (" ", "+")]
        at = start + len(old)
    return "\n".join(out + lines[at:]) + "\n"


def lifted():
    return apply_diff(OPERATOR_CFG.read_text(), integration_diff())


if __name__ == "__main__":
    sys.stdout.write(lifted())
