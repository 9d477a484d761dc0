#!/usr/bin/env bash
# loadtest/perf.sh STAGE...: the load harness. Each stage starts from a fresh database and
# fresh processes (mock upstream, agent, HAProxy, tally-queryd polled like an open
# dashboard) that it owns and stops, drives them with build/tally-stress (every body
# compared byte for byte, every successful request checked for exactly one accounting
# row), samples CPU and RSS of HAProxy, the agent and queryd from /proc, and stops at the
# first failed stage or lost row.
#
# Stages:
#   smoke      a few seconds, small levels: accounting exact and bytes equal (CI runs it)
#   stress     fast unary responses at rising concurrency
#   hostile    normal and hostile traffic mixed (streams that turn usage off, chunked
#              bodies, errors on amended streams, a forged record raced ahead of every
#              real one): every response checked, every row with the reported usage
#   streaming  a ramp of held streams (100 frames 10 ms apart, about one second each),
#              through plain HAProxy and then the gateway: events/s side by side
#   sustained  one level for minutes
#   overload   deliberate overload: a small queue, no spill and the database locked for
#              a while mid-run; passes when drops happened, were counted, and written + dropped
#              = received still holds
#   compare    the same fixture through the mock directly, plain HAProxy, the gateway and
#              a peer gateway (Portkey's, from the npm registry; PERF_PEER=0 skips it):
#              unary, then PERF_COMPARE_STREAMS held streams (0 skips)
#   bench      the micro-benchmarks: SPOP codec and record/usage parsers (bench-codec),
#              journal, writer, queryd's endpoints on PERF_QUERYD_ROWS (10M) rows
#   cluster    1, then 2, then 3 nodes (PERF_CLUSTER_NODES) on one PostgreSQL, each its own
#              agent (--node nK) and HAProxy, one mock for all: the same clients spread
#              evenly over the gateways, unary (req/s) then held streams (events/s), each
#              node count against the first, every node's accounting balanced and exact
#   cluster-limits
#              a key at --rpm 60 --max-concurrent 4 driven through 1 node, then through 3
#              at once, for PERF_CLUSTER_LIMITS_S (180) seconds with slow streams: admitted
#              per minute and in any 60 s, most in flight, decision latency; fails above
#              PERF_RPM_BOUND (123) per 60 s or PERF_CONC_BOUND (4) in flight. Then a
#              team with those limits and PERF_CLUSTER_LIMITS_TEAM (3) keys without any,
#              key i driven through node i: the same clients, figures and bounds, for
#              the team's rows. Then the outage phase: the same key through 2 nodes for
#              PERF_OUTAGE_RUN_S (50) s, PostgreSQL stopped PERF_OUTAGE_S (20) s from
#              PERF_OUTAGE_AT_S (10) s on: admitted and most in flight before, during
#              and after the outage against their bounds (docs/limits.md, "The store
#              lost"); fails above a bound
# Knobs (environment): PERF_<STAGE>_LEVELS, PERF_<STAGE>_SECONDS, PERF_SMOKE_REQUESTS,
# PERF_FRAMES, PERF_FRAME_DELAY_MS, PERF_STREAM_PCT (sustained), PERF_COMPARE_STREAMS,
# PERF_OVERLOAD_QUEUE, PERF_OVERLOAD_LOCK_SECONDS, PERF_CLUSTER_CONNS, PERF_CLUSTER_STREAMS,
# PERF_CLUSTER_LIMITS_CLIENTS, PERF_CLUSTER_LIMITS_FRAMES, PERF_CLUSTER_LIMITS_DELAY_MS,
# PERF_CLUSTER_LIMITS_NODES ("1 3"; empty: none), PERF_CLUSTER_LIMITS_TEAM (3; empty or
# 0: no team run), PERF_CLUSTER_LIMITS_OUTAGE (1; 0: no outage phase), PERF_OUTAGE_*,
# PERF_CLUSTER_LIMITS_PAUSE_MS, TALLY_BUILD (build).
# PERF_STORE=postgres: the agent, tallyctl, queryd and tally-stress use a fresh database
# of a private PostgreSQL cluster (loadtest/pg.sh) per stage instead of a SQLite file;
# the overload stage then locks the requests table instead of the SQLite file. The
# cluster stages always run on PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${TALLY_BUILD:-build}
source scripts/stack.sh
source loadtest/pg.sh
store=${PERF_STORE:-sqlite}
case $store in
  sqlite|postgres) ;;
  *) echo "perf: PERF_STORE is sqlite or postgres, not $store" >&2; exit 2 ;;
