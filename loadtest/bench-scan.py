"""loadtest/bench-scan.py: HAProxy CPU per MB of a cut request body read by the capture
filter's request scanner (haproxy/scanner.lua, scan_data), for bodies of several shapes
and sizes, sent chunked so that every HAProxy version cuts them; HAProxy's utime+stime
from /proc/PID/stat around the requests (after one warm-up request each). A cost per
MB that holds from 1 to 4 MB is a linear scan.

  python3 loadtest/bench-scan.py TMPDIR [REPS [SHAPE,...]]

on the test stack (tests/integration/stack.py: TALLY_HAPROXY picks the HAProxy);
shapes: plain, brackets ([],[],...), deep ([[[...]]]), strings ("a","a",...), escapes."""
import http.client
import os
import pathlib
import shutil
import socket
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests/integration"), str(ROOT / "tests")]
from stack import Stack  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")



def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK



def send(stack, body):
    sock = socket.create_connection(("127.0.0.1", stack.gw_port), timeout=60)
    sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {stack.key}\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
    try:
        for at in range(0, len(body), 65536):
            c = body[at:at + 65536]
            sock.sendall(b"%x\r\n%s\r\n" % (len(c), c))
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    resp.read()
    sock.close()
    return resp.status



def shape(name, size):
    head = b'{"model":"mock-gpt","messages":[{"role":"user","content":"' + b"y" * 20000 + b'"}],"x":'
    tail = b'}'
    n = size - len(head) - len(tail)
    if name == "brackets":      # [],[],...
        k = (n - 2) // 3
        v = b"[" + b"[]," * k + b"[]" + b"]"
    elif name == "deep":        # [[[...]]]
        k = n // 2
        v = b"[" * k + b"]" * k
    elif name == "strings":     # "a","a",...
        k = (n - 2) // 4
        v = b"[" + b'"a",' * k + b'"a"' + b"]"
    elif name == "escapes":     # one string of \" and \\
        k = (n - 2) // 2
        v = b'"' + b'\\"' * k + b'"'
    else:                       # plain: one long string
        v = b'"' + b"x" * (n - 2) + b'"'
    return head + v + tail

tmp = pathlib.Path(sys.argv[1])
shutil.rmtree(tmp, ignore_errors=True)
tmp.mkdir(parents=True)
s = Stack(tmp, haproxy_env={"TALLY_MAX_BODY": str(64 << 20)}, agent_args=["--max-body", "0"])
try:
    s.start()
    pid = s.procs["haproxy"].pid
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    shapes = sys.argv[3].split(",") if len(sys.argv) > 3 else \
        ("plain", "brackets", "deep", "strings", "escapes")
    for name in shapes:
        for mb in (1, 2, 4):
            body = shape(name, mb << 20)
            send(s, body)   # warm
            t0 = cpu(pid)
            for _ in range(reps):
                st = send(s, body)
            dt = cpu(pid) - t0
            print(f"{name:9s} {mb} MB: status {st}, HAProxy CPU {dt / reps:.3f} s/request, "
                  f"{dt / reps / mb:.3f} s/MB", flush=True)
finally:
    s.close()
