"""`make run-cluster`'s script end to end: a private PostgreSQL and two nodes on free
ports, requests through both gateways stored as rows that queryd serves, a key made with
tallyctl through data/cluster.env working on both nodes, Ctrl-C stopping every process
PostgreSQL included, and a second run on the same data printing the same key (stopped by
SIGTERM). As in a container whose PID 1 reaps nothing (make test-fresh's), the
postmaster that pg_ctl leaves orphaned stays a zombie once it exits."""
import ctypes
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, HAPROXY, ROOT, free_port
from pgserver import PG_BIN, _alive
from stack import Stack
from test_run import as_terminal_job, children_of, ctrl_c

PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(autouse=True)
def orphans_stay_zombies():
    """This process adopts its descendants' orphans (the postmaster, once pg_ctl exits)
    and reaps none while the test runs: a stopped PostgreSQL stays a zombie, as in a
    container without an init, where run-cluster.sh's Ctrl-C once waited 60 s for one."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, ctypes.get_errno()
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        while True:     # the adopted ones that ended
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


PORTS = ("GATEWAY", "GATEWAY2", "AGENT", "AGENT2", "RECORDS", "RECORDS2", "METRICS",
         "METRICS2", "MOCK", "QUERYD")


def start_cluster(base, ports):
    env = dict(os.environ, TALLY_BUILD=str(BUILD), TALLY_DATA_DIR=str(base / "data"),
               TALLY_HAPROXY=HAPROXY, **{f"TALLY_{n}_PORT": str(p) for n, p in ports.items()})
    env.pop("TALLY_OPERATOR_TOKEN", None)
    log_path = base / "run.log"
    seen = log_path.stat().st_size if log_path.exists() else 0   # a previous run's
    with open(log_path, "ab") as log:
        # its own process group, as a terminal's foreground job: Ctrl-C signals the group
        p = subprocess.Popen(["bash", str(ROOT / "scripts" / "run-cluster.sh")], stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True, preexec_fn=as_terminal_job)
    try:
        deadline = time.time() + 40
        while time.time() < deadline:
            text = log_path.read_bytes()[seen:].decode()
            if "Ctrl-C stops everything" in text:
                postmaster = int((base / "data/cluster/pg/postmaster.pid").read_text().split()[0])
                return p, text, postmaster
            assert p.poll() is None, text
            time.sleep(0.1)
        raise AssertionError(log_path.read_text())
    except BaseException:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)   # its trap stops PostgreSQL too
            p.wait(30)
        raise


def stop_left_over(pid):
    """Stops a PostgreSQL the script failed to stop (a failing test), by its PID."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        if _alive(pid):
            os.kill(pid, sig)
            wait_for(lambda: not _alive(pid), 10)


def wait_for(what, timeout):
    deadline = time.time() + timeout
    while True:
        got = what()
        if got or time.time() > deadline:
            return got
        time.sleep(0.05)