esac
pg_root=
pg_dbs=0

frames=${PERF_FRAMES:-100}
delay=${PERF_FRAME_DELAY_MS:-10}
credential=perf-credential
agent_args=()   # extra tally-agent flags for the next perf_up

# perf_pg_db: a fresh database (URL in $db) on the one private PostgreSQL cluster of the
# run, started on first use, and the key secret for it (for the agents and tallyctl).
perf_pg_db() {
  if [ -z "$pg_pid" ]; then
    pg_root=$(mktemp -d /tmp/tally-perf-pg.XXXXXX)
    chmod 711 "$pg_root"
    pg_start "$pg_root/data"
  fi
  pg_dbs=$((pg_dbs + 1))
  pg_sql postgres "CREATE DATABASE perf$pg_dbs"
  db=$(pg_url "perf$pg_dbs")
  export TALLY_SECRET_FILE=$tmp/key.secret
}

# Starts a fresh stack in $tmp: mock, agent, HAProxy as the gateway, tally-queryd with
# a dashboard's calls made once a second (queryd-probe) and, with "plain", a second
# HAProxy without the agent. Sets the *_port, *_pid and key variables.
perf_up() {
  tmp=$(mktemp -d /tmp/tally-perf.XXXXXX)
  stack_pids=()
  mock_port=$(stack_free_port); agent_port=$(stack_free_port); gw_port=$(stack_free_port)
  records_port=$(stack_free_port); plain_port=$(stack_free_port)
  db=$tmp/tally.db
  local store_args=() queryd_args=()
  if [ "$store" = postgres ]; then
    # A URL has no file beside it: the agent's journal and its control socket (which
    # queryd reads) are named.
    perf_pg_db
    store_args=(--secret "$TALLY_SECRET_FILE" --journal "$tmp/agent.journal"
                --control "$tmp/agent.ctl")
    queryd_args=(--control "$tmp/agent.ctl")
  fi
  stack_seed "$db" "$mock_port" >/dev/null
  key=$("$build/tallyctl" --db "$db" key create --name perf --default-model mock-gpt)
  stack_spawn "$build/mock-upstream" --listen "127.0.0.1:$mock_port" --quiet 2>"$tmp/mock.log"
  mock_pid=${stack_pids[-1]}
  stack_spawn "$build/tally-agent" --listen "127.0.0.1:$agent_port" --db "$db" \
    --records "127.0.0.1:$records_port" --metrics off --log-level warn "${store_args[@]}" \
    "${agent_args[@]}" \
    2>"$tmp/agent.log"
  agent_pid=${stack_pids[-1]}
  queryd_port=$(stack_free_port)
  TALLY_OPERATOR_TOKEN=perf-operator stack_spawn "$build/tally-queryd" --db "$db" \
    --listen "127.0.0.1:$queryd_port" --log-level warn "${queryd_args[@]}" 2>"$tmp/queryd.log"
  queryd_pid=${stack_pids[-1]}
  stack_wait_port "$mock_port"; stack_wait_port "$agent_port"; stack_wait_port "$queryd_port"
  printf '%s\n' "hour /api/summary?group=hour" "key /api/summary?group=key" \
    "model /api/summary?group=model" "requests /api/requests?limit=50" "live /api/live" \
    >"$tmp/dashboard"
  TALLY_OPERATOR_TOKEN=perf-operator stack_spawn "$build/queryd-probe" \
    --addr "127.0.0.1:$queryd_port" --interval-ms 1000 --duration-s 86400 \
    <"$tmp/dashboard" >"$tmp/dashboard.out" 2>&1
  stack_haproxy_env "$agent_port" "$mock_port" "$credential" "$records_port" "$db"
  mkdir -p "$tmp/gw" "$tmp/plain"
  TALLY_RUN_DIR=$tmp/gw TALLY_GATEWAY_ADDR=127.0.0.1:$gw_port \
    stack_spawn haproxy -db -f haproxy/tally.cfg -f haproxy/demo.cfg 2>"$tmp/gw.log"
  gw_pid=${stack_pids[-1]}
  stack_wait_port "$gw_port"
  if [ "${1:-}" = plain ]; then
    TALLY_RUN_DIR=$tmp/plain TALLY_GATEWAY_ADDR=127.0.0.1:$plain_port \
      stack_spawn haproxy -db -f haproxy/plain.cfg 2>"$tmp/plain.log"
    plain_pid=${stack_pids[-1]}
    stack_wait_port "$plain_port"
  fi
}

