"""tally-stress against the real gateway: every response is compared byte for byte
with the mock's own answer, and every successful request has exactly one accounting
row. Load is bounded: a few dozen requests per run. The cases marked BOTH_STORES run with
the agent on SQLite and on PostgreSQL, tally-stress reading the same store; two run
against two nodes on one PostgreSQL store, one --url per node."""
import json
import sqlite3
import subprocess
import time
from collections import Counter

import pytest

from cluster import Cluster
from conftest import binary, free_port
from stack import BOTH_STORES, MOCK_CREDENTIAL, Proc, store, wait_port  # noqa: F401 (store)
from test_accounting import stack  # noqa: F401  (the fixture)

FRAMES = 5
# A stream with include_usage: FRAMES content chunks, the finish chunk, the usage chunk
# and [DONE], each one "data: " event.
STREAM_EVENTS = FRAMES + 3
MOCK_COMPLETION_TOKENS = 20   # the mock's default
END_USERS = 8                 # tally-stress --end-users' default
# tally-stress's sets of tags, as canonical text: request k sends set (k // 2) % 4 - 1,
# none for 0 (with spaces, tabs and out of order in X-Tally-Tags)
TAG_SETS = [None, "env=stress", "env=stress,team=b-1", "env=load,feature=search,z.k=V:1/a@b+c"]


def end_user_id(j):
    """tally-stress's end user j: a plain id, one with spaces, quotes and a letter outside
    ASCII, an e-mail address, one of the longest length (256 bytes), in turn."""
    if j % 4 == 0:
        return f"stress-{j}"
    if j % 4 == 1:
        return f'stress {j} "Zoë"'
    if j % 4 == 2:
        return f"stress-{j}@example.com"
    return f"stress-{j}-".ljust(256, "x")