def test_make_run_cluster_serves_two_nodes_on_one_postgresql(tmp_path):
    # As root PostgreSQL runs as user postgres, which must reach the data directory:
    # pytest's own directories are closed to it.
    base = pathlib.Path(tempfile.mkdtemp(prefix="tally-run-cluster-"))
    base.chmod(0o711)
    postmaster = None
    try:
        ports = {n: free_port() for n in PORTS}
        p, text, postmaster = start_cluster(base, ports)
        try:
            key = re.search(r"demo key: (tly_\S+)", text).group(1)
            assert f"node1: gateway http://127.0.0.1:{ports['GATEWAY']}" in text
            assert f"node2: gateway http://127.0.0.1:{ports['GATEWAY2']}" in text
            curls = re.findall(r"(curl -sN? http://\S+/v1/chat/completions .*?)\n\n", text, re.S)
            assert [re.search(r":(\d+)/", c).group(1) for c in curls] == \
                [str(ports["GATEWAY"]), str(ports["GATEWAY2"]), str(ports["GATEWAY2"])]
            out = subprocess.run(["bash", "-c", curls[1].replace("\\\n", " ")],
                                 capture_output=True, text=True, timeout=10)
            assert '"chat.completion"' in out.stdout, out

            # one request through each gateway with the printed key: two rows in the one
            # store, each named by its node's request id, served by queryd
            s = Stack(base)
            ids = []
            for port in (ports["GATEWAY"], ports["GATEWAY2"]):
                s.gw_port = port
                status, h, _ = s.gateway("POST", "/v1/chat/completions",
                                         {"model": "mock-gpt", "messages": []}, key=key)
                assert status == 200
                ids.append(h["x-request-id"])
            token = (base / "data" / "operator.token").read_text().strip()
            auth = {"Authorization": f"Bearer {token}"}

            def row(rid):
                status, _, body = s._request(ports["QUERYD"], "GET", f"/api/requests/{rid}",
                                             headers=auth)
                return json.loads(body)["request"] if status == 200 else None
            rows = [wait_for(lambda: row(rid), 15) for rid in ids]
            assert [(r["key_name"], r["model"], r["status"]) for r in rows] == \
                [("demo", "mock-gpt", 200)] * 2, rows

            # a key made through data/cluster.env, as the printed line says, works on both
            # nodes within their reload interval (250 ms)
            env_file = base / "data" / "cluster.env"
            assert env_file.read_text().startswith("TALLY_DB=postgresql://")
            made = subprocess.run(
                ["bash", "-c", f"env $(cat {env_file}) {BUILD}/tallyctl key create --name t2 "
                               "--default-model mock-gpt"],
                capture_output=True, text=True, timeout=30)
            assert made.returncode == 0, made.stderr
            created = time.time()
            new_key = made.stdout.strip()

            def served(port):
                s.gw_port = port
                return s.gateway("POST", "/v1/chat/completions",
                                 {"model": "mock-gpt", "messages": []}, key=new_key)[0] == 200
            for port in (ports["GATEWAY"], ports["GATEWAY2"]):
                assert wait_for(lambda: served(port), 5), port
            assert time.time() - created < 2
        finally:
            kids, alive = ctrl_c(p)
        assert len(kids) >= 6 and alive == [], (kids, alive)
        assert not _alive(postmaster)
        assert "tally cluster stopped" in (base / "run.log").read_text()
        assert not env_file.exists()

        # a second run starts the same cluster and prints the same demo key; SIGTERM to
        # the script alone (a service manager's stop) stops everything too
        p, text2, postmaster = start_cluster(base, ports)
        kids = children_of(p.pid)
        try:
            assert re.search(r"demo key: (tly_\S+)", text2).group(1) == key
            assert (base / "run.log").read_text().count("seeding") == 1
            p.terminate()
            p.wait(30)
        finally:
            if p.poll() is None:
                ctrl_c(p)
        time.sleep(0.2)
        assert [k for k in kids if _alive(k)] == [] and not _alive(postmaster)
    finally:
        if postmaster is not None:
            stop_left_over(postmaster)
        shutil.rmtree(base, ignore_errors=True)


def cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return []


def test_run_cluster_survives_a_dying_process_and_stops_a_restarted_postgresql(tmp_path):
    """node2's agent killed: reported, node1 serves on, the script keeps running; the
    PostgreSQL restarted by hand (a new postmaster) is stopped by Ctrl-C all the same."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="tally-run-cluster-"))
    base.chmod(0o711)
    postmasters = []
    try:
        ports = {n: free_port() for n in PORTS}
        p, text, postmaster = start_cluster(base, ports)
        postmasters.append(postmaster)
        try:
            key = re.search(r"demo key: (tly_\S+)", text).group(1)
            agent2 = [k for k in children_of(p.pid) if b"node2" in cmdline(k)
                      and cmdline(k)[0].endswith(b"tally-agent")]
            assert len(agent2) == 1, agent2
            os.kill(agent2[0], signal.SIGKILL)
            log = base / "run.log"
            assert wait_for(lambda: f"node2's tally-agent (pid {agent2[0]}) exited"
                            in log.read_text(), 10), log.read_text()[-2000:]
            time.sleep(0.5)
            assert p.poll() is None, log.read_text()[-2000:]
            s = Stack(base)
            s.gw_port = ports["GATEWAY"]
            status, _, _ = s.gateway("POST", "/v1/chat/completions",
                                     {"model": "mock-gpt", "messages": []}, key=key)
            assert status == 200

            # restarted by hand: pg_ctl restart reuses its options, a new postmaster (its
            # log to the file, or it would hold our pipe open)
            pg = base / "data/cluster/pg"
            pg_ctl = [str(PG_BIN / "pg_ctl"), "-D", str(pg), "-l", str(pg / "server.log"),
                      "-w", "-m", "fast", "restart"]
            if os.geteuid() == 0:
                pg_ctl = ["runuser", "-u", "postgres", "--"] + pg_ctl
            out = subprocess.run(pg_ctl, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert out.returncode == 0, out.stderr
            postmasters.append(int((pg / "postmaster.pid").read_text().split()[0]))
            assert postmasters[1] != postmaster and _alive(postmasters[1])
        finally:
            kids, alive = ctrl_c(p)
        assert alive == [], (kids, alive)
        assert wait_for(lambda: not _alive(postmasters[-1]), 10)
        assert "tally cluster stopped" in (base / "run.log").read_text()
    finally:
        for pm in postmasters:
            stop_left_over(pm)
        shutil.rmtree(base, ignore_errors=True)