perf_down() {
  stack_stop
  stack_pids=()
  rm -rf "$tmp"
}
trap 'stack_stop; pg_stop; rm -rf "${tmp:-/nonexistent}" ${pg_root:+"$pg_root"} ${cluster_dir:+"$cluster_dir"}' EXIT INT TERM

# "utime+stime ticks rss_kib" of a process.
proc_sample() {
  awk '{printf "%d ", $14 + $15}' "/proc/$1/stat"
  awk '/^VmRSS/ {print $2}' "/proc/$1/status"
}

# perf_run NAME PORTS PIDS -- TALLY-STRESS-ARGS: one run, its JSON per level kept in
# $tmp/NAME.json, and what HAProxy and the agent used meanwhile. Several PORTS (one
# gateway per node) share the run's clients evenly; several keys in $key (K1,K2,...), one
# per PORT, each gateway's clients send their own.
perf_run() {
  local name=$1 ports=$2 pids=$3 before after pid port rc=0 urls=() keyarg=--key
  shift 4
  for port in $ports; do urls+=(--url "http://127.0.0.1:$port"); done
  [[ $key != *,* ]] || keyarg=--keys
  before=$(for pid in $pids; do proc_sample "$pid"; done)
  TALLY_MOCK_CREDENTIAL=$credential "$build/tally-stress" --json \
    "${urls[@]}" --expect-url "http://127.0.0.1:$mock_port" \
    "$keyarg" "$key" "$@" > "$tmp/$name.json" || rc=$?
  after=$(for pid in $pids; do proc_sample "$pid"; done)
  python3 - "$name" "$tmp/$name.json" "$pids" "$before" "$after" <<'PY'
import json, sys
name, path, pids, before, after = sys.argv[1:6]
hz = 100
pids = pids.split()
b = [int(x) for x in before.split()]
a = [int(x) for x in after.split()]
levels = [json.loads(l) for l in open(path) if l.strip()]
print(f"[{name}]")
print(f"{'conns':>6} {'ok':>8} {'req/s':>9} {'events/s':>10} {'MB/s':>7} {'tok/s':>9} "
      f"{'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} {'fb95 ms':>8} {'errors':>7}  accounting")
for l in levels:
    lat = l["latency_ms"]
    acc = l.get("accounting")
    acct = ("-" if acc is None else
            f"accounting {acc['rows']}/{acc['expected']} exact" if acc["exact"] else
            f"accounting {acc['rows']}/{acc['expected']} + dropped {acc['dropped']}: balanced"
            if acc["balanced"] and acc["dropped"] else
            f"accounting {acc['rows']}/{acc['expected']} SHORT")
    print(f"{l['connections']:6d} {l['ok']:8d} {l['requests_per_s']:9.1f} {l['events_per_s']:10.1f} "
          f"{l['bytes_per_s'] / 1e6:7.2f} {l['output_tokens_per_s']:9.1f} {lat['p50']:8.2f} "
          f"{lat['p95']:8.2f} {lat['p99']:8.2f} {lat['max']:8.2f} {l['first_byte_ms']['p95']:8.2f} "
          f"{l['errors']['total']:7d}  {acct}")
    if l["errors"]["total"]:
        kinds = {k: v for k, v in l["errors"].items() if k != "total" and v}
        print(f"{'':6} errors: {json.dumps(kinds)}")
    eu = acc and acc.get("end_users")
    if eu:
        print(f"{'':6} end users {eu['as_sent']}/{eu['rows']} as sent (header {eu['header']}, "
              f"body {eu['body']}, none {eu['none']}), end_user_daily {eu['daily_equal']}/"
              f"{eu['daily_groups']} groups of the rows' sums ({eu['daily_rows']} stored)"
              + ("" if eu["exact"] else " WRONG"))
    tg = acc and acc.get("tags")
    if tg:
        print(f"{'':6} tags {tg['as_sent']}/{tg['rows']} as sent (sets "
              f"{'/'.join(map(str, tg['sets']))}, none {tg['none']}), tag_daily "
              f"{tg['daily_equal']}/{tg['daily_groups']} groups of the rows' sums "
              f"({tg['daily_rows']} stored)" + ("" if tg["exact"] else " WRONG"))
    if l["refused"]:
        print(f"{'':6} refused: {l['refused']}")
    if acc and len(acc["nodes"]) > 1:
        print(f"{'':6} rows by node: " + ", ".join(f"{n['node']} {n['written_level']}"
                                                   for n in acc["nodes"]) +
              f"; every node received = written + dropped: {acc['nodes_balanced']}")
for i, pid in enumerate(pids):
    comm = open(f"/proc/{pid}/comm").read().strip()
    cpu = (a[2 * i] - b[2 * i]) / hz
    print(f"  {comm} (pid {pid}): {cpu:.2f} s CPU, RSS {b[2 * i + 1] // 1024} -> {a[2 * i + 1] // 1024} MiB")
PY
  if [ "$rc" -ne 0 ] && [ -n "${tolerate:-}" ]; then
    echo "perf: $name failed (tally-stress exit $rc): $tolerate" >&2
  elif [ "$rc" -ne 0 ]; then
    echo "perf: $name failed (tally-stress exit $rc): stopping" >&2
    exit 1
  fi
}

