"""Three nodes on one PostgreSQL under load (docs: DESIGN.md, "Several nodes"; issue 16,
item 2): a node killed whole (agent and HAProxy, kill -9), a node's HAProxy reloaded, a
node's agent killed alone. The other nodes answer every request; after the restart
every request any node admitted is exactly one row, and each node's accounting holds
(received = written + dropped, nothing dropped, written = its rows).

What the agent promises, and so what is asserted (spoa/journal.h, spoa/recovery.h,
docs/architecture.md "Accounting"): each decision is journaled before its ACK leaves,
each finished row before it is queued; a restarted agent replays its journal, so every
decision or row it holds ends as one row (a decision whose record died with HAProxy as
`no_record`, after --pending-timeout-ms). A request the killed node had not decided
leaves no trace anywhere, and none is asked of it."""
import concurrent.futures
import http.client
import json
import re
import threading
import time
from collections import namedtuple

import pytest

from cluster import Cluster

CHAT = "/v1/chat/completions"
PENDING_MS = 2000       # a replayed decision whose record is gone is written after this
STARVED = "2s"          # the SPOE processing timeout of the nodes not under test (cluster)
CLIENTS_PER_NODE = 3
SHORT_STREAM = 5, 20    # frames, ms between them: some are cut mid-answer by a kill
LONG_STREAM = 40, 25    # one second in flight: surely under way when a kill comes

# One request as its client saw it: its node (index), whether it asked for a stream,
# when it was sent and answered (monotonic), the status and X-Request-Id (None when the
# connection failed first), whether the whole answer came, the error code of a JSON
# error answer, and the error that cut it, if any.
Sent = namedtuple("Sent", "node stream started ended status rid whole code error")


def send(stack, node, stream=None):
    """One chat completion through stack's HAProxy; stream: (frames, delay ms)."""
    body = {"model": "mock-gpt", "messages": [{"role": "user", "content": "hello"}]}
    headers = {"Authorization": f"Bearer {stack.key}", "Content-Type": "application/json"}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
        headers.update({"x-mock-frames": str(stream[0]),
                        "x-mock-frame-delay-ms": str(stream[1]),
                        "x-mock-completion-tokens": str(stream[0])})
    started = time.monotonic()
    status = rid = None
    conn = http.client.HTTPConnection("127.0.0.1", stack.gw_port, timeout=10)
    try:
        conn.request("POST", CHAT, json.dumps(body), headers)
        resp = conn.getresponse()
        status, rid = resp.status, resp.getheader("x-request-id")
        data = resp.read()
        code = None
        if stream and status == 200:
            whole = data.endswith(b"data: [DONE]\n\n")
        else:
            answer = json.loads(data)
            whole, code = True, answer.get("error", {}).get("code")
        return Sent(node, bool(stream), started, time.monotonic(), status, rid, whole, code,
                    None)
    except (OSError, http.client.HTTPException, ValueError) as e:
        return Sent(node, bool(stream), started, time.monotonic(), status, rid, False, None,
                    repr(e))
    finally:
        conn.close()


