"""tally-agent spoken to directly over SPOP with real sockets: what HAProxy sends, and
what a broken or hostile peer might send. The agent must answer or disconnect with the
right status, and never crash."""
import os
import resource
import socket
import struct
import time

import pytest

import spop_client as sp
from stack import Stack


@pytest.fixture
def agent(tmp_path):
    s = Stack(tmp_path)
    try:
        s.seed()
        s.start_agent()
        yield s
    finally:
        codes = s.close()
        assert codes.get("agent") == 0, "the agent must exit cleanly on SIGTERM"


def request_args(agent, auth, body=b'{"model":"mock-gpt"}', path="/v1/chat/completions",
                 **extra):
    """What haproxy/spoe-tally.conf sends for a POST with a Content-Length."""
    args = {"id": "req-1", "secret": agent.gateway_secret(), "auth": auth, "xkey": None,
            "method": "POST", "path": path, "cl": 1, "bsize": len(body), "body": body}
    args.update(extra)
    return args


def decide(client, args, stream_id=1, frame_id=1):
    client.send(sp.notify(args, stream_id, frame_id))
    f = client.recv_frame()
    assert f[0] == sp.ACK and f[2] == stream_id and f[3] == frame_id
    return sp.parse_actions(f[4])


def test_hello_negotiates_frame_size_and_pipelining(agent):
    c = sp.Client(agent.agent_port)
    h = c.handshake(max_frame=4096)
    assert h["version"] == "2.0"
    assert h["max-frame-size"] == 4096
    assert h["capabilities"] == "pipelining"
    c.close()


def test_health_check_hello_gets_hello_then_close(agent):
    c = sp.Client(agent.agent_port)
    h = c.handshake(healthcheck=True)
    assert h["version"] == "2.0"
    assert c.closed()


def test_notify_decides_with_vars(agent):
    c = sp.Client(agent.agent_port)
    c.handshake()
    body = b'{"model":"mock-gpt","stream":true,"messages":[]}'
    v = decide(c, request_args(agent, f"Bearer {agent.key}", body))
    assert v["verdict"] == "allow" and v["status"] == 0
    assert v["backend"] == "be_mock_openai" and v["model"] == "mock-gpt"
    assert v["key"] == "demo" and v["stream"] == 1
    v = decide(c, request_args(agent, "Bearer nope", body), stream_id=2, frame_id=7)
    assert v["verdict"] == "invalid_api_key" and v["status"] == 401
    assert b"invalid_api_key" in v["body"].encode()
    c.close()


def test_pipelined_notifies_are_all_acked_with_their_ids(agent):
    c = sp.Client(agent.agent_port)
    c.handshake()
    body = b'{"model":"mock-gpt"}'
    ids = [(2**40 + i, 2**33 + i) for i in range(200)]
    c.send(b"".join(sp.notify(request_args(agent, f"Bearer {agent.key}", body), sid, fid)
                    for sid, fid in ids))
    got = []
    for _ in ids:
        f = c.recv_frame()
        assert f[0] == sp.ACK
        assert sp.parse_actions(f[4])["verdict"] == "allow"
        got.append((f[2], f[3]))
    assert sorted(got) == sorted(ids)
    c.close()


def metric(stack, name):
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics",
                                  timeout=5).read().decode()
    return float(next(l.split()[-1] for l in text.splitlines() if l.startswith(name + " ")))


@pytest.mark.parametrize("secret", [None, "", "d3JvbmctZ2F0ZXdheS1zZWNyZXQtd3Jvbmctc2VjcmV0"],
                         ids=["absent", "empty", "wrong"])
