"""tests/fresh/drive.py CONTAINER LOG: make run as a newcomer types it, in CONTAINER (a
fresh Debian 12 with the checkout in /root/tally), on a terminal (docker exec -t under a
pseudo-terminal here): waits for the printed key, runs the printed unary, stream and
summary curls in the container, checks the two rows through queryd's API, then types
Ctrl-C and checks that everything stopped and that make reported no error. Writes what
make run printed to LOG; prints "ok ..." or "FAIL ..." per check; exit status 0 only when
every check passed."""
import json
import os
import pty
import re
import select
import subprocess
import sys
import time

container, log_path = sys.argv[1], sys.argv[2]
failed = 0


def check(ok, what, detail=""):
    global failed
    print(f"{'ok  ' if ok else 'FAIL'} {what}{'' if ok else ': ' + str(detail)[:600]}", flush=True)
    failed += 0 if ok else 1
    return ok


def inside(command, timeout=60):
    """command (bash) run in the container; its stdout."""
    r = subprocess.run(["docker", "exec", container, "bash", "-c", command], capture_output=True,
                       text=True, timeout=timeout)
    return r.stdout


pid, fd = pty.fork()
if pid == 0:
    os.execvp("docker", ["docker", "exec", "-it", "-w", "/root/tally", container, "make", "run"])
out = b""


def read_until(pattern, timeout):
    """Reads until pattern is in the output (True), or the output ends (False; pattern
    None: to its end) or timeout s pass (False)."""
    global out
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pattern and re.search(pattern, out.decode(errors="replace")):
            return True
        r, _, _ = select.select([fd], [], [], 1)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return False
            if not chunk:
                return False
            out += chunk
            with open(log_path, "ab") as f:
                f.write(chunk)
    return False


started = time.time()
# the first make run installs every package and builds: minutes
up = read_until(r"Ctrl-C stops everything", 45 * 60)
text = out.decode(errors="replace").replace("\r\n", "\n")
check(up, f"make run: the stack is up ({int(time.time() - started)} s)", text[-2000:])
if up:
    key = re.search(r"demo key: (tly_\S+)", text)
    check(key is not None, "make run printed the demo key")
    curls = re.findall(r"^  (curl .*?)(?=\n\n|\n[A-Z]|\Z)", text, re.M | re.S)
    curls = [c.replace("\\\n", " ") for c in curls]
    unary = [c for c in curls if "/v1/chat/completions" in c and " -sN " not in c]
    stream = [c for c in curls if "/v1/chat/completions" in c and " -sN " in c]
    summary = [c for c in curls if "/api/summary" in c]
    check(len(unary) == 1 and len(stream) == 1 and len(summary) == 1,
          "make run printed a unary, a stream and a summary curl", curls)
    if unary and stream and summary:
        got = inside(unary[0])
        check('"chat.completion"' in got and '"usage"' in got, "the printed unary curl: a completion", got)
        got = inside(stream[0])
        check("data: [DONE]" in got, "the printed stream curl: a stream to [DONE]", got)
        requests = summary[0].replace("/api/summary", "/api/requests?limit=10")
        rows = []
        for _ in range(50):
            try:
                rows = json.loads(inside(requests))["requests"]
            except (ValueError, KeyError):
                rows = []
            if len(rows) >= 2:
                break
            time.sleep(0.2)
        want = {(False, 200, "complete", "mock-gpt"), (True, 200, "complete", "mock-gpt")}
        seen = {(r.get("stream"), r.get("status"), r.get("outcome"), r.get("model")) for r in rows}
        check(len(rows) == 2 and seen == want, "two rows: mock-gpt, 200, complete, one streamed", rows)
        got = inside(summary[0])
        try:
            check(isinstance(json.loads(got), dict), "the printed summary curl: JSON", got)
        except ValueError:
            check(False, "the printed summary curl: JSON", got)
    # from the stack's start on (the install and the build before it print compiler
    # flags such as -Werror)
    started_at = text.find("seeding ")
    alarming = re.findall(r".*(?:WARNING|ALERT|ERROR|[Ee]rror|[Ff]ail|not read|No such file).*",
                          text[started_at:] if started_at >= 0 else text)
    check(started_at >= 0 and not alarming, "the stack's start printed nothing that reads like an error",
          alarming)
    os.write(fd, b"\x03")
    read_until(None, 60)  # to the end of the output
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace").replace("\r\n", "\n")
    tail = text[text.rfind("Ctrl-C stops everything"):]
    check("tally stopped" in tail and "make: ***" not in tail, "Ctrl-C: tally stopped, make reports no error", tail)
    left = inside("ps -eo pid=,comm= | grep -E 'tally-|mock-upstream|haproxy' || true").strip()
    check(left == "", "Ctrl-C: no process of the stack left", left)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
sys.exit(1 if failed else 0)