def end_users_sent(requests, n=END_USERS):
    """What a level of tally-stress names: request k none when k % 3 == 0, else end user
    (k // 3) % n (by the header when k % 3 == 1, in the body when 2); None for none."""
    return Counter(None if k % 3 == 0 else end_user_id(k // 3 % n) for k in range(requests))


def stress(stack, *args, expect_port=None, db=None, levels="1,4", requests=40, as_json=True,
           keys=None):
    """Runs tally-stress (with --keys K1,K2,... given keys, else --key stack.key); returns
    the process and its JSON levels (if as_json)."""
    argv = [str(binary("tally-stress")), "--url", f"http://127.0.0.1:{stack.gw_port}",
            "--expect-url", f"http://127.0.0.1:{expect_port or stack.mock_port}",
            *(["--keys", ",".join(keys)] if keys else ["--key", stack.key]),
            "--levels", levels, "--requests", str(requests),
            "--stream-pct", "50", "--frames", str(FRAMES), "--timeout", "20",
            "--db", str(db or stack.db), *(["--json"] if as_json else []), *args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                       env={"TALLY_MOCK_CREDENTIAL": MOCK_CREDENTIAL})
    return r, [json.loads(line) for line in r.stdout.splitlines()] if as_json else None


@BOTH_STORES
def test_levels_are_exact_and_accounted(stack):
    r, levels = stress(stack)
    assert r.returncode == 0, r.stderr + r.stdout + stack.logs()
    assert [lv["connections"] for lv in levels] == [1, 4]
    for lv in levels:
        assert lv["errors"]["total"] == 0, lv
        assert (lv["requests"], lv["ok"], lv["ok_streams"]) == (40, 40, 20)
        assert lv["events"] == 20 * STREAM_EVENTS
        assert lv["output_tokens"] == 40 * MOCK_COMPLETION_TOKENS
        assert lv["bytes"] > 0 and lv["requests_per_s"] > 0
        lat = lv["latency_ms"]
        assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]
        acct = lv["accounting"]
        assert {k: acct[k] for k in ("exact", "rows", "expected", "missing_request_id",
                                     "dropped", "timed_out", "balanced")} == {
            "exact": True, "rows": 40, "expected": 40, "missing_request_id": 0, "dropped": 0,
            "timed_out": 0, "balanced": True}
        # The agent's totals after the level: nothing in flight, nothing lost.
        assert acct["received"] == acct["written"] and acct["dropped_total"] == 0
        # Two in three named an end user, by the header or in the body, and each row
        # has the one its request named; end_user_daily holds the rows' sums.
        assert acct["end_users"] == {
            "exact": True, "rows": 40, "as_sent": 40, "none": 14, "header": 13, "body": 13,
            "daily_groups": END_USERS, "daily_rows": END_USERS, "daily_equal": END_USERS}
        # Three in four sent tags, each row keeps their canonical text, and tag_daily
        # holds the rows' sums per tag (env=stress in two sets), key and day, and
        # tag_total_daily per tag and day (one key: as many groups); request_tags has
        # the rows' tags one for one (sets of 1, 2 and 3 tags, over every level so far).
        n = 60 * len(levels[:levels.index(lv) + 1])
        assert acct["tags"] == {
            "exact": True, "rows": 40, "as_sent": 40, "none": 10, "sets": [10, 10, 10],
            "daily_groups": 5, "daily_rows": 5, "daily_equal": 5,
            "total_groups": 5, "total_rows": 5, "total_equal": 5,
            "request_tags_want": n, "request_tags_valid": n, "request_tags_rows": n}
    rows = stack.rows()
    assert len(rows) == 80
    sent = end_users_sent(40)
    assert Counter(r["end_user"] for r in rows) == sent + sent
    assert Counter(r["tags"] for r in rows) == {t: 20 for t in TAG_SETS}


def test_human_output_without_keepalive(stack):
    r, _ = stress(stack, "--keepalive", "0", levels="2", requests=10, as_json=False)
    assert r.returncode == 0, r.stderr + r.stdout
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["conns", "ok", "streams"]
    assert lines[1].split()[:4] == ["2", "10", "5", "0"]
    assert "accounting 10/10 exact, completion tokens 200/200 (dropped +0, timed_out +0)" \
        in r.stdout


@BOTH_STORES
def test_hostile_traffic_mixed_in_stays_exact(stack):
    """Half the requests try to get around the meter (usage turned off, a chunked body,
    an error on an amended stream; Responses requests whose echoed tools, instructions
    and metadata forge a usage, name another model or push the usage away; a usage class
    the card does not price) and every response's id gets a forged zero-usage record
    ahead of its real one: each response is still the upstream's bytes (but for the
    usage event nobody asked for), each has its row with the usage the upstream
    reported, the echo and unpriced ones priced at their own model, and no forged record
    made a row."""
    r, levels = stress(stack, "--hostile-pct", "50", "--forge",
                       f"127.0.0.1:{stack.records_port}", levels="1,8", requests=56)
    assert r.returncode == 0, r.stderr + r.stdout + stack.logs()
    for lv in levels:
        assert lv["errors"]["total"] == 0, lv
        assert lv["ok"] == 56
        acct = lv["accounting"]
        assert acct["exact"] and acct["rows"] == 56 and acct["forged_rows"] == 0, acct
        assert acct["completion_tokens"] == acct["completion_tokens_expected"] > 0
        assert acct["billed_rows"] == acct["billed_expected"] == 16, acct
        assert acct["forged_records"] >= 56
    rows = stack.rows()
    assert len(rows) == 112
    # the hostile shapes were there: rows of 429s, streams that asked for no usage, and
    # the Responses and unpriced ones, each billing its own usage at mock-gpt's card
    assert sum(1 for x in rows if x["status"] == 429) == 8
    # (the hostile half takes the streams' turns: of its seven shapes four are streams
    # answered 200, so 4 x 4 per level)
    assert sum(1 for x in rows if x["stream"] == 1 and x["usage_source"] == "stream") == 32
    billed = [x for x in rows if x["prompt_tokens"] == 50000]
    assert len(billed) == 32 and {x["model"] for x in billed} == {"mock-gpt"}
    # 50,000 in at $1 and 20,000 out at $2 per Mtok (test_accounting's card); the cache
    # writes of the unpriced ones are charged too, so they cost at least that much
    assert all(x["cost_micros"] >= 90000 for x in billed), billed
    assert stack.counters()["unauthenticated"] >= 112


def test_end_users_not_as_sent_fail_the_run(stack):
    """A row whose end user is not the one its request named fails the level: with an
    X-Tally-User header of its own on every request, those that also named one by the
    header are refused (two headers) and the others are recorded under the extra one."""
    r, levels = stress(stack, "--header", "X-Tally-User: someone-else", levels="1",
                       requests=12)
    assert r.returncode == 1, r.stderr
    (lv,) = levels
    assert lv["errors"]["by_status"] == {"400": 4} and lv["ok"] == 8, lv
    acct = lv["accounting"]
    assert acct["rows"] == 8 and acct["exact"] is False, acct
    assert acct["end_users"]["as_sent"] == 0 and acct["end_users"]["exact"] is False, acct
    # (the refusals' rows name nobody: the gateway records no end user it cannot tell)
    assert Counter((x["status"], x["end_user"]) for x in stack.rows()) == {
        (200, "someone-else"): 8, (400, None): 4}
    r, _ = stress(stack, "--end-users", "65", levels="1", requests=1)
    assert r.returncode == 2 and "--end-users" in r.stderr, r.stderr


def add_ghost_daily(stack, table, **names):
    """Adds to table a row of key 1 on day 1 that no request made: names, zero sums
    (request_tags: a tag of a row that does not carry it)."""
    con = sqlite3.connect(stack.db, timeout=10)
    cols = [c[1] for c in con.execute(f"PRAGMA table_info({table})")]
    with con:
        con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES"
                    f" ({', '.join('?' * len(cols))})",
                    [{"day": 86400, "key_id": 1, **names}.get(c, 0) for c in cols])
    con.close()