def test_notify_without_the_gateway_secret_is_refused_and_never_accounted(agent, secret):
    """Anyone who reaches the SPOP port can speak SPOP; only HAProxy knows the secret.
    A NOTIFY without it gets a refusal, holds nothing and never becomes a row."""
    c = sp.Client(agent.agent_port)
    c.handshake()
    args = request_args(agent, f"Bearer {agent.key}", id="forged-1")
    if secret is None:
        del args["secret"]
    else:
        args["secret"] = secret
    v = decide(c, args)
    assert (v["verdict"], v["status"]) == ("gateway_unauthenticated", 500)
    assert "key" not in v and "backend" not in v
    assert metric(agent, "tally_accounting_unauthenticated_total") == 1
    assert metric(agent, "tally_inflight_requests") == 0
    # The right secret on the same connection decides as usual.
    v = decide(c, request_args(agent, f"Bearer {agent.key}", id="real-1"), 2, 2)
    assert v["verdict"] == "allow"
    assert metric(agent, "tally_inflight_requests") == 1
    c.close()


def test_unreadable_notify_gets_an_explicit_error_verdict(agent):
    # not silence: silence would pass for an unreachable agent and, failing open,
    # forward a request nobody judged
    c = sp.Client(agent.agent_port)
    c.handshake()
    c.send(sp.frame(sp.NOTIFY, b"\x05hello\x09garbage", 3, 4))
    f = c.recv_frame()
    assert f[0] == sp.ACK and (f[2], f[3]) == (3, 4)
    v = sp.parse_actions(f[4])
    assert v["verdict"] == "gateway_error" and v["status"] == 500
    c.send(sp.notify({"auth": "x"}, 5, 6, name="some-other-message"))
    f = c.recv_frame()
    assert f[0] == sp.ACK and sp.parse_actions(f[4])["status"] == 500
    c.close()


def test_oversized_frame_is_refused_before_its_body(agent):
    c = sp.Client(agent.agent_port)
    c.handshake(max_frame=1024)
    c.send(struct.pack(">I", 1025))   # only the length: the agent must not wait for more
    f = c.recv_frame()
    assert f[0] == sp.AGENT_DISCONNECT
    assert sp.parse_kv(f[4])["status-code"] == 3
    assert c.closed()


@pytest.mark.parametrize("raw,status", [
    (sp.frame(sp.NOTIFY, b""), 4),                                  # NOTIFY before HELLO
    (sp.frame(sp.HELLO, sp.kv({"max-frame-size": 1000})), 5),       # no supported-versions
    (sp.frame(sp.HELLO, sp.kv({"supported-versions": "1.0", "max-frame-size": 1000,
                                "capabilities": ""})), 8),
    (sp.frame(sp.ACK, b""), 4),                                     # an agent's frame
    (struct.pack(">I", 3) + b"\x01\x00\x00", 4),                    # shorter than a header
])
def test_protocol_errors_disconnect_with_status(agent, raw, status):
    c = sp.Client(agent.agent_port)
    c.send(raw)
    f = c.recv_frame()
    assert f is not None and f[0] == sp.AGENT_DISCONNECT
    assert sp.parse_kv(f[4])["status-code"] == status
    assert c.closed()
    # and the agent still serves others
    c2 = sp.Client(agent.agent_port)
    c2.handshake()
    c2.close()


def test_unknown_frame_types_are_skipped(agent):
    c = sp.Client(agent.agent_port)
    c.handshake()
    c.send(sp.frame(77, b"future stuff", 1, 1) + sp.notify(request_args(agent, "Bearer x"), 2, 3))
    f = c.recv_frame()
    assert f[0] == sp.ACK and (f[2], f[3]) == (2, 3)
    c.close()


def test_fragmented_notify_is_refused(agent):
    c = sp.Client(agent.agent_port)
    c.handshake()
    c.send(sp.frame(sp.NOTIFY, sp.s("tally-request") + b"\x00", 1, 1, flags=0))
    f = c.recv_frame()
    assert f[0] == sp.AGENT_DISCONNECT
    assert sp.parse_kv(f[4])["status-code"] == 10


def test_haproxy_disconnect_is_answered(agent):
    c = sp.Client(agent.agent_port)
    c.handshake()
    c.send(sp.frame(sp.DISCONNECT, sp.kv({"status-code": 0, "message": "bye"})))
    f = c.recv_frame()
    assert f[0] == sp.AGENT_DISCONNECT and sp.parse_kv(f[4])["status-code"] == 0
    assert c.closed()