stage_smoke() {
  perf_up
  perf_run smoke "$gw_port" "$gw_pid $agent_pid $queryd_pid" -- --levels "${PERF_SMOKE_LEVELS:-1,4}" \
    --requests "${PERF_SMOKE_REQUESTS:-200}" --stream-pct 50 --hostile-pct 20 --frames 5 \
    --forge "127.0.0.1:$records_port" --db "$db"
  perf_down
}

stage_hostile() {
  perf_up
  perf_run hostile "$gw_port" "$gw_pid $agent_pid $queryd_pid" -- --levels "${PERF_HOSTILE_LEVELS:-1,8,32}" \
    --duration "${PERF_HOSTILE_SECONDS:-5}" --stream-pct 30 --hostile-pct 30 --frames 5 \
    --forge "127.0.0.1:$records_port" --db "$db"
  perf_down
}

stage_stress() {
  perf_up
  perf_run stress "$gw_port" "$gw_pid $agent_pid $queryd_pid" -- --levels "${PERF_STRESS_LEVELS:-1,8,32,64}" \
    --duration "${PERF_STRESS_SECONDS:-5}" --body-bytes 1024 --db "$db"
  perf_down
}

# perf_ratio A B FIELD: FIELD of run B over run A, level by level.
perf_ratio() {
  python3 - "$tmp/$1.json" "$tmp/$2.json" "$3" "$1" "$2" <<'PY'
import json, sys
a, b, field, na, nb = sys.argv[1:6]
la = [json.loads(l) for l in open(a) if l.strip()]
lb = [json.loads(l) for l in open(b) if l.strip()]
for x, y in zip(la, lb):
    ratio = f"{y[field] / x[field]:.2f}x" if x[field] else "n/a"
    print(f"  {x['connections']:5d} conns: {nb} / {na} {field} {ratio} "
          f"({y[field]:.1f} / {x[field]:.1f})")
PY
}

stage_streaming() {
  local args=(--levels "${PERF_STREAMING_LEVELS:-1,16,64,256,1024}"
              --duration "${PERF_STREAMING_SECONDS:-5}" --stream-pct 100 --frames "$frames"
              --frame-delay-ms "$delay" --timeout 60)
  perf_up plain
  perf_run streaming-haproxy "$plain_port" "$plain_pid" -- "${args[@]}"
  perf_run streaming-gateway "$gw_port" "$gw_pid $agent_pid $queryd_pid" -- "${args[@]}" --db "$db"
  perf_ratio streaming-haproxy streaming-gateway events_per_s
  perf_down
}

