#!/usr/bin/env bash
# make bench-decision: unary 1 KB chat completions through (a) the mock upstream
# directly, (b) plain HAProxy (haproxy/plain.cfg: a reverse proxy with no rule of
# tally's) and (c) the tally gateway with the agent deciding every request, in
# one run, and (d) the same gateway behind an operator's own frontend as
# docs/haproxy-integration.md adds it (scripts/lift.py: the operator's frontend hands
# /v1/ to tally's over an abstract socket), interleaved in rounds so that a noisy machine
# hurts all alike.
# Prints req/s and latency per target (median over rounds) and the ratios.
#
# BENCH_LONG=1 sends a long prompt instead (BENCH_LONG_BYTES, 40000, in the OpenAI
# Python SDK's order, a stream of 10 frames) and adds (e) a gateway whose agent judges
# such bodies on their first frame (--long-body-memory 0): on HAProxy 3.4 the gateway
# sends the whole body in pieces first, and gateway / first-frame is what that costs.
#
# Knobs: BENCH_SECONDS (per round, 5), BENCH_ROUNDS (3), BENCH_CONNECTIONS (32),
# BENCH_THREADS (wrk threads, 1), BENCH_AGENT_THREADS (agent I/O threads, 2),
# BENCH_BODY_BYTES (1024), HAPROXY (as for make test), TALLY_BUILD (build).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${TALLY_BUILD:-build}
seconds=${BENCH_SECONDS:-5}
rounds=${BENCH_ROUNDS:-3}
conns=${BENCH_CONNECTIONS:-32}
threads=${BENCH_THREADS:-1}
export BENCH_BODY_BYTES=${BENCH_BODY_BYTES:-1024}
source scripts/stack.sh

stack_scratch

mock_port=$(stack_free_port); agent_port=$(stack_free_port); gw_port=$(stack_free_port); plain_port=$(stack_free_port)
records_port=$(stack_free_port)
long=${BENCH_LONG:-0}
db=$tmp/tally.db
stack_seed "$db" "$mock_port" >/dev/null
export TALLY_KEY=$("$build/tallyctl" --db "$db" key create --name bench --default-model mock-gpt)

stack_spawn "$build/mock-upstream" --listen "127.0.0.1:$mock_port" --quiet 2>"$tmp/mock.log"
stack_spawn "$build/tally-agent" --listen "127.0.0.1:$agent_port" --db "$db" \
  --records "127.0.0.1:$records_port" --metrics off \
  --threads "${BENCH_AGENT_THREADS:-2}" --log-level warn 2>"$tmp/agent.log"
stack_wait_port "$mock_port"; stack_wait_port "$agent_port"
if [ "$long" = 1 ]; then
  prefix_agent_port=$(stack_free_port); prefix_records_port=$(stack_free_port); prefix_port=$(stack_free_port)
  stack_spawn "$build/tally-agent" --listen "127.0.0.1:$prefix_agent_port" --db "$db" \
    --records "127.0.0.1:$prefix_records_port" --metrics off --control "$tmp/prefix.ctl" \
    --journal "$tmp/prefix.journal" --long-body-memory 0 \
    --threads "${BENCH_AGENT_THREADS:-2}" --log-level warn 2>"$tmp/prefix-agent.log"
  stack_wait_port "$prefix_agent_port"
fi

export TALLY_FAIL_POLICY=closed   # the bench measures deciding, never failing open
stack_haproxy_env "$agent_port" "$mock_port" bench-credential "$records_port" "$db"
mkdir -p "$tmp/gw" "$tmp/plain"
TALLY_RUN_DIR=$tmp/gw TALLY_GATEWAY_ADDR=127.0.0.1:$gw_port \
  stack_spawn haproxy -db -f haproxy/tally.cfg -f haproxy/demo.cfg 2>"$tmp/gw.log"
TALLY_RUN_DIR=$tmp/plain TALLY_GATEWAY_ADDR=127.0.0.1:$plain_port \
  stack_spawn haproxy -db -f haproxy/plain.cfg 2>"$tmp/plain.log"
stack_wait_port "$gw_port"; stack_wait_port "$plain_port"
# (d): the operator's file first, so its global section's nbthread is the one.
lifted_port=$(stack_free_port)
python3 scripts/lift.py > "$tmp/operator.cfg"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -keyout "$tmp/op.key" \
  -out "$tmp/op.crt" 2>/dev/null
