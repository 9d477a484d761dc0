#!/usr/bin/env bash
# make bench-accounting: plain HAProxy vs the full gateway with accounting, in one run,
# interleaved rounds: unary 1 KB responses (BENCH_CONNECTIONS, 32) to requests that bound
# max_tokens (json_query reads their usage), the same without a bound ("unbounded": the
# capture filter reads it), 40 KB prompts streamed without asking for usage ("long": the
# capture filter reads the body past what the agent saw and amends it), and SSE streams of
# BENCH_FRAMES (100) frames BENCH_FRAME_DELAY_MS (10) apart at BENCH_STREAMS (256)
# concurrent streams. Prints req/s, events/s, p50/p99, HAProxy CPU per request and the
# ratios, then the count check: 2xx responses HAProxy counted on the gateway frontend = 2xx
# rows, and received = written + dropped with dropped = 0.
#
# Knobs: BENCH_SECONDS (5), BENCH_ROUNDS (3), BENCH_CONNECTIONS, BENCH_STREAMS,
# BENCH_FRAMES, BENCH_FRAME_DELAY_MS, BENCH_AGENT_THREADS (2),
# BENCH_MODES ("unary limited unbounded long sse"),
# TALLY_BUILD (build).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${TALLY_BUILD:-build}
seconds=${BENCH_SECONDS:-5}
rounds=${BENCH_ROUNDS:-3}
conns=${BENCH_CONNECTIONS:-32}
streams=${BENCH_STREAMS:-256}
frames=${BENCH_FRAMES:-100}
export BENCH_FRAME_DELAY_MS=${BENCH_FRAME_DELAY_MS:-10}
source scripts/stack.sh

stack_scratch

mock_port=$(stack_free_port); agent_port=$(stack_free_port); gw_port=$(stack_free_port); plain_port=$(stack_free_port)
records_port=$(stack_free_port); metrics_port=$(stack_free_port)
db=$tmp/tally.db
stack_seed "$db" "$mock_port" >/dev/null
export TALLY_KEY=$("$build/tallyctl" --db "$db" key create --name bench --default-model mock-gpt)
# Every limit on, none ever reached: what enforcing them costs.
limited_key=$("$build/tallyctl" --db "$db" key create --name bench-limited \
  --default-model mock-gpt --rpm 1000000000 --tpm 1000000000000 --max-concurrent 100000 \
  --budget-usd 1000000000 --budget-period day)

stack_spawn "$build/mock-upstream" --listen "127.0.0.1:$mock_port" --quiet 2>"$tmp/mock.log"
stack_spawn "$build/tally-agent" --listen "127.0.0.1:$agent_port" --db "$db" \
  --records "127.0.0.1:$records_port" --metrics "127.0.0.1:$metrics_port" \
  --threads "${BENCH_AGENT_THREADS:-2}" --log-level warn 2>"$tmp/agent.log"
agent_pid=${stack_pids[-1]}
stack_wait_port "$mock_port"; stack_wait_port "$agent_port"

export TALLY_FAIL_POLICY=closed
stack_haproxy_env "$agent_port" "$mock_port" bench-credential "$records_port" "$db"
mkdir -p "$tmp/gw" "$tmp/plain"
TALLY_RUN_DIR=$tmp/gw TALLY_GATEWAY_ADDR=127.0.0.1:$gw_port \
  stack_spawn haproxy -db -f haproxy/haproxy.cfg 2>"$tmp/gw.log"
gw_pid=${stack_pids[-1]}
TALLY_PLAIN=1 TALLY_RUN_DIR=$tmp/plain TALLY_GATEWAY_ADDR=127.0.0.1:$plain_port \
  stack_spawn haproxy -db -f haproxy/haproxy.cfg 2>"$tmp/plain.log"
plain_pid=${stack_pids[-1]}
stack_wait_port "$gw_port"; stack_wait_port "$plain_port"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The agent's decision latency histogram: "sum_seconds count".
decisions() {
  curl -s "http://127.0.0.1:$metrics_port/metrics" |
    awk '/^tally_decision_seconds_sum/ {s = $2} /^tally_decision_seconds_count/ {c = $2}
         END {print s, c}'
}

run() { # name port pid mode
  local out t0 t1 a0 a1 d0 d1 dus key=$TALLY_KEY
  [ "$4" = limited ] && key=$limited_key
  t0=$(cpu_ticks "$3"); a0=$(cpu_ticks "$agent_pid"); d0=$(decisions)
  if [ "$4" = sse ]; then
    out=$(BENCH_FRAMES=$frames wrk -t1 -c"$streams" -d"${seconds}s" --timeout 30s \
          -s loadtest/bench-decision.lua "http://127.0.0.1:$2/v1/chat/completions" | grep '^RESULT')
  else
    out=$(TALLY_KEY=$key BENCH_UNBOUNDED=$([ "$4" = unbounded ] && echo 1 || echo 0) \
          BENCH_LONG=$([ "$4" = long ] && echo 1 || echo 0) wrk -t1 -c"$conns" -d"${seconds}s" --timeout 5s -s loadtest/bench-decision.lua \
          "http://127.0.0.1:$2/v1/chat/completions" | grep '^RESULT')
  fi
  t1=$(cpu_ticks "$3"); a1=$(cpu_ticks "$agent_pid"); d1=$(decisions)
  case $out in *" errors=0 "*) ;; *) echo "bench: $1 $4 had errors: $out" >&2; exit 1 ;; esac
  dus=$(awk -v a="$d0" -v b="$d1" 'BEGIN {split(a, x, " "); split(b, y, " "); n = y[2] - x[2];
                                          printf "%.3f", (n > 0 ? (y[1] - x[1]) / n * 1e6 : 0)}')
  echo "$1-$4 $out cpu_ticks=$((t1 - t0)) agent_ticks=$((a1 - a0)) decision_us=$dus" >> "$tmp/results"
}