@pytest.mark.parametrize("table, ghost, option, too_many, check, column, line", [
    ("end_user_daily", {"end_user": "ghost"}, "--end-users", "65", "end_users", "end_user",
     "end users 6/6 as sent (header 2, body 2, none 2), end_user_daily 2/2 groups of"
     " the rows' sums (3 stored) WRONG"),
    ("tag_daily", {"tag": "env=ghost"}, "--tag-sets", "4", "tags", "tags",
     "tags 6/6 as sent (sets 2/2/0, none 2), tag_daily 2/2 groups of the rows' sums"
     " (3 stored), tag_total_daily 2/2 (2 stored), request_tags 6/6 of the rows' tags"
     " (6 stored) WRONG"),
    ("tag_total_daily", {"tag": "env=ghost"}, "--tag-sets", "4", "tags", "tags",
     "tags 6/6 as sent (sets 2/2/0, none 2), tag_daily 2/2 groups of the rows' sums"
     " (2 stored), tag_total_daily 2/2 (3 stored), request_tags 6/6 of the rows' tags"
     " (6 stored) WRONG"),
    ("request_tags", {"tag": "env=ghost", "started_at": 1, "id": 1}, "--tag-sets", "4",
     "tags", "tags",
     "tags 6/6 as sent (sets 2/2/0, none 2), tag_daily 2/2 groups of the rows' sums"
     " (2 stored), tag_total_daily 2/2 (2 stored), request_tags 6/6 of the rows' tags"
     " (7 stored) WRONG"),
])
def test_daily_not_the_rows_sums_fails_the_run(stack, table, ghost, option, too_many, check,
                                               column, line):
    """end_user_daily (tag_daily, tag_total_daily) is checked against the rows' sums per
    key, day and end user (tag; tag and day) over the whole store: a row of it that no
    request made fails the level; --end-users 0 (--tag-sets 0) sends none and checks
    nothing of it."""
    add_ghost_daily(stack, table, **ghost)
    r, levels = stress(stack, levels="1", requests=6, as_json=False)
    assert r.returncode == 1, r.stderr
    assert "accounting 6/6 exact" not in r.stdout, r.stdout
    assert line in r.stdout, r.stdout
    r, levels = stress(stack, option, "0", levels="1", requests=6)
    assert r.returncode == 0, r.stderr + r.stdout
    assert check not in levels[0]["accounting"] and levels[0]["accounting"]["exact"]
    assert all(x[column] is None for x in stack.rows()[6:])
    r, _ = stress(stack, option, too_many, levels="1", requests=1)
    assert r.returncode == 2 and option in r.stderr, r.stderr


def test_wrong_expected_bytes_are_mismatches(stack, tmp_path):
    """A mock with another default token count answers other bytes: every response
    is counted as a mismatch and the run fails."""
    port = free_port()
    other = Proc("mock-other", [str(binary("mock-upstream")), "--listen",
                                f"127.0.0.1:{port}", "--quiet", "--completion-tokens", "21"],
                 tmp_path)
    try:
        wait_port(port, other)
        r, levels = stress(stack, expect_port=port, levels="2", requests=10)
    finally:
        other.stop()
    assert r.returncode == 1, r.stderr
    (lv,) = levels
    assert lv["errors"]["mismatch"] == 10 and lv["errors"]["total"] == 10
    assert lv["ok"] == 0