cat "$tmp/op.crt" "$tmp/op.key" > "$tmp/op.pem"
mkdir -p "$tmp/lifted"
(unset TALLY_NBTHREAD
 TALLY_RUN_DIR=$tmp/lifted TALLY_GATEWAY_ADDR=abns@tally-bench-$lifted_port \
 OP_HTTP_ADDR=127.0.0.1:$lifted_port OP_TLS_ADDR=127.0.0.1:$(stack_free_port) \
 OP_TLS_CERT=$tmp/op.pem OP_RUN_DIR=$tmp/lifted \
   exec $stack_haproxy -db -f "$tmp/operator.cfg" -f haproxy/tally.cfg -f haproxy/demo.cfg) \
  2>"$tmp/lifted.log" &
stack_pids+=($!)
stack_wait_port "$lifted_port"
if [ "$long" = 1 ]; then
  mkdir -p "$tmp/prefix"
  TALLY_AGENT_ADDR=127.0.0.1:$prefix_agent_port TALLY_RECORDS_ADDR=127.0.0.1:$prefix_records_port \
  TALLY_RUN_DIR=$tmp/prefix TALLY_GATEWAY_ADDR=127.0.0.1:$prefix_port \
    stack_spawn haproxy -db -f haproxy/tally.cfg -f haproxy/demo.cfg 2>"$tmp/prefix.log"
  stack_wait_port "$prefix_port"
fi

# The gateway must actually be deciding: a wrong key is refused, the right one passes.
for port in "$gw_port" "$lifted_port"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' \
    -d '{"model":"mock-gpt"}' "http://127.0.0.1:$port/v1/chat/completions")
  [ "$code" = 401 ] || { echo "bench: gateway :$port did not refuse a bad key ($code)" >&2; exit 1; }
done

run() { # name port
  local out
  out=$(wrk -t"$threads" -c"$conns" -d"${seconds}s" --timeout 5s -s loadtest/bench-decision.lua \
        "http://127.0.0.1:$2/v1/chat/completions" | grep '^RESULT')
  case $out in *" errors=0 "*) ;; *) echo "bench: $1 had errors: $out" >&2; exit 1 ;; esac
  echo "$1 $out" >> "$tmp/results"
}

what="${BENCH_BODY_BYTES}-byte responses"
[ "$long" = 1 ] && what="${BENCH_LONG_BYTES:-40000}-byte prompts, model last, 10-frame streams"
echo "bench-decision: ${rounds} rounds x ${seconds}s per target, $conns connections, $what, $($stack_haproxy -v | head -1 | cut -d' ' -f1-3), $(nproc) cores"
for r in $(seq "$rounds"); do
  run upstream "$mock_port"
  run haproxy "$plain_port"
  run gateway "$gw_port"
  run lifted "$lifted_port"
  [ "$long" = 1 ] && run first-frame "$prefix_port"
done

python3 - "$tmp/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, _, *kv = line.split()
    rows.setdefault(name, []).append({k: float(v) for k, v in (x.split("=") for x in kv)})
med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rows.items()}
print(f"{'target':10} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8}   (median of {len(rows['gateway'])} rounds)")
for n in ("upstream", "haproxy", "gateway", "lifted", "first-frame"):
    if n not in med:
        continue
    m = med[n]
    print(f"{n:10} {m['rps']:10.0f} {m['p50_ms']:8.3f} {m['p99_ms']:8.3f}")
g, h, u = med["gateway"], med["haproxy"], med["upstream"]
target = "" if "first-frame" in med else " (target >= 0.70x)"
print(f"gateway / plain haproxy throughput: {g['rps'] / h['rps']:.2f}x{target}")
print(f"plain haproxy / upstream throughput: {h['rps'] / u['rps']:.2f}x")
print(f"gateway added p50 latency over plain haproxy: {g['p50_ms'] - h['p50_ms']:+.3f} ms")
lf = med["lifted"]
print(f"behind the operator's frontend / standalone gateway throughput: {lf['rps'] / g['rps']:.2f}x, "
      f"{lf['p50_ms'] - g['p50_ms']:+.3f} ms p50")
if "first-frame" in med:
    f = med["first-frame"]
    print(f"gateway judging whole / judging the first frame: {g['rps'] / f['rps']:.2f}x throughput, "
          f"{g['p50_ms'] - f['p50_ms']:+.3f} ms p50")
PY