# The writer is stopped by another connection holding the write lock; with a short retry
# it gives batches up (counted dropped) and the small queue overflows (counted dropped).
# --spill-max-mb 0: no row may wait on disk, so what would wait there is dropped and
# counted (tests/integration/test_outage.py covers the rows that wait).
stage_overload() {
  local seconds=${PERF_OVERLOAD_SECONDS:-6} lock=${PERF_OVERLOAD_LOCK_SECONDS:-3}
  agent_args=(--queue-capacity "${PERF_OVERLOAD_QUEUE:-256}" --write-retry-ms 500 --spill-max-mb 0)
  perf_up
  agent_args=()
  if [ "$store" = postgres ]; then
    # The writer's inserts wait on the table lock as they would on SQLite's file lock.
    (sleep 1; psql -X -q -d "$db" -c "BEGIN; LOCK TABLE requests IN ACCESS EXCLUSIVE MODE;
      SELECT pg_sleep($lock); ROLLBACK" >/dev/null) &
  else
    python3 - "$db" "$lock" <<'PY' &
import sqlite3, sys, time
time.sleep(1)
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
con.execute("BEGIN IMMEDIATE")
time.sleep(float(sys.argv[2]))
con.execute("ROLLBACK")
PY
  fi
  stack_pids+=($!)
  perf_run overload "$gw_port" "$gw_pid $agent_pid $queryd_pid" -- --levels "${PERF_OVERLOAD_LEVELS:-16}" \
    --duration "$seconds" --body-bytes 1024 --db "$db" --allow-drops
  python3 - "$tmp/overload.json" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    a = json.loads(l)["accounting"]
    print(f"overload: received {a['received']} = written {a['written']} + dropped "
          f"{a['dropped_total']}: {'balanced' if a['balanced'] else 'UNBALANCED'}")
    if a["dropped"] == 0:
        sys.exit("overload: no row was dropped: the run did not overload the writer")
PY
  perf_down
}

stage_sustained() {
  perf_up
  perf_run sustained "$gw_port" "$gw_pid $agent_pid $queryd_pid" -- --levels "${PERF_SUSTAINED_LEVELS:-32}" \
    --duration "${PERF_SUSTAINED_SECONDS:-120}" --stream-pct "${PERF_STREAM_PCT:-20}" \
    --frames 20 --db "$db"
  perf_down
}

stage_compare() {
  local levels=${PERF_COMPARE_LEVELS:-32} seconds=${PERF_COMPARE_SECONDS:-5}
  perf_up plain
  perf_run compare-upstream "$mock_port" "$mock_pid" -- --levels "$levels" \
    --duration "$seconds" --body-bytes 1024
  perf_run compare-haproxy "$plain_port" "$plain_pid" -- --levels "$levels" \
    --duration "$seconds" --body-bytes 1024
  perf_run compare-gateway "$gw_port" "$gw_pid $agent_pid $queryd_pid" -- --levels "$levels" \
    --duration "$seconds" --body-bytes 1024 --db "$db"
  local peer=(--header "x-portkey-provider: openai"
              --header "x-portkey-custom-host: http://127.0.0.1:$mock_port/v1")
  if [ "${PERF_PEER:-1}" != 0 ]; then
    perf_peer_up
    key=$credential perf_run compare-peer "$peer_port" "$peer_pid" -- --levels "$levels" \
      --duration "$seconds" --body-bytes 1024 "${peer[@]}" \
      --header "x-portkey-forward-headers: x-mock-body-bytes"
  fi
  local streams=${PERF_COMPARE_STREAMS:-256}
  if [ "$streams" != 0 ]; then
    local sargs=(--levels "$streams" --duration "$seconds" --stream-pct 100 --frames "$frames"
                 --frame-delay-ms "$delay" --timeout 60)
    perf_run compare-streams-haproxy "$plain_port" "$plain_pid" -- "${sargs[@]}"
    perf_run compare-streams-gateway "$gw_port" "$gw_pid $agent_pid $queryd_pid" -- "${sargs[@]}" --db "$db"
    perf_ratio compare-streams-haproxy compare-streams-gateway events_per_s
    if [ "${PERF_PEER:-1}" != 0 ]; then
      # The peer's failures are its result, reported, not a failure of this harness.
      tolerate="the peer's own errors, reported above" \
        key=$credential perf_run compare-streams-peer "$peer_port" "$peer_pid" -- "${sargs[@]}" \
        "${peer[@]}" --header "x-portkey-forward-headers: x-mock-frames, x-mock-frame-delay-ms"
      perf_ratio compare-streams-peer compare-streams-gateway events_per_s
    fi
  fi
  python3 - "$tmp" <<'PY'
import json, os, sys
rps = {}
for n in ("upstream", "haproxy", "gateway", "peer"):
    path = f"{sys.argv[1]}/compare-{n}.json"
    if os.path.exists(path):
        rps[n] = json.loads(open(path).readline())["requests_per_s"]
print(f"compare: gateway / plain haproxy {rps['gateway'] / rps['haproxy']:.2f}x, "
      f"plain haproxy / upstream {rps['haproxy'] / rps['upstream']:.2f}x"
      + (f", gateway / peer {rps['gateway'] / rps['peer']:.2f}x" if "peer" in rps else ""))
PY
  perf_down
}

# The peer gateway, pinned in loadtest/peer/package-lock.json, on its own port; it sends
# requests to the mock as an OpenAI-compatible custom host, and forwards the mock's knob
# only when told to (x-portkey-forward-headers).
perf_peer_up() {
  local dir=loadtest/peer
  [ -d "$dir/node_modules/@portkey-ai/gateway" ] ||
    (cd "$dir" && npm ci --no-audit --no-fund >/dev/null)
  peer_port=$(stack_free_port)
  stack_spawn node "$dir/node_modules/@portkey-ai/gateway/build/start-server.js" \
    --port="$peer_port" >"$tmp/peer.log" 2>&1
  peer_pid=${stack_pids[-1]}
  stack_wait_port "$peer_port"
}

stage_bench() {
  make -s "$build/bench-codec" "$build/bench-journal" "$build/bench-writer" \
    "$build/queryd-probe" BUILD="$build"
  "$build/bench-codec"
  "$build/bench-journal"
  BENCH_ROUNDS=${BENCH_ROUNDS:-1} BUILD=$build STORE=$store bash loadtest/bench-writer.sh
  BUILD=$build STORE=$store BENCH_ROWS=${PERF_QUERYD_ROWS:-10000000} bash loadtest/bench-queryd.sh
}

# cluster_up N [KEY-ARGS...]: N nodes n1..nN on a fresh database of the private
# PostgreSQL: one mock upstream for all; per node an agent (--node nK, its own records
# and metrics ports, journal and control socket) and an HAProxy gateway. The key
# ($key) is created with KEY-ARGS; with --team first, the team "perf" is created with
# the rest and N keys perf-1..perf-N without limits in it ($key: theirs, K1,K2,...).
# Sets gw_ports, metrics_ports and node_pids (every HAProxy and agent).
cluster_up() {
  local n=$1 i agent records gw metrics
  shift
  tmp=$(mktemp -d /tmp/tally-perf.XXXXXX)
  stack_pids=()
  perf_pg_db
  mock_port=$(stack_free_port)
  stack_seed "$db" "$mock_port" >/dev/null
  if [ "${1:-}" = --team ]; then
    shift
    cluster_team "$n" "$@"
  else
    key=$("$build/tallyctl" --db "$db" key create --name perf --default-model mock-gpt "$@")
  fi
  stack_spawn "$build/mock-upstream" --listen "127.0.0.1:$mock_port" --quiet 2>"$tmp/mock.log"
  stack_wait_port "$mock_port"
  gw_ports=(); metrics_ports=(); node_pids=()
  for i in $(seq "$n"); do
    agent=$(stack_free_port); records=$(stack_free_port); gw=$(stack_free_port)
    metrics=$(stack_free_port)
    mkdir -p "$tmp/n$i"
    stack_spawn "$build/tally-agent" --listen "127.0.0.1:$agent" --db "$db" --node "n$i" \
      --records "127.0.0.1:$records" --metrics "127.0.0.1:$metrics" --log-level warn \
      --secret "$TALLY_SECRET_FILE" --journal "$tmp/n$i/journal" \
      --control "$tmp/n$i/agent.ctl" 2>"$tmp/n$i/agent.log"
    node_pids+=("${stack_pids[-1]}")
    stack_wait_port "$agent"
    stack_haproxy_env "$agent" "$mock_port" "$credential" "$records" "$db"
    TALLY_RUN_DIR=$tmp/n$i TALLY_GATEWAY_ADDR=127.0.0.1:$gw \
      stack_spawn haproxy -db -f haproxy/tally.cfg -f haproxy/demo.cfg 2>"$tmp/n$i/gw.log"
    node_pids+=("${stack_pids[-1]}")
    stack_wait_port "$gw"
    gw_ports+=("$gw"); metrics_ports+=("$metrics")
  done
}

# cluster_team N LIMITS: the team "perf" with LIMITS (--rpm 60 --max-concurrent 4) and N
# member keys perf-1..perf-N without limits of their own; $key holds theirs, K1,K2,...
cluster_team() {
  local n=$1 i keys=()
  shift
  "$build/tallyctl" --db "$db" team create perf "$@" >/dev/null
  for i in $(seq "$n"); do
    keys+=("$("$build/tallyctl" --db "$db" key create --name "perf-$i" --team perf \
      --default-model mock-gpt)")
  done
  key=$(IFS=,; echo "${keys[*]}")
}

# cluster_scrape FILE: every agent's /metrics, one after another.
cluster_scrape() {
  local port
  for port in "${metrics_ports[@]}"; do
    curl -fsS "http://127.0.0.1:$port/metrics"
  done >"$1"
}

# Results of the cluster stages outlive each node count's stack: kept here until exit.
cluster_out() {
  [ -n "${cluster_dir:-}" ] || cluster_dir=$(mktemp -d /tmp/tally-perf-cluster.XXXXXX)
}

# cluster_failures: the rows of answers the gateway failed (5xx), by how they ended.
cluster_failures() {
  pg_sql "${db##*/}" "SELECT 'failed: ' || count(*) || ' x status ' || status || ', verdict '
    || coalesce(verdict, '-') || ', outcome ' || outcome || ', termination '
    || coalesce(termination, '-') FROM requests WHERE status >= 500
    GROUP BY status, verdict, outcome, termination"
}

# A run with errors or inexact accounting is reported beside the others (with its failed
# rows), then fails the stage.
stage_cluster() {
  local nodes=${PERF_CLUSTER_NODES:-1 2 3} seconds=${PERF_CLUSTER_SECONDS:-10} n
  cluster_out
  for n in $nodes; do
    cluster_up "$n"
    cluster_scrape "$cluster_dir/metrics-unary-$n.before"
    tolerate="reported with the others" perf_run "cluster-$n-unary" "${gw_ports[*]}" \
      "${node_pids[*]}" -- --levels "${PERF_CLUSTER_CONNS:-48}" --duration "$seconds" \
      --body-bytes 1024 --db "$db"
    cluster_scrape "$cluster_dir/metrics-unary-$n.after"
    tolerate="reported with the others" perf_run "cluster-$n-streams" "${gw_ports[*]}" \
      "${node_pids[*]}" -- --levels "${PERF_CLUSTER_STREAMS:-120}" --duration "$seconds" \
      --stream-pct 100 --frames "$frames" --frame-delay-ms "$delay" --timeout 60 --db "$db"
    cluster_failures
    cp "$tmp/cluster-$n-unary.json" "$tmp/cluster-$n-streams.json" "$cluster_dir/"
    perf_down
  done
  # shellcheck disable=SC2086  # the node counts, one argument each
  python3 loadtest/cluster-report.py scale "$cluster_dir" $nodes ||
    { echo "perf: cluster: a run had errors or inexact accounting: stopping" >&2; exit 1; }
}

# The outage phase of cluster-limits: 2 nodes, the clients of the other runs with 1 s
# streams, PostgreSQL stopped (by PID) in the middle of the run and started again on its
# port; the rows, journaled meanwhile, tell each phase's admissions once it answers
# again, the mock's streams sampled every 50 ms its most in flight.
cluster_outage() {
  local run_s=${PERF_OUTAGE_RUN_S:-50} at=${PERF_OUTAGE_AT_S:-10} len=${PERF_OUTAGE_S:-20}
  local run sampler t_stop t_start rc=0
  cluster_up 2 --rpm 60 --max-concurrent 4
  tolerate="reported with the phases" perf_run "limits-outage" "${gw_ports[*]}" \
    "${node_pids[*]}" -- \
    --levels "${PERF_CLUSTER_LIMITS_CLIENTS:-24}" --duration "$run_s" --stream-pct 100 \
    --frames 10 --frame-delay-ms 100 --timeout 60 --refused-status 429 \
    --refused-pause-ms "${PERF_CLUSTER_LIMITS_PAUSE_MS:-200}" --keepalive 0 &
  run=$!
  # The mock's streams in flight every 50 ms, "unix-ms count": each phase's most.
  while kill -0 "$run" 2>/dev/null; do
    echo "$(date +%s%3N) $(curl -fsS "http://127.0.0.1:$mock_port/_mock/stats" |
      grep -o '"answering":[0-9]*' | cut -d: -f2)"
    sleep 0.05
  done >"$cluster_dir/outage-in-flight.txt" &
  sampler=$!
  sleep "$at"
  t_stop=$(date +%s%3N)
  pg_stop
  sleep "$len"
  pg_restart
  t_start=$(date +%s%3N)
  wait "$run" || rc=$?
  wait "$sampler"
  curl -fsS "http://127.0.0.1:$mock_port/_mock/stats" >"$cluster_dir/mock-limits-outage.json"
  python3 loadtest/cluster-report.py outage "$cluster_dir" 2 "$db" perf "$t_stop" "$t_start" ||
    rc=$?
  perf_down
  return "$rc"
}