def test_missing_rows_fail_the_run(stack, tmp_path):
    """Checked against a database the agent never writes: accounting is SHORT."""
    other = tmp_path / "other.db"
    subprocess.run([str(binary("tallyctl")), "--db", str(other), "provider", "set", "p",
                    "--api", "openai", "--backend", "be_mock_openai"], check=True, timeout=30)
    r, levels = stress(stack, db=other, levels="1", requests=4)
    assert r.returncode == 1, r.stderr
    (lv,) = levels
    assert lv["errors"]["total"] == 0
    assert lv["accounting"]["exact"] is False and lv["accounting"]["rows"] == 0


def test_missing_rows_fail_the_run_on_postgres(stack, pg_url):
    """tally-stress reads a postgresql:// store as it reads a path: a database the
    agent never writes (its schema made by tally-gen with no rows) is SHORT."""
    made = subprocess.run([str(binary("tally-gen")), "--db", pg_url, "--ndjson", "-"],
                          input="", capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    r, levels = stress(stack, db=pg_url, levels="1", requests=4)
    assert r.returncode == 1, r.stderr
    (lv,) = levels
    assert lv["errors"]["total"] == 0
    acct = lv["accounting"]
    assert acct["exact"] is False and acct["rows"] == 0
    assert acct["received"] == acct["written"] == acct["dropped"] == 0


def test_rejected_requests_are_counted_by_status(stack):
    r, levels = stress(stack, "--key", "not-a-key", levels="2", requests=6)  # last --key wins
    assert r.returncode == 1, r.stderr
    (lv,) = levels
    assert lv["ok"] == 0 and lv["errors"]["status"] == 6
    assert lv["errors"]["by_status"] == {"401": 6}


def test_extra_headers_reach_the_gateway_only(stack):
    """--header goes on requests to --url, not on the fetch of the expected answer: a
    header that changes the mock's answer is caught by the byte compare."""
    r, levels = stress(stack, "--header", "x-mock-completion-tokens: 21", levels="2",
                       requests=10)
    assert r.returncode == 1, r.stderr
    assert levels[0]["errors"]["mismatch"] == 10 and levels[0]["ok"] == 0
    r, levels = stress(stack, "--header", "x-unrelated: 1", levels="2", requests=10)
    assert r.returncode == 0 and levels[0]["ok"] == 10, r.stderr
    for bad in ("no-colon", ": empty-name"):
        r, _ = stress(stack, "--header", bad, levels="1", requests=1)
        assert r.returncode == 2 and "--header" in r.stderr


@pytest.fixture
def two_nodes(tmp_path, pg_server, pg_url):
    with Cluster(tmp_path, pg_server, pg_url, 2) as cluster:
        yield cluster.nodes


def test_two_urls_spread_the_clients_and_each_node_balances(two_nodes):
    """--url given once per node: a level's clients alternate between the two gateways,
    each node writes the rows of the requests it served, and every node's counters
    balance (received = written + dropped, nothing dropped)."""
    n1, n2 = two_nodes
    r, levels = stress(n1, "--url", f"http://127.0.0.1:{n2.gw_port}", levels="2,4")
    assert r.returncode == 0, r.stderr + r.stdout + n1.logs() + n2.logs()
    for lv in levels:
        assert lv["errors"]["total"] == 0 and lv["refused"] == 0, lv
        assert lv["ok"] == 40 and sum(lv["ok_by_url"]) == 40
        assert all(n > 0 for n in lv["ok_by_url"]), lv["ok_by_url"]
        acct = lv["accounting"]
        assert acct["exact"] and acct["nodes_balanced"] and acct["rows"] == 40, acct
        assert [x["node"] for x in acct["nodes"]] == ["n1", "n2"]
        # n1's gateway is the first --url: each node wrote exactly what its gateway served
        assert [x["written_level"] for x in acct["nodes"]] == lv["ok_by_url"], acct
        for x in acct["nodes"]:
            assert x["received"] == x["written"] and x["dropped"] == 0, x
    written = [n.counters()["written"] for n in (n1, n2)]
    assert written == [sum(lv["ok_by_url"][i] for lv in levels) for i in (0, 1)]


def test_keys_one_per_url_each_gateway_sends_its_own(two_nodes):
    """--keys K1,K2: the clients of the first --url send K1, those of the second K2 (a
    team's keys, one per node): each key has the rows of what its gateway served, and the
    check still counts every request exactly. --keys wants one key per --url, and no
    --key beside it."""
    n1, n2 = two_nodes
    k1 = n1.create_key("k1", "--default-model", "mock-gpt")
    k2 = n1.create_key("k2", "--default-model", "mock-gpt")
    time.sleep(0.6)   # both agents reload keys within their reload interval (250 ms)
    r, levels = stress(n1, "--url", f"http://127.0.0.1:{n2.gw_port}", keys=(k1, k2),
                       levels="2,4")
    assert r.returncode == 0, r.stderr + r.stdout + n1.logs() + n2.logs()
    for lv in levels:
        assert lv["errors"]["total"] == 0 and lv["ok"] == 40, lv
        assert all(n > 0 for n in lv["ok_by_url"]), lv["ok_by_url"]
        acct = lv["accounting"]
        assert acct["exact"] and acct["rows"] == 40, acct
        assert [x["written_level"] for x in acct["nodes"]] == lv["ok_by_url"], acct
    by_key = dict(n1.pg.query(n1.db, "SELECT k.name, count(*) FROM requests r JOIN keys k"
                                     " ON k.id = r.key_id GROUP BY k.name"))
    assert by_key == {"k1": sum(lv["ok_by_url"][0] for lv in levels),
                      "k2": sum(lv["ok_by_url"][1] for lv in levels)}, by_key
    for args, keys in (((), (k1, k2)), (("--url", f"http://127.0.0.1:{n2.gw_port}"), (k1,))):
        r, _ = stress(n1, *args, keys=keys, levels="1", requests=1)
        assert r.returncode == 2 and "--keys: one key per --url" in r.stderr, r.stderr
    r, _ = stress(n1, "--keys", k1, levels="1", requests=1)
    assert r.returncode == 2 and "--keys or --key, not both" in r.stderr, r.stderr


def test_an_unbalanced_node_fails_the_run(two_nodes, pg_server, pg_url):
    """Two accounting rows that balance only when summed (one node received two rows it
    never wrote, another wrote two it never received): the store as a whole balances,
    the nodes do not, and the run fails."""
    n1, n2 = two_nodes
    pg_server.query(pg_url, "INSERT INTO accounting (node, received, written, dropped,"
                    " duplicates, timed_out, unpriced, updated_at) VALUES"
                    " ('n8', 5, 3, 0, 0, 0, 0, 0), ('n9', 0, 2, 0, 0, 0, 0, 0)")
    r, levels = stress(n1, "--url", f"http://127.0.0.1:{n2.gw_port}", levels="2",
                       requests=10)
    assert r.returncode == 1, r.stderr + r.stdout
    (lv,) = levels
    assert lv["errors"]["total"] == 0 and lv["ok"] == 10
    acct = lv["accounting"]
    assert acct["rows"] == 10 and acct["balanced"] is True, acct
    assert acct["nodes_balanced"] is False and acct["exact"] is False, acct
    assert [x["node"] for x in acct["nodes"]] == ["n1", "n2", "n8", "n9"]
    r, _ = stress(n1, "--url", f"http://127.0.0.1:{n2.gw_port}", levels="2", requests=4,
                  as_json=False)
    assert r.returncode == 1 and "node n8: wrote 0; received 5 = written 3 + dropped 0" \
        " UNBALANCED" in r.stdout, r.stdout


def test_refusals_are_counted_apart_from_errors(stack):
    """A key allowed one request a minute: the rest are refused (429), which with
    --refused-status 429 is no error; each refused client backs off for the pause."""
    key = stack.create_key("rpm1", "--default-model", "mock-gpt", "--rpm", "1")
    time.sleep(0.6)   # the agent reloads keys within its reload interval (250 ms)
    pause_ms = 200
    r, levels = stress(stack, "--key", key, "--refused-status", "429",
                       "--refused-pause-ms", str(pause_ms), levels="2", requests=10)
    assert r.returncode == 0, r.stderr + r.stdout + stack.logs()
    (lv,) = levels
    assert lv["errors"]["total"] == 0 and lv["errors"]["by_status"] == {}, lv
    assert (lv["ok"], lv["refused"], lv["requests"]) == (1, 9, 10), lv
    assert lv["ok_by_url"] == [1]
    acct = lv["accounting"]
    assert acct["exact"] and acct["rows"] == 1, acct
    # Nine refusals over two clients: one had five, four of whose pauses came before
    # its last answer.
    assert lv["elapsed_s"] >= 4 * pause_ms / 1000 * 0.95, lv
    # Without --refused-status the same refusals are errors, and the run fails.
    r, levels = stress(stack, "--key", key, levels="1", requests=3)
    assert r.returncode == 1, r.stderr
    (lv,) = levels
    assert lv["refused"] == 0 and lv["errors"]["by_status"] == {"429": 3}, lv
