"""A small SPOP 2.0 client for tests: speaks to tally-agent the way HAProxy does, and
can also send what HAProxy never would (garbage, oversized frames)."""
import socket
import struct

HELLO, DISCONNECT, NOTIFY = 1, 2, 3
AGENT_HELLO, AGENT_DISCONNECT, ACK = 101, 102, 103
T_NULL, T_BOOL, T_INT32, T_UINT32, T_INT64, T_UINT64, T_IPV4, T_IPV6, T_STR, T_BIN = range(10)


def varint(n):
    if n < 240:
        return bytes([n])
    out = bytearray([(n | 240) & 0xFF])
    n = (n - 240) >> 4
    while n >= 128:
        out.append((n | 128) & 0xFF)
        n = (n - 128) >> 7
    out.append(n)
    return bytes(out)


def read_varint(buf, i):
    n = buf[i]
    i += 1
    if n < 240:
        return n, i
    shift = 4
    while True:
        b = buf[i]
        i += 1
        n += b << shift
        shift += 7
        if b < 128:
            return n, i


def s(v):
    v = v.encode() if isinstance(v, str) else v
    return varint(len(v)) + v


def data(v):
    if v is None:
        return bytes([T_NULL])
    if isinstance(v, bool):
        return bytes([T_BOOL | (0x10 if v else 0)])
    if isinstance(v, int):
        return bytes([T_INT64]) + varint(v & 0xFFFFFFFFFFFFFFFF)
    if isinstance(v, bytes):
        return bytes([T_BIN]) + s(v)
    return bytes([T_STR]) + s(v)


def decode_data(buf, i):
    t = buf[i]
    i += 1
    kind = t & 0x0F
    if kind == T_NULL:
        return None, i
    if kind == T_BOOL:
        return bool(t & 0x10), i
    if kind in (T_INT32, T_INT64):
        n, i = read_varint(buf, i)
        return n - (1 << 64) if n >= 1 << 63 else n, i
    if kind in (T_UINT32, T_UINT64):
        return read_varint(buf, i)
    if kind in (T_STR, T_BIN):
        n, i = read_varint(buf, i)
        raw = bytes(buf[i:i + n])
        return (raw.decode() if kind == T_STR else raw), i + n
    raise ValueError(f"type {kind}")


def kv(pairs):
    return b"".join(s(k) + data(v) for k, v in pairs.items())


def frame(ftype, payload, stream_id=0, frame_id=0, flags=1):
    body = bytes([ftype]) + struct.pack(">I", flags) + varint(stream_id) + varint(frame_id) + payload
    return struct.pack(">I", len(body)) + body


def hello(max_frame=16380, healthcheck=False):
    pairs = {"supported-versions": "2.0", "max-frame-size": max_frame,
             "capabilities": "pipelining"}
    if healthcheck:
        pairs["healthcheck"] = True
    payload = b"".join(s(k) + (bytes([T_UINT32]) + varint(v) if isinstance(v, int) and not isinstance(v, bool) else data(v))
                       for k, v in pairs.items())
    return frame(HELLO, payload)


def notify(args, stream_id, frame_id, name="tally-request"):
    payload = s(name) + bytes([len(args)]) + kv(args)
    return frame(NOTIFY, payload, stream_id, frame_id)


def parse_frame(buf):
    """Returns (type, flags, stream_id, frame_id, payload) of one whole frame."""
    ftype = buf[0]
    flags = struct.unpack(">I", buf[1:5])[0]
    sid, i = read_varint(buf, 5)
    fid, i = read_varint(buf, i)
    return ftype, flags, sid, fid, bytes(buf[i:])


def parse_kv(payload):
    out, i = {}, 0
    while i < len(payload):
        n, i = read_varint(payload, i)
        key = payload[i:i + n].decode()
        i += n
        out[key], i = decode_data(payload, i)
    return out


def parse_actions(payload):
    """ACK payload -> {var name: value} of its set-var actions."""
    out, i = {}, 0
    while i < len(payload):
        action, nargs = payload[i], payload[i + 1]
        i += 2
        scope = payload[i]
        i += 1
        n, i = read_varint(payload, i)
        name = payload[i:i + n].decode()
        i += n
        if action == 1:
            out[name], i = decode_data(payload, i)
        assert scope == 2, "tally sets transaction-scoped variables"
        assert nargs in (2, 3)
    return out


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, raw):
        self.sock.sendall(raw)

    def recv_frame(self):
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    f, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return parse_frame(f)
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def closed(self):
        """True once the agent closed the connection (after any pending frames)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def handshake(self, **kw):
        self.send(hello(**kw))
        f = self.recv_frame()
        assert f[0] == AGENT_HELLO, f
        return parse_kv(f[4])

    def close(self):
        self.sock.close()
