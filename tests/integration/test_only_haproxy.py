"""Only HAProxy talks to the agent, through the real HAProxy, agent and mock upstream.
- A process that holds a copy of a real record (here one squatting the records address,
  as during an agent restart) and sends it changed before the real one cannot change
  what is billed: the record's MAC covers every field the agent uses, so the changed
  copy is refused (and counted) and the real one, arriving second, makes the row.
- A process that opens SPOP connections and never shows the gateway secret cannot keep
  HAProxy's out."""
import concurrent.futures
import os
import socket
import stat
import threading
import time
import urllib.request

import pytest

import spop_client as sp
from conftest import HAPROXY_VERSION, free_port
from stack import Stack

CHAT = "/v1/chat/completions"
PROMPT, COMPLETION = 90000, 50000


class Squatter:
    """Takes HAProxy's records (the ring's TCP connection and the UDP copy) in the
    agent's stead and hands each to the agent's UDP intake twice: first a copy changed
    by forge(fields) (fields: the record split on its first 41 spaces), then the real
    one."""

    def __init__(self, agent_port):
        self.port = free_port()
        self.agent = ("127.0.0.1", agent_port)
        self.forge = None
        self.out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.tcp = socket.socket()
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("127.0.0.1", self.port))
        self.tcp.listen(4)
        self.stop = False
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self.run_udp, self.run_tcp)]
        for t in self.threads:
            t.start()

    def relay(self, msg):
        msg = msg.rstrip(b"\n")
        fields = msg.split(b" ", 41)
        if self.forge and len(fields) == 42:
            forged = self.forge(list(fields))
            if forged != fields:
                self.out.sendto(b" ".join(forged), self.agent)
        self.out.sendto(msg, self.agent)

    def run_udp(self):
        self.udp.settimeout(0.2)
        while not self.stop:
            try:
                self.relay(self.udp.recv(65536))
            except socket.timeout:
                continue

    def run_tcp(self):
        self.tcp.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.tcp.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self.run_conn, args=(c,), daemon=True).start()

    def run_conn(self, c):
        """The ring's records: octet-counted ("<len> <record>") or one a line."""
        buf = b""
        c.settimeout(0.2)
        while not self.stop:
            try:
                chunk = c.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            buf += chunk
            while buf[:1].isdigit() and b" " in buf:
                n, rest = buf.split(b" ", 1)
                if len(rest) < int(n):
                    break
                self.relay(rest[:int(n)])
                buf = rest[int(n):]
            while not buf[:1].isdigit() and b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self.relay(line)
        c.close()

    def close(self):
        self.stop = True
        for t in self.threads:
            t.join(2)
        for s in (self.udp, self.tcp, self.out):
            s.close()


@pytest.fixture(scope="module")
def squatted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("record-auth")
    probe = Stack(tmp)
    squatter = Squatter(probe.records_port)
    probe.extra_haproxy_env["TALLY_RECORDS_ADDR"] = f"127.0.0.1:{squatter.port}"
    try:
        probe.start()
        probe.tallyctl("model", "set", "mock-gpt", "--provider", "mock-openai",
                       "--input-micros", "1000000", "--output-micros", "2000000")
        time.sleep(0.5)
        yield probe, squatter
    finally:
        squatter.close()
        probe.close()


def unauthenticated(stack):
    text = urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics",
                                  timeout=5).read().decode()
    return float(next(l.split()[-1] for l in text.splitlines()
                      if l.startswith("tally_accounting_unauthenticated_total ")))


def set_usage(fields):
    """The usage json_query read (unary) and any in the capture (streams), made small;
    the capture's lengths stay right."""
    if fields[25] != b"-":
        fields[25] = fields[26] = b"1"
    fields[41] = fields[41].replace(str(PROMPT).encode(), b"1".zfill(len(str(PROMPT))))
    return fields


def set_status(fields):
    fields[7] = b"502"
    return fields


def set_verdict(fields):
    fields[17] = b"deny_budget"
    return fields


def set_key(fields):
    fields[18] = b"999"
    return fields


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("forge", [set_usage, set_status, set_verdict, set_key],
                         ids=["usage", "status", "verdict", "key"])