def test_peer_vanishing_mid_frame_does_not_hurt(agent):
    for _ in range(20):
        c = sp.Client(agent.agent_port)
        c.send(sp.hello()[:7])
        c.close()
    c = sp.Client(agent.agent_port)
    c.handshake()
    c.close()


def test_pipelined_burst_over_a_full_socket_is_all_answered(tmp_path):
    """A burst larger than the socket buffers: the agent must resume the frames left in
    its input once its replies drain, without waiting for more input."""
    path = tmp_path / "agent.sock"
    s = Stack(tmp_path, agent_args=["--listen", f"unix:{path}", "--threads", "1"])
    try:
        s.seed()
        s.start_agent()
        # Tiny NOTIFYs whose ACKs each carry an error body: the requests fit the
        # socket buffers while the replies outgrow them, and nobody reads until the end.
        deadline = time.time() + 10   # the unix listener comes after the TCP one
        while not path.exists() and time.time() < deadline:
            time.sleep(0.05)
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(path))
        c.settimeout(5)
        c.sendall(sp.hello())
        assert c.recv(65536)
        c.sendall(b"".join(sp.notify({}, 1, i + 1) for i in range(600)))
        time.sleep(0.2)
        c.sendall(b"".join(sp.notify({}, 2, i + 1) for i in range(600)))
        time.sleep(0.3)
        got, acks = b"", 0
        c.settimeout(3)
        while acks < 1200:
            try:
                chunk = c.recv(1 << 20)
            except socket.timeout:
                break
            assert chunk, f"connection closed after {acks} ACKs"
            got += chunk
            while len(got) >= 4 and len(got) >= 4 + struct.unpack(">I", got[:4])[0]:
                size = struct.unpack(">I", got[:4])[0]
                acks += got[4] == sp.ACK
                got = got[4 + size:]
        c.close()
        assert acks == 1200, f"{acks} of 1200 NOTIFYs answered; the rest sat in the agent's input"
    finally:
        assert s.close().get("agent") == 0


def test_connections_without_the_secret_are_closed_at_their_deadline(tmp_path):
    """A connection must show the gateway secret (a NOTIFY carrying it) within
    --auth-timeout-ms of its accept, however much else it sends; one that did stays."""
    s = Stack(tmp_path, agent_args=["--auth-timeout-ms", "1000"])
    try:
        s.seed()
        s.start_agent()
        good = sp.Client(s.agent_port)
        good.handshake()
        assert decide(good, request_args(s, f"Bearer {s.key}", id="good-1"))["verdict"] == "allow"
        silent = socket.create_connection(("127.0.0.1", s.agent_port), timeout=5)
        hello_only = sp.Client(s.agent_port)
        hello_only.handshake()
        wrong = sp.Client(s.agent_port)
        wrong.handshake()
        t0 = time.time()
        for i in range(4):   # wrong secrets, trickled: no extension
            v = decide(wrong, request_args(s, f"Bearer {s.key}", id=f"w{i}", secret=""), i + 1, 1)
            assert v["verdict"] == "gateway_unauthenticated"
            time.sleep(0.05)
        assert silent.recv(1) == b""
        assert hello_only.closed() and wrong.closed()
        assert time.time() - t0 < 4
        time.sleep(0.5)
        assert decide(good, request_args(s, f"Bearer {s.key}", id="good-2"), 2, 2)["verdict"] == "allow"
        for c in (silent, hello_only.sock, wrong.sock, good.sock):
            c.close()
    finally:
        assert s.close().get("agent") == 0