# cluster_limits_run RUN N LEVEL [CLUSTER-UP-ARGS...]: one limits run through N nodes, its
# files named by RUN, reported for LEVEL (key or team) "perf". Slow streams
# (PERF_CLUSTER_LIMITS_FRAMES frames DELAY_MS apart, 3 s) hold their concurrency slot long
# enough that 4 at once stay busy; refused clients back off PAUSE_MS and ask again, on a
# new connection each time: HAProxy's start time of a request on a kept-alive connection
# is when the connection went idle, which would shift the rows' spans.
cluster_limits_run() {
  local run=$1 n=$2 level=$3
  shift 3
  cluster_up "$n" "$@"
  cluster_scrape "$cluster_dir/metrics-limits-$run.before"
  perf_run "limits-$run" "${gw_ports[*]}" "${node_pids[*]}" -- \
    --levels "${PERF_CLUSTER_LIMITS_CLIENTS:-24}" --duration "${PERF_CLUSTER_LIMITS_S:-180}" \
    --stream-pct 100 --frames "${PERF_CLUSTER_LIMITS_FRAMES:-30}" \
    --frame-delay-ms "${PERF_CLUSTER_LIMITS_DELAY_MS:-100}" --timeout 60 \
    --refused-status 429 --refused-pause-ms "${PERF_CLUSTER_LIMITS_PAUSE_MS:-200}" \
    --keepalive 0 --db "$db"
  cluster_scrape "$cluster_dir/metrics-limits-$run.after"
  curl -fsS "http://127.0.0.1:$mock_port/_mock/stats" >"$cluster_dir/mock-limits-$run.json"
  cp "$tmp/limits-$run.json" "$cluster_dir/"
  python3 loadtest/cluster-report.py limits "$cluster_dir" "$run" "$n" "$db" "$level" perf
  perf_down
}