def test_a_changed_copy_arriving_first_is_refused_and_the_real_one_billed(squatted, forge,
                                                                          stream):
    stack, squatter = squatted
    before = unauthenticated(stack)
    squatter.forge = forge
    body = {"model": "mock-gpt", "stream": stream, "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body["stream_options"] = {"include_usage": True}
    status, headers, _ = stack.gateway(
        "POST", CHAT, body, headers={"Authorization": f"Bearer {stack.key}",
                                     "x-mock-prompt-tokens": str(PROMPT),
                                     "x-mock-completion-tokens": str(COMPLETION)})
    assert status == 200
    r = stack.row(headers["x-request-id"])
    assert (r["prompt_tokens"], r["completion_tokens"], r["status"], r["verdict"],
            r["key_id"]) == (PROMPT, COMPLETION, 200, "allow", 1)
    assert r["usage_source"] == ("stream" if stream else "response")
    deadline = time.time() + 5
    while unauthenticated(stack) < before + 1 and time.time() < deadline:
        time.sleep(0.05)
    assert unauthenticated(stack) >= before + 1
    assert stack.scalar("SELECT COUNT(*) FROM requests WHERE request_id = ?",
                        (headers["x-request-id"],)) == 1


def test_the_termination_state_is_covered_where_haproxy_can_fetch_it(squatted):
    """3.4 has a fetch of the termination state, which then has a MAC of its own: a copy
    that says the client aborted is refused. 2.6 has none: the copy is taken, and changes
    only what the termination state decides (docs/haproxy-integration.md)."""
    stack, squatter = squatted
    before = unauthenticated(stack)
    squatter.forge = lambda fields: fields[:15] + [b"CD"] + fields[16:]
    status, headers, _ = stack.gateway(
        "POST", CHAT, {"model": "mock-gpt", "max_tokens": 10, "messages": []},
        headers={"Authorization": f"Bearer {stack.key}", "x-mock-prompt-tokens": "7"})
    assert status == 200
    r = stack.row(headers["x-request-id"])
    assert (r["prompt_tokens"], r["status"]) == (7, 200)
    if HAPROXY_VERSION >= (3, 4):
        assert (r["termination"], r["outcome"]) == ("--", "complete")
        deadline = time.time() + 5
        while unauthenticated(stack) < before + 1 and time.time() < deadline:
            time.sleep(0.05)
        assert unauthenticated(stack) >= before + 1
    else:
        assert (r["termination"], r["outcome"]) == ("CD", "client_abort")


def test_idle_spop_connections_never_keep_haproxy_out(tmp_path):
    """Many more idle connections than --max-connections, each past its HELLO, opened
    before HAProxy starts and again while it serves: every request still gets its 200,
    promptly, one at a time and several at once (HAProxy then opens more)."""
    s = Stack(tmp_path, agent_args=["--max-connections", "32"])
    idle = []

    def squat(n):
        for _ in range(n):
            try:
                c = sp.Client(s.agent_port)
                idle.append(c)
                c.handshake()
            except (OSError, AssertionError, TypeError):
                pass

    try:
        s.seed()
        s.start_mock()
        s.start_agent()
        squat(300)
        s.start_haproxy()
        s.wait_agent_state("UP")
        for i in range(40):
            if i == 20:
                squat(300)
            t0 = time.time()
            status, _, _ = s.gateway("POST", CHAT, {"model": "mock-gpt", "messages": []},
                                     key=s.key, timeout=10)
            assert (status, i) == (200, i)
            assert time.time() - t0 < 2
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            got = list(pool.map(lambda _: s.gateway("POST", CHAT, {"model": "mock-gpt",
                                                                   "messages": []},
                                                    key=s.key, timeout=10)[0], range(64)))
        assert got == [200] * 64
    finally:
        for c in idle:
            c.close()
        s.close()


def records_by(stack, transport):
    text = urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics",
                                  timeout=5).read().decode()
    return float(next(l.split()[-1] for l in text.splitlines()
                      if l.startswith(f'tally_records_total{{transport="{transport}"}} ')))


def test_the_gateway_runs_over_unix_sockets(tmp_path):
    """SPOP and records on unix sockets (make run's default), 0660: decisions, the
    ring's stream and the datagram copy all arrive; every request is one exact row."""
    s = Stack(tmp_path, unix=True)
    try:
        s.start()
        for name in ("spop.sock", "records.sock", "records.sock.dgram"):
            st = os.stat(os.path.join(s.unix_dir, name))
            assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660, name
        ids = []
        for i, stream in enumerate([False, True] * 3):
            body = {"model": "mock-gpt", "stream": stream, "max_tokens": 10,
                    "messages": [{"role": "user", "content": "hi"}]}
            if stream:
                body["stream_options"] = {"include_usage": True}
            status, headers, _ = s.gateway(
                "POST", CHAT, body, key=s.key,
                headers={"x-mock-prompt-tokens": str(100 + i),
                         "x-mock-completion-tokens": str(10 + i)})
            assert status == 200
            ids.append(headers["x-request-id"])
        status, _, _ = s.gateway("POST", CHAT, {"model": "mock-gpt", "messages": []},
                                 key="sk-wrong")
        assert status == 401
        for i, rid in enumerate(ids):
            r = s.row(rid)
            assert (r["prompt_tokens"], r["completion_tokens"], r["status"]) == \
                (100 + i, 10 + i, 200)
        s.wait_rows(len(ids) + 1)
        deadline = time.time() + 5
        while (records_by(s, "tcp") < len(ids) + 1 or records_by(s, "udp") < len(ids) + 1) \
                and time.time() < deadline:
            time.sleep(0.05)
        assert records_by(s, "tcp") >= len(ids) + 1 and records_by(s, "udp") >= len(ids) + 1
        assert s.counters()["unauthenticated"] == 0
    finally:
        s.close()