def test_connection_caps(tmp_path):
    """--max-connections bounds connections that showed the secret: one more that shows
    it is closed. --max-unauthenticated bounds the others: a new one takes the oldest's
    place, so that they never keep out HAProxy's."""
    s = Stack(tmp_path, agent_args=["--max-connections", "4", "--max-unauthenticated", "4"])
    try:
        s.seed()
        s.start_agent()
        held = [sp.Client(s.agent_port) for _ in range(4)]
        for i, c in enumerate(held):
            c.handshake()
            assert decide(c, request_args(s, f"Bearer {s.key}", id=f"h{i}"))["verdict"] == "allow"
        extra = sp.Client(s.agent_port)
        extra.handshake()
        extra.send(sp.notify(request_args(s, f"Bearer {s.key}", id="x"), 1, 1))
        while extra.recv_frame() is not None:
            pass
        assert extra.closed()                  # over the cap: closed once it showed it
        idle = [socket.create_connection(("127.0.0.1", s.agent_port), timeout=5)
                for _ in range(40)]
        fresh = sp.Client(s.agent_port)       # the oldest idle ones made room
        fresh.handshake()
        held.pop().close()
        time.sleep(0.2)
        assert decide(fresh, request_args(s, f"Bearer {s.key}", id="f"))["verdict"] == "allow"
        closed = 0
        for c in idle:
            c.settimeout(0.01)
            try:
                closed += c.recv(1) == b""
            except (socket.timeout, ConnectionResetError):
                pass
            c.close()
        assert closed >= 40 - 4
        for c in held + [fresh]:
            c.close()
    finally:
        assert s.close().get("agent") == 0


def _cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_out_of_file_descriptors_does_not_spin(tmp_path):
    s = Stack(tmp_path)
    s.seed()
    limit = (40, 40)
    s.start_agent(preexec=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limit))
    conns = []
    try:
        for _ in range(60):
            try:
                conns.append(socket.create_connection(("127.0.0.1", s.agent_port), timeout=1))
            except OSError:
                break
        time.sleep(0.3)
        before = _cpu_seconds(s.procs["agent"].pid)
        time.sleep(2)
        used = _cpu_seconds(s.procs["agent"].pid) - before
        assert used < 0.5, f"agent burnt {used:.2f} s of CPU in 2 s with no descriptors left"
        for c in conns:
            c.close()
        conns = []
        time.sleep(0.5)
        c = sp.Client(s.agent_port)
        c.handshake()
        c.close()
        assert s.procs["agent"].output().count("pausing new connections") < 30
    finally:
        for c in conns:
            c.close()
        assert s.close().get("agent") == 0


def test_config_file_with_flags_over_it(tmp_path):
    from conftest import binary, free_port
    from stack import Proc, wait_port
    odd = tmp_path / "dir with #hash = sign"
    odd.mkdir()
    port, other = free_port(), free_port()
    conf = tmp_path / "agent.conf"
    conf.write_text(f"# tally-agent settings\n"
                    f"listen = 127.0.0.1:{other}\n"
                    f"db {odd}/tally.db\n"
                    f"threads 3\n"
                    f"log-level debug\n")
    p = Proc("agent-conf", [str(binary("tally-agent")), "--config", str(conf),
                            "--listen", f"127.0.0.1:{port}",
                            "--records", f"127.0.0.1:{free_port()}",
                            "--metrics", f"127.0.0.1:{free_port()}"], tmp_path)
    try:
        wait_port(port, p)
        c = sp.Client(port)
        c.handshake()
        c.close()
        assert (odd / "tally.db").exists()
        out = p.output()
        assert "3 I/O threads" in out and f"127.0.0.1:{other}" not in out
    finally:
        assert p.stop() == 0


@pytest.mark.parametrize("content,message", [
    ("threads 0\n", "invalid value '0' for threads"),
    ("colour blue\n", "unknown setting 'colour'"),
    ("db\n", "'db' needs a value"),
    ("max-frame-size 100\n", "invalid value '100' for max-frame-size"),
])
def test_bad_config_is_refused_with_its_line(tmp_path, content, message):
    import subprocess
    from conftest import binary
    conf = tmp_path / "agent.conf"
    conf.write_text("# first line\n" + content)
    r = subprocess.run([str(binary("tally-agent")), "--config", str(conf)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert f"{conf}:2: {message}" in r.stderr


def test_help_lists_every_setting():
    import subprocess
    from conftest import binary
    r = subprocess.run([str(binary("tally-agent")), "--help"], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0
    for flag in ("--listen", "--threads", "--db", "--secret", "--log-level", "--max-frame-size",
                 "--reload-interval-ms", "--max-connections", "--max-unauthenticated",
                 "--auth-timeout-ms",
                 "--idle-timeout-ms", "--config"):
        assert flag in r.stdout