class Load:
    """CLIENTS_PER_NODE client threads per node, each sending one request after another
    (every other one a short stream) while its node is open, until stopped."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.done = threading.Event()
        self.open = [threading.Event() for _ in nodes]
        for e in self.open:
            e.set()
        self.sent = []   # Sent, appended by the clients (list.append is atomic)
        self.pool = concurrent.futures.ThreadPoolExecutor(len(nodes) * CLIENTS_PER_NODE + 1)
        self.futs = [self.pool.submit(self.client, i, j)
                     for i in range(len(nodes)) for j in range(CLIENTS_PER_NODE)]

    def client(self, i, j):
        n = j
        while not self.done.is_set():
            if self.open[i].wait(0.05):
                self.sent.append(send(self.nodes[i], i, SHORT_STREAM if n % 2 else None))
                n += 1
                time.sleep(0.01)   # bounded load: the machine is shared

    def long_stream(self, i):
        """Starts one long stream to node i beside the clients; returns the future of
        its Sent (in sent too)."""
        fut = self.pool.submit(self.long_client, i)
        self.futs.append(fut)
        return fut

    def long_client(self, i):
        s = send(self.nodes[i], i, LONG_STREAM)
        self.sent.append(s)
        return s

    def stop(self):
        self.done.set()
        for e in self.open:
            e.set()
        for f in self.futs:
            f.result()
        self.pool.shutdown()
        return self.sent

    def close(self):   # every exit path: the clients end within one request
        self.done.set()
        for e in self.open:
            e.set()
        self.pool.shutdown()


@pytest.fixture
def cluster(tmp_path, pg_server, pg_url, request):
    """Three nodes. The test's parameter, if any, is (fail policy, the nodes that run
    the shipped SPOE file); by default fail closed, as shipped. The other nodes wait
    STARVED for a decision instead of 250 ms: on a 2-core machine shared with other
    load the agent sometimes misses 250 ms (measured: 3 of 10 runs at load average 9
    had a 503 gateway_unavailable on a node nothing happened to), and these tests are
    about deaths and reloads, not that bound."""
    policy, shipped = getattr(request, "param", ("closed", ()))
    c = Cluster(tmp_path, pg_server, pg_url, 3,
                agent_args=["--pending-timeout-ms", str(PENDING_MS)])
    for n in c.nodes:
        n.fail_policy = policy
        n.spoe_processing = None if n.node in shipped else STARVED
    with c:
        yield c


@pytest.fixture
def load(cluster):
    lo = Load(cluster.nodes)
    try:
        yield lo
    finally:
        lo.close()


def haproxy_pid(rid):
    """The pid of the HAProxy that named a request (tally.cfg's unique-id-format:
    %Ts%ms-%{+X}pid-...): which node, and which of its processes, a row came from."""
    return int(rid.split("-")[1], 16)


def rows_by_id(stack):
    return {r["request_id"]: r for r in stack.rows()}


def journal_ids(journal_dir):
    """Request ids of the entries (decisions and rows) in a journal directory's segments,
    read as the agent reads them (spoa/journal.h: "TJNL", u32 version 1, then entries of
    u16 length, u8 kind, u32 FNV-1a of kind and payload, payload whose first field is the
    request id as varint length and bytes); a file ends at its first invalid entry."""
    ids = set()
    for seg in sorted(journal_dir.glob("*.j")):
        b = seg.read_bytes()
        if not b:
            continue
        assert b[:8] == b"TJNL\x01\x00\x00\x00", seg
        i = 8
        while i + 7 <= len(b):
            n = int.from_bytes(b[i:i + 2], "little")
            kind, payload = b[i + 2:i + 3], b[i + 7:i + 7 + n]
            if len(payload) < n or fnv1a32(kind + payload) != int.from_bytes(b[i + 3:i + 7],
                                                                             "little"):
                break
            length, k = 0, 0
            while True:
                length |= (payload[k] & 0x7F) << (7 * k)
                k += 1
                if payload[k - 1] < 0x80:
                    break
            ids.add(payload[k:k + length].decode())
            i += 7 + n
    return ids


def fnv1a32(data):
    h = 2166136261
    for c in data:
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


def settle(cluster, want, timeout=20):
    """Waits until the store holds the request ids want (a set) and every node's
    counters show nothing in flight; returns the rows by id."""
    deadline = time.time() + timeout
    while True:
        rows = rows_by_id(cluster.nodes[0])
        counters = [n.counters() for n in cluster.nodes]
        if (want <= set(rows) and all(c["received"] == c["written"] + c["dropped"]
                                      for c in counters)) or time.time() > deadline:
            return rows
        time.sleep(0.2)


class Pids:
    """Which node's HAProxy processes (by pid) named which requests: every process a
    node ran during a test, noted as it starts."""

    def __init__(self, cluster):
        self.of = {n.node: set() for n in cluster.nodes}
        for n in cluster.nodes:
            self.note(n)

    def note(self, stack):
        self.of[stack.node].add(stack.procs["haproxy"].pid)


def assert_accounting_exact(cluster, pids, rows):
    """Per node and summed: received = written + dropped, nothing dropped, and what the
    node says it wrote is its rows (by the pids of its HAProxy processes)."""
    by_pid = {}
    for rid in rows:
        by_pid[haproxy_pid(rid)] = by_pid.get(haproxy_pid(rid), 0) + 1
    for n in cluster.nodes:
        c = n.counters()
        assert c["received"] == c["written"] + c["dropped"] and c["dropped"] == 0, (n.node, c)
        assert c["written"] == sum(by_pid.get(p, 0) for p in pids.of[n.node]), (n.node, c)
    total = cluster.nodes[0].counters_all()
    assert total["received"] == total["written"] == len(rows), (total, len(rows))
    assert total["dropped"] == 0 and total["pending_overflow"] == 0, total


def test_a_node_killed_under_load_loses_nothing_any_node_admitted(cluster, load):
    n1, n2, n3 = cluster.nodes
    pids = Pids(cluster)
    time.sleep(4.5)
    cut_short = load.long_stream(1)   # answering when the node dies
    time.sleep(0.5)
    load.open[1].clear()   # n2's clients send nothing new while it is down
    killed_at = time.monotonic()
    dead_pid = n2.procs["haproxy"].pid
    n2.kill_node()
    time.sleep(0.5)        # a COMMIT the agent sent before dying lands, or not
    stored_before = {rid for rid in rows_by_id(n1) if haproxy_pid(rid) == dead_pid}
    journaled = journal_ids(n2.tmp / "tally.journal")
    # The upstream saw what n2 admitted last (its log keeps 64), its clients cut or not.
    upstream = {v for r in n2.mock_requests() for k, v in r["headers"]
                if k.lower() == "x-request-id"}
    time.sleep(2)          # n1 and n3 go on serving alone
    n2.start_agent()
    n2.start_haproxy()
    n2.wait_agent_state("UP")
    pids.note(n2)
    load.open[1].set()
    time.sleep(4)
    sent = load.stop()

    # n1 and n3, and n2 before and after its death, answered everything whole; only
    # requests in flight to n2 when it died failed, at the connection: the long stream
    # among them, cut after its status and id came.
    failed = [s for s in sent if s.status != 200 or not s.whole]
    assert all(s.node == 1 and s.started < killed_at < s.ended and s.error for s in failed), \
        failed[:5]
    assert all(s.status in (None, 200) for s in failed), failed[:5]
    long = cut_short.result()
    assert long in failed and long.status == 200 and long.rid, long
    served = [sum(1 for s in sent if s.node == i and s.status == 200) for i in range(3)]
    assert min(served) > 50, served
    assert any(s.node == 1 and s.status == 200 and s.started > killed_at for s in sent)

    # Whatever n2 decided and did not store is in its journal, including what the
    # upstream saw and every answer its clients got a status for.
    admitted = {s.rid for s in sent if s.status == 200}
    dead_admitted = {rid for rid in admitted if haproxy_pid(rid) == dead_pid}
    assert upstream <= stored_before | journaled, upstream - stored_before - journaled
    assert dead_admitted <= stored_before | journaled, \
        dead_admitted - stored_before - journaled

    rows = settle(cluster, admitted | journaled)
    assert admitted <= set(rows), f"{len(admitted - set(rows))} admitted without a row"
    # Exactly: n2's old rows are what it had stored and what its journal held, no other.
    dead_rows = {rid for rid in rows if haproxy_pid(rid) == dead_pid}
    assert dead_rows == stored_before | journaled, \
        (dead_rows ^ (stored_before | journaled))
    # Every row is a request a client got an answer to, or one n2 had decided.
    assert set(rows) == admitted | dead_rows, set(rows) ^ (admitted | dead_rows)
    # Finished answers carry their usage; a request whose record died with HAProxy is
    # written from its decision.
    for rid, r in rows.items():
        if rid in dead_rows - stored_before:
            assert r["outcome"] in ("complete", "no_record"), r
        else:
            assert r["outcome"] == "complete" and r["status"] == 200, r
    cut = {s.rid for s in failed if s.rid}
    assert all(rows[rid]["outcome"] == "no_record" for rid in cut), cut
    assert_accounting_exact(cluster, pids, rows)
    # And the replay says so: what it queued or awaited is what the store lacked.
    m = re.search(r"journal: \d+ entries from an earlier run: (\d+) rows queued, "
                  r"(\d+) requests awaiting their record, (\d+) dropped",
                  n2.procs["agent"].output())
    assert m, n2.procs["agent"].output()
    queued, awaited, dropped = map(int, m.groups())
    assert (queued + awaited, dropped) == (len(dead_rows - stored_before), 0), m[0]


def test_haproxy_reloads_on_a_live_node_lose_nothing(cluster, load):
    n1, n2, n3 = cluster.nodes
    pids = Pids(cluster)
    old = []
    for _ in range(2):
        time.sleep(2)
        old.append(n2.reload_haproxy())
        pids.note(n2)
    time.sleep(2)
    sent = load.stop()
    for p in old:
        assert p.p.wait(15) == 0   # each old process ends once its streams are done

    bad = [s for s in sent if s.status != 200 or not s.whole]
    assert not bad, bad[:5]
    ids = {s.rid for s in sent}
    assert len(ids) == len(sent)
    served_by = {haproxy_pid(rid) for rid in ids}
    assert pids.of["n2"] <= served_by   # every process of n2 answered some
    rows = settle(cluster, ids)
    assert set(rows) == ids, (len(ids - set(rows)), len(set(rows) - ids))
    assert all(r["outcome"] == "complete" and r["status"] == 200 for r in rows.values())
    assert_accounting_exact(cluster, pids, rows)


@pytest.mark.parametrize("cluster", [("closed", ("n2",)), ("open", ("n2",))],
                         ids=["closed", "open"], indirect=True)
def test_an_agent_killed_alone_fails_by_the_policy_and_loses_nothing(cluster, load):
    """HAProxy stays, so n2's clients never see a broken connection. n2 runs the shipped
    SPOE file; while its agent is away they get what the fail policy says: closed, 503
    gateway_unavailable (a gateway_rejected row); open, the answer, forwarded undecided
    (a fail_open row with its usage). Either row comes from HAProxy's record, which
    waited in the ring's backlog until the agent was back. Each answer of every node is
    one row."""
    n1, n2, n3 = cluster.nodes
    policy = n2.fail_policy
    pids = Pids(cluster)
    time.sleep(2)
    decided = load.long_stream(1)   # decided before the kill, answered while away
    time.sleep(0.3)
    killed_at = time.monotonic()
    n2.kill_agent()
    time.sleep(1.5)
    n2.start_agent()
    n2.wait_agent_state("UP")
    restarted_at = time.monotonic()
    time.sleep(2)
    sent = load.stop()

    assert all(s.error is None and s.rid for s in sent), [s for s in sent if s.error][:5]
    assert all(s.whole for s in sent), [s for s in sent if not s.whole][:5]
    refused = [s for s in sent if s.status != 200]
    if policy == "closed":
        assert refused and all(s.node == 1 and (s.status, s.code) == (503, "gateway_unavailable")
                               for s in refused), refused[:5]
        assert all(killed_at < s.ended and s.started < restarted_at for s in refused)
    else:
        assert not refused, refused[:5]
    ids = {s.rid: s for s in sent}
    assert len(ids) == len(sent)
    rows = settle(cluster, set(ids))
    assert set(rows) == set(ids), (len(set(ids) - set(rows)), len(set(rows) - set(ids)))
    # The long stream ended while the agent was away: its record waited in the ring.
    long = decided.result()
    assert long.status == 200 and long.started < killed_at < long.ended, long
    r = rows[long.rid]
    assert (r["outcome"], r["verdict"], r["completion_tokens"]) == ("complete", "allow", 40), r
    undecided = 0
    for rid, r in rows.items():
        s = ids[rid]
        if r["verdict"] is None or r["verdict"] == "fail_open":
            # Answered by the policy: only n2's, only while its agent was away.
            assert s.node == 1 and killed_at < s.ended and s.started < restarted_at, (s, r)
            undecided += 1
        if s.status == 503:
            # A decision whose ACK died with the agent is journaled: HAProxy never saw
            # it, and its row says so beside HAProxy's refusal (spoa/join.c).
            assert (r["outcome"], r["status"]) == ("gateway_rejected", 503), r
            assert r["verdict"] in (None, "allow"), r
        elif r["verdict"] == "fail_open":
            assert (r["outcome"], r["status"], r["key_id"]) == ("complete", 200, None), r
            # A unary answer's usage is read in the buffer. The shipped fail-open
            # backend has no capture filter, so a stream's usage may go unseen: then
            # it is charged an estimate, never nothing.
            if s.stream and r["usage_source"] == "none":
                assert r["estimated_tokens"] > 0, r
            else:
                assert (r["usage_source"], r["completion_tokens"]) == \
                    ("response", SHORT_STREAM[0] if s.stream else 20), r
        elif r["outcome"] == "no_record":
            # Its record was on its way to the agent that died: the journal's decision
            # makes the row.
            assert s.node == 1 and s.started < killed_at + 0.5, (s, r)
        else:
            assert (r["outcome"], r["verdict"], r["status"]) == ("complete", "allow", 200), r
    assert undecided > 10, undecided
    assert_accounting_exact(cluster, pids, rows)
