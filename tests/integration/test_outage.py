"""The store goes away under load and comes back (issue 15; docs/architecture.md, "Queue
and writer"): the gateway keeps deciding and answering with the keys it holds, the rows
the writer cannot store wait on disk (spoa/spill.c) beyond the small queue, and once the
store is back every request is exactly one row, nothing dropped, nothing twice. On
PostgreSQL the server stops for 60 s; on SQLite another process holds the database's
write lock for 15 s, past --write-retry-ms."""
import concurrent.futures
import sqlite3
import threading
import time

import pytest

from stack import Stack
from test_accounting import metrics, settled

CHAT = "/v1/chat/completions"
# A queue far smaller than the rows made while the store is away, so that the spill,
# not the queue, keeps them; a short retry so that the writer spills its batches too.
AGENT_ARGS = ["--queue-capacity", "64", "--batch-max", "256", "--write-retry-ms", "2000",
              "--pending-timeout-ms", "5000"]


class Load:
    """threads clients sending chats back to back until stop(); every answer's status
    and X-Request-Id kept, and the agent's spill gauges sampled meanwhile."""

    def __init__(self, stack, threads):
        self.stack = stack
        self.ids, self.statuses = [], []
        self.max_spilled = self.max_lag = 0
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.pool = concurrent.futures.ThreadPoolExecutor(threads + 1)
        self.futures = [self.pool.submit(self.client) for _ in range(threads)]
        self.futures.append(self.pool.submit(self.sample))

    def client(self):
        while not self.done.is_set():
            status, h, _ = self.stack.gateway(
                "POST", CHAT, {"model": "mock-gpt", "max_tokens": 20, "messages": []},
                key=self.stack.key)
            with self.lock:
                self.statuses.append(status)
                self.ids.append(h.get("x-request-id"))

    def sample(self):
        while not self.done.wait(0.5):
            m = metrics(self.stack)
            self.max_spilled = max(self.max_spilled, m.get("tally_spilled_rows", 0))
            self.max_lag = max(self.max_lag, m.get("tally_writer_lag_seconds", 0))

    def stop(self):
        self.done.set()
        for f in self.futures:
            f.result()
        self.pool.shutdown()


def every_request_one_row(stack, load, timeout):
    """Waits until the store holds a row per request; checks each is there once."""
    want = len(load.ids)
    print(f"\n{want} requests: {stack.counters()}")
    deadline = time.time() + timeout
    while stack.scalar("SELECT count(*) FROM requests") < want and time.time() < deadline:
        time.sleep(0.5)
    assert stack.scalar("SELECT count(*) FROM requests") == want
    assert stack.scalar("SELECT count(DISTINCT request_id) FROM requests") == want
    assert {r["request_id"] for r in stack.rows()} == set(load.ids)
    c = settled(stack, timeout=30)
    assert c["dropped"] == 0 and c["received"] == c["written"] == want, c
    m = metrics(stack)
    assert m["tally_spilled_rows"] == 0 and m["tally_writer_lag_seconds"] == 0
    return c


@pytest.fixture
def pg_stack(tmp_path, pg_server, pg_url):
    s = Stack(tmp_path, agent_args=AGENT_ARGS, store="postgres", pg=pg_server, url=pg_url)
    try:
        s.start()
        yield s
    finally:
        pg_server.start()   # whatever happened, the next tests get their server
        s.close()


def test_postgres_stopped_for_a_minute_under_load_loses_and_repeats_nothing(pg_stack):
    stack = pg_stack
    load = Load(stack, threads=3)
    try:
        time.sleep(5)
        stack.pg.stop()
        outage = time.time()
        try:
            time.sleep(60)
        finally:
            stack.pg.start()
        outage = time.time() - outage
        time.sleep(5)
    finally:
        load.stop()
    assert load.statuses and set(load.statuses) == {200}, set(load.statuses)
    assert all(load.ids)
    every_request_one_row(stack, load, timeout=120)
    assert load.max_spilled > 64, load.max_spilled   # past the queue: on disk
    assert load.max_lag >= 30, load.max_lag
    drained = [line for line in stack.procs["agent"].output().splitlines()
               if "the spill is drained" in line]
    assert drained
    print(f"\n{len(load.ids)} requests, outage {outage:.0f} s, at most "
          f"{load.max_spilled:.0f} rows spilled, lag up to {load.max_lag:.0f} s; "
          f"{max(drained, key=lambda line: int(line.split('drained: ')[1].split()[0]))}")


@pytest.fixture
def sqlite_stack(tmp_path):
    s = Stack(tmp_path, agent_args=AGENT_ARGS)
    try:
        s.start()
        yield s
    finally:
        s.close()


def test_sqlite_locked_past_the_retry_loses_and_repeats_nothing(sqlite_stack):
    stack = sqlite_stack
    load = Load(stack, threads=2)
    try:
        time.sleep(2)
        con = sqlite3.connect(str(stack.db), timeout=5, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        try:
            time.sleep(15)
        finally:
            con.execute("ROLLBACK")
            con.close()
        time.sleep(3)
    finally:
        load.stop()
    assert load.statuses and set(load.statuses) == {200}, set(load.statuses)
    every_request_one_row(stack, load, timeout=60)
    assert load.max_spilled > 64, load.max_spilled


def test_rows_spilled_when_the_agent_is_killed_come_back_from_the_journal(sqlite_stack):
    """The spill is not what survives a crash, the journal is: rows waiting on disk when
    the agent is killed are replayed at its next start (spilled again past the queue)
    and written once each."""
    stack = sqlite_stack
    con = sqlite3.connect(str(stack.db), timeout=5, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    try:
        ids = []
        for _ in range(300):
            status, h, _ = stack.gateway("POST", CHAT, {"model": "mock-gpt", "messages": []},
                                         key=stack.key)
            assert status == 200
            ids.append(h["x-request-id"])
        deadline = time.time() + 10
        while metrics(stack)["tally_spilled_rows"] <= 64 and time.time() < deadline:
            time.sleep(0.2)
        assert metrics(stack)["tally_spilled_rows"] > 64
        stack.kill_agent()
    finally:
        con.execute("ROLLBACK")
        con.close()
    stack.start_agent()
    deadline = time.time() + 30
    while stack.scalar("SELECT count(*) FROM requests") < len(ids) and time.time() < deadline:
        time.sleep(0.2)
    assert stack.scalar("SELECT count(*) FROM requests") == len(ids)
    assert stack.scalar("SELECT count(DISTINCT request_id) FROM requests") == len(ids)
    assert {r["request_id"] for r in stack.rows()} == set(ids)
    c = settled(stack)
    assert c["dropped"] == 0 and c["received"] == c["written"] == len(ids), c