echo "bench-accounting: ${rounds} rounds x ${seconds}s; unary 1 KB at $conns connections;" \
     "SSE $frames frames x ${BENCH_FRAME_DELAY_MS} ms at $streams streams; $(nproc) cores"
for r in $(seq "$rounds"); do
  for mode in ${BENCH_MODES:-unary limited unbounded long sse}; do
    # "limited" is the unary run again with a key whose every limit is on.
    [ "$mode" = limited ] || run haproxy "$plain_port" "$plain_pid" "$mode"
    run gateway "$gw_port" "$gw_pid" "$mode"
  done
done

# The count check. HAProxy's own count of 2xx responses its gateway frontend sent (show
# stat, hrsp_2xx) against the rows with a 2xx status (HAProxy also counts a 400 for a
# connection closed before it sent a byte, which dontlognull keeps out of the log), and
# received = written + dropped with dropped = 0.
haproxy_resp=$(python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"show stat\n")
out = b""
while (c := s.recv(65536)): out += c
lines = out.decode().splitlines(); head = lines[0].lstrip("# ").split(",")
for l in lines[1:]:
    r = dict(zip(head, l.split(",")))
    if r.get("pxname") == "gateway" and r.get("svname") == "FRONTEND":
        print(r["hrsp_2xx"])
' "$tmp/gw/haproxy.sock")
for _ in $(seq 100); do
  read -r received written dropped rows_status rows_nostatus <<<"$(sqlite3 -separator ' ' "$db" \
    'SELECT received, written, dropped, (SELECT count(*) FROM requests WHERE status BETWEEN 200 AND 299),
            (SELECT count(*) FROM requests WHERE status NOT BETWEEN 200 AND 299 OR status IS NULL)
     FROM accounting')"
  [ "$received" = $((written + dropped)) ] && [ "$rows_status" -ge "$haproxy_resp" ] && break
  sleep 0.2
done

python3 - "$tmp/results" "$frames" "$haproxy_resp" "$rows_status" "$rows_nostatus" "$received" \
  "$written" "$dropped" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, _, *kv = line.split()
    rows.setdefault(name, []).append({k: float(v) for k, v in (x.split("=") for x in kv)})
med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rows.items()}
if any(m["requests"] == 0 for m in med.values()):
    sys.exit("bench: a run completed no request (raise BENCH_SECONDS above the stream length)")
frames = int(sys.argv[2])
hz = 100  # USER_HZ: /proc/PID/stat counts CPU in 1/100 s
print(f"{'target':17} {'req/s':>9} {'events/s':>10} {'p50 ms':>9} {'p99 ms':>9} "
      f"{'HAProxy CPU us/req':>19} {'agent CPU us/req':>17} {'decision us':>12}")
for n in ("haproxy-unary", "gateway-unary", "gateway-limited", "haproxy-unbounded",
          "gateway-unbounded", "haproxy-long", "gateway-long", "haproxy-sse", "gateway-sse"):
    if n not in med:
        continue
    m = med[n]
    ev = m["rps"] * frames if n.endswith("sse") else 0
    cpu, agent = (m[k] / hz / m["requests"] * 1e6 for k in ("cpu_ticks", "agent_ticks"))
    gw = n.startswith("gateway")
    print(f"{n:17} {m['rps']:9.0f} {ev:10.0f} {m['p50_ms']:9.3f} {m['p99_ms']:9.3f} "
          f"{cpu:19.1f} {agent if gw else 0:17.1f} {m['decision_us'] if gw else 0:12.3f}")
for mode, what, target in (("unary", "req/s", 0.5), ("unbounded", "req/s", 0.0),
                           ("long", "req/s", 0.0), ("sse", "events/s", 0.9)):
    if f"gateway-{mode}" in med:
        ratio = med[f"gateway-{mode}"]["rps"] / med[f"haproxy-{mode}"]["rps"]
        goal = f" (target >= {target:.2f}x)" if target else ""
        print(f"{mode}: gateway / plain haproxy {what} {ratio:.2f}x{goal}")
if "gateway-limited" in med:
    on, off = med["gateway-limited"], med["gateway-unary"]
    print(f"limits: gateway unary with every limit on / without {on['rps'] / off['rps']:.2f}x "
          f"(target >= 0.95x); decision {on['decision_us']:.3f} us vs {off['decision_us']:.3f} us")
resp, rows_status, rows_nostatus, received, written, dropped = (int(x) for x in sys.argv[3:9])
ok = resp == rows_status and received == written + dropped and dropped == 0
print(f"count check: HAProxy 2xx responses {resp} = 2xx rows {rows_status} "
      f"(+ {rows_nostatus} other rows); received {received} = written {written} "
      f"+ dropped {dropped}: {'exact' if ok else 'MISMATCH'}")
sys.exit(0 if ok else 1)
PY
