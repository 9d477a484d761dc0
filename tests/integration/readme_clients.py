"""The client setups of README.md's "Clients" section as the tests use them: the fenced
block after each `<!-- client: NAME -->` marker, with the README's gateway address and
key replaced by the test's, so that the tests run exactly what a user copies."""
import re

from conftest import ROOT

README_ADDR = "127.0.0.1:8080"


def block(name):
    """The text of the fenced block marked `client: NAME`."""
    readme = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- client: {re.escape(name)} -->\n```[a-z]*\n(.*?)```", readme, re.S)
    assert m, f"README.md has no client block {name}"
    return m.group(1)


def with_addr(name, addr):
    """The block with the test's gateway address (HOST:PORT) for make run's."""
    text = block(name)
    assert README_ADDR in text, text
    return text.replace(README_ADDR, addr)


def exports(name, addr, key):
    """The block's `export NAME=VALUE` lines as an environment, $TALLY_KEY being key."""
    env = {}
    for line in with_addr(name, addr).splitlines():
        m = re.fullmatch(r"export ([A-Z_]+)=(\S+)", line.strip())
        if m:
            env[m.group(1)] = m.group(2).replace("$TALLY_KEY", key)
    assert env, name
    return env


def base_url(name, addr):
    """The base URL the block gives its client (baseURL, base_url or base_url =)."""
    m = re.search(r"""base_?(?:url|URL)\s*[:=]\s*["']([^"']+)["']""", with_addr(name, addr))
    assert m, name
    return m.group(1)