# The same clients through 1 gateway, then through 3, on a key with the limits; then on
# a team with them, each of its keys through a node of its own; then the outage phase.
stage_cluster-limits() {
  local nodes=${PERF_CLUSTER_LIMITS_NODES-1 3} team=${PERF_CLUSTER_LIMITS_TEAM-3} limits=(--rpm 60 --max-concurrent 4) n rc=0 runs=()
  cluster_out
  for n in $nodes; do
    cluster_limits_run "$n" "$n" key "${limits[@]}"
    runs+=("$n")
  done
  if [ -n "$team" ] && [ "$team" != 0 ]; then
    cluster_limits_run "team-$team" "$team" team --team "${limits[@]}"
    runs+=("team-$team")
  fi
  if [ ${#runs[@]} -gt 0 ]; then
    python3 loadtest/cluster-report.py verdict "$cluster_dir" "${runs[@]}" || rc=$?
  fi
  if [ "${PERF_CLUSTER_LIMITS_OUTAGE:-1}" != 0 ]; then
    cluster_outage || rc=$?
  fi
  if [ "$rc" -ne 0 ]; then
    echo "perf: cluster-limits: a limit was exceeded beyond its bound: stopping" >&2
    exit 1
  fi
}

[ $# -gt 0 ] || { echo "usage: loadtest/perf.sh smoke|hostile|stress|streaming|sustained|overload|compare|bench|cluster|cluster-limits ..." >&2; exit 2; }
for stage in "$@"; do
  case $stage in
    smoke|stress|hostile|streaming|sustained|overload|compare|bench|cluster|cluster-limits) "stage_$stage" ;;
    *) echo "perf: unknown stage '$stage'" >&2; exit 2 ;;
  esac
done
