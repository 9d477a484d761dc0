"""Stored responses (Responses API, store: true) across nodes on one PostgreSQL store: a
response created through one node is read, cancelled, deleted and built on through
another, by the key that made it only, once its create's row is in the store (spoa/
owner.h: on a shared store every id a node's table lacks is asked of the store); a
flood of made-up ids gets 404 and leaves the node serving (a time budget per thread)."""
import json
import time

import pytest

from cluster import Cluster

RESPONSES = "/v1/responses"


def wait_for(predicate, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def nodes(tmp_path, pg_server, pg_url):
    with Cluster(tmp_path, pg_server, pg_url, 2) as cluster:
        yield cluster.nodes


def create(stack, key, **extra):
    status, _, got = stack.gateway("POST", RESPONSES, dict({"model": "mock-gpt", "input": "hi"},
                                                           **extra), key=key)
    assert status == 200, got
    return json.loads(got)["id"]


def stored(stack, rid):
    return stack.scalar("SELECT count(*) FROM stored_responses WHERE response_id = ?", (rid,)) == 1


def refused(reply):
    status, headers, body = reply
    return status == 404 and json.loads(body)["error"]["code"] == "response_not_found"


def test_a_response_made_on_one_node_is_its_keys_on_every_node(nodes):
    n1, n2 = nodes
    other = n1.create_key("other", "--default-model", "mock-gpt")
    assert wait_for(lambda: n2.gateway("GET", "/v1/models", key=other)[0] == 200, 3)
    made = create(n1, n1.key)
    # the writer commits in batches: the row is in the store a few ms after the answer
    assert wait_for(lambda: stored(n1, made), 5)
    for method, path in (("GET", f"{RESPONSES}/{made}"), ("POST", f"{RESPONSES}/{made}/cancel"),
                         ("GET", f"{RESPONSES}/{made}/input_items")):
        status, _, got = n2.gateway(method, path, key=n2.key)
        assert status == 200, (method, path, got)
    # built on through the other node, and that one's create read back through the first
    chained = create(n2, n2.key, previous_response_id=made)
    assert wait_for(lambda: stored(n2, chained), 5)
    assert n1.gateway("GET", f"{RESPONSES}/{chained}", key=n1.key)[0] == 200
    # another key gets what it gets on one node: the response does not exist
    n2.mock_clear()
    assert refused(n2.gateway("GET", f"{RESPONSES}/{made}", key=other))
    assert refused(n2.gateway("DELETE", f"{RESPONSES}/{made}", key=other))
    assert refused(n2.gateway("POST", RESPONSES, {"model": "mock-gpt", "input": "x",
                                                  "previous_response_id": made}, key=other))
    assert refused(n1.gateway("GET", f"{RESPONSES}/{chained}", key=other))
    assert refused(n2.gateway("GET", f"{RESPONSES}/resp_nobody", key=n2.key))
    assert n2.mock_requests() == []
    assert n2.gateway("DELETE", f"{RESPONSES}/{made}", key=n2.key)[0] == 200
    # the store's rows say who made each: the same key on both nodes
    rows = n1.pg_rows("SELECT response_id, key_id FROM stored_responses ORDER BY response_id")
    assert sorted(r["response_id"] for r in rows) == sorted([made, chained])
    assert len({r["key_id"] for r in rows}) == 1


def test_made_up_ids_get_404_and_the_node_keeps_serving(nodes):
    n1, n2 = nodes
    made = create(n1, n1.key)
    assert wait_for(lambda: stored(n1, made), 5)
    t0 = time.monotonic()
    for i in range(300):
        assert refused(n2.gateway("GET", f"{RESPONSES}/resp_{i:048x}", key=n2.key))
    flood = time.monotonic() - t0
    assert n2.gateway("GET", f"{RESPONSES}/{made}", key=n2.key)[0] == 200
    chat = {"model": "mock-gpt", "messages": [{"role": "user", "content": "hello"}]}
    assert n2.gateway("POST", "/v1/chat/completions", chat, key=n2.key)[0] == 200
    assert flood < 30, flood
