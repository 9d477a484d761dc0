"""Several nodes on one PostgreSQL store (docs: DESIGN.md, "Several nodes"): two gateway
stacks, each its own HAProxy and agent (nodes n1 and n2), share the keys, models and
usage rows of one database. A key created or revoked through either node works or stops
on both within the reload interval; each node accounts its own requests in its own
accounting row, received = written + dropped holding per node and summed; a restarted
node continues its counters; a second agent under a running node's name is refused; and
while the store is down the agents keep deciding with the keys they hold."""
import time

import pytest

from cluster import Cluster
from stack import Proc, wait_port
from conftest import binary, free_port

CHAT = "/v1/chat/completions"
RELOAD_MS = 250   # the agent's default --reload-interval-ms


def chat():
    return {"model": "mock-gpt", "messages": [{"role": "user", "content": "hello"}]}


def wait_for(predicate, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def nodes(tmp_path, pg_server, pg_url):
    # n2's URL carries a password (the test server trusts loopback and ignores it):
    # no log may print it.
    cluster = Cluster(tmp_path, pg_server, pg_url, 2)
    cluster.nodes[1].db = pg_url.replace("postgres@", "postgres:hunter2@", 1)
    with cluster:
        yield cluster.nodes


def status(stack, key):
    return stack.gateway("POST", CHAT, chat(), key=key)[0]


def test_a_key_works_and_stops_on_every_node_within_the_reload_interval(nodes):
    n1, n2 = nodes
    key = n1.create_key("shared")
    assert wait_for(lambda: status(n1, key) == 200 and status(n2, key) == 200, 3)
    n2.tallyctl("key", "revoke", "shared")
    revoked_at = time.time()
    assert wait_for(lambda: status(n1, key) == 401, 3)
    assert wait_for(lambda: status(n2, key) == 401, 3)
    # One interval to notice, one load; a request's own round trip on top.
    took = time.time() - revoked_at
    assert took < 4 * RELOAD_MS / 1000, took
    assert status(n1, n1.key) == 200 and status(n2, n2.key) == 200
    log = n2.procs["agent"].output()
    assert "node n2, database postgresql://" in log and "hunter2" not in log


def counted(stack, written):
    c = stack.counters()
    return c is not None and c["written"] >= written


def test_each_node_accounts_its_own_requests(nodes):
    n1, n2 = nodes
    ids = []
    for stack, n in ((n1, 3), (n2, 2)):
        for _ in range(n):
            code, hdrs, body = stack.gateway("POST", CHAT, chat(), key=stack.key)
            assert code == 200, body
            ids.append(hdrs["x-request-id"])
    rows = n1.wait_rows(5)
    assert sorted(r["request_id"] for r in rows) == sorted(ids)
    assert wait_for(lambda: counted(n1, 3) and counted(n2, 2), 10)
    c1, c2, total = n1.counters(), n2.counters(), n1.counters_all()
    assert (c1["written"], c2["written"]) == (3, 2)
    for c in (c1, c2, total):
        assert c["received"] == c["written"] + c["dropped"], c
    assert total["written"] == 5 and total["received"] == c1["received"] + c2["received"]


def test_a_restarted_node_continues_its_counters(nodes):
    n1, n2 = nodes
    for _ in range(2):
        assert status(n1, n1.key) == 200
    assert status(n2, n2.key) == 200
    assert wait_for(lambda: counted(n1, 2) and counted(n2, 1), 10)
    assert n1.stop_agent() == 0
    n1.start_agent()
    n1.wait_agent_state("UP")
    assert wait_for(lambda: status(n1, n1.key) == 200, 5)
    assert wait_for(lambda: counted(n1, 3), 10)
    c1, c2 = n1.counters(), n2.counters()
    assert c1["written"] == 3 and c1["received"] == c1["written"] + c1["dropped"]
    assert c2["written"] == 1


def test_a_second_agent_under_a_running_nodes_name_is_refused(nodes, tmp_path):
    n1, _ = nodes
    port = free_port()
    p = Proc("agent-twin", [str(binary("tally-agent")), "--listen", f"127.0.0.1:{port}",
                            "--db", n1.db, "--node", "n1", "--secret", str(n1.secret),
                            "--records", f"127.0.0.1:{free_port()}", "--metrics", "off",
                            "--journal", str(tmp_path / "twin.journal"),
                            "--control", str(tmp_path / "twin.ctl")], tmp_path)
    try:
        with pytest.raises(RuntimeError):
            wait_port(port, p, timeout=15)
        assert "n1" in p.output()
    finally:
        p.stop()
    assert status(n1, n1.key) == 200


def test_agents_keep_deciding_while_the_store_is_down(nodes, pg_server):
    n1, n2 = nodes
    key = n1.create_key("kept")
    assert wait_for(lambda: status(n1, key) == 200 and status(n2, key) == 200, 3)
    pg_server.stop()
    try:
        started = time.time()
        for _ in range(3):
            assert status(n1, key) == 200 and status(n2, key) == 200
        # Deciding never waits on the store: each answer as quick as with it up.
        assert time.time() - started < 3
        time.sleep(4 * RELOAD_MS / 1000)
    finally:
        pg_server.start()
    for stack in (n1, n2):
        log = stack.procs["agent"].output()
        assert log.count("cannot read the configuration generation") == 1, log
    # Back: a revocation reaches both nodes again.
    n1.tallyctl("key", "revoke", "kept")
    assert wait_for(lambda: status(n1, key) == 401 and status(n2, key) == 401, 5)
    for stack in (n1, n2):
        assert "the store answers again" in stack.procs["agent"].output()
