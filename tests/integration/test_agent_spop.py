"""tally-agent spoken to directly over SPOP with real sockets: what HAProxy sends, and
what a broken or hostile peer might send. The agent must answer or disconnect with the
right status, and never crash."""
import struct

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
    v = decide(c, {"id": "req-1", "auth": f"Bearer {agent.key}", "xkey": None,
                   "path": "/v1/chat/completions", "body": body, "bsize": len(body)})
    assert v["verdict"] == "allow" and v["status"] == 0
    assert v["backend"] == "be_mock_openai" and v["model"] == "mock-gpt"
    assert v["key"] == "demo" and v["stream"] == 1
    v = decide(c, {"auth": "Bearer nope", "path": "/v1/chat/completions", "body": body},
               stream_id=2, frame_id=7)
    assert v["verdict"] == "invalid_api_key" and v["status"] == 401
    assert b"invalid_api_key" in v["body"].encode()
    c.close()


def test_pipelined_notifies_are_all_acked_with_their_ids(agent):
    c = sp.Client(agent.agent_port)
    c.handshake()
    body = b'{"model":"mock-gpt"}'
    ids = [(2**40 + i, 2**33 + i) for i in range(200)]
    c.send(b"".join(sp.notify({"auth": f"Bearer {agent.key}", "body": body}, sid, fid)
                    for sid, fid in ids))
    got = []
    for _ in ids:
        f = c.recv_frame()
        assert f[0] == sp.ACK
        assert sp.parse_actions(f[4])["verdict"] == "allow"
        got.append((f[2], f[3]))
    assert sorted(got) == sorted(ids)
    c.close()


def test_unreadable_notify_still_gets_an_empty_ack(agent):
    c = sp.Client(agent.agent_port)
    c.handshake()
    c.send(sp.frame(sp.NOTIFY, b"\x05hello\x09garbage", 3, 4))
    f = c.recv_frame()
    assert f[0] == sp.ACK and (f[2], f[3]) == (3, 4) and f[4] == b""
    c.send(sp.notify({"auth": "x"}, 5, 6, name="some-other-message"))
    f = c.recv_frame()
    assert f[0] == sp.ACK and f[4] == b""
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
    c.send(sp.frame(77, b"future stuff", 1, 1) + sp.notify({"auth": "Bearer x"}, 2, 3))
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
