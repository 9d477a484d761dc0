#!/usr/bin/env bash
# make bench-decision: unary 1 KB chat completions through (a) the mock upstream
# directly, (b) plain HAProxy (haproxy/plain.cfg: a reverse proxy with no rule of
# tally's) and (c) the tally gateway with the agent deciding every request, in
# one run, and (d) the same gateway behind an operator's own frontend as
# docs/haproxy-integration.md adds it (scripts/lift.py: the operator's frontend hands
# /v1/ to tally's over an abstract socket), interleaved in rounds so that a noisy machine
# hurts all alike. (e) "end-user" is the gateway again, every request naming an end user
# by the X-Tally-User header (BENCH_END_USER, a 40-byte id). (f) "tagged" is the gateway
# with every request carrying three tags by X-Tally-Tags (BENCH_TAGS), one of them with a
# budget and fixed on its key (bench-tagged: a reservation and a settlement per request).
# (g) "end-user-limited" names the end user too, on a key whose end users have an rpm
# and a budget (bench-eu: an HMAC, a reservation and a settlement per request).
# (h) "model-budget" is the gateway on a key with budgets for three models, one of them
# the one asked for (bench-mb: the names compared, a reservation and a settlement per
# request). (i) "budget" is the gateway on a key with a day budget, (j) "zoned-budget" on
# one whose day is America/New_York's (--budget-tz: the period's start found in the zone's
# transitions on every admission). For the gateways it also
# reads, per request, HAProxy's and the agent's CPU (/proc/PID/stat) and the agent's
# decision latency (tally_decision_seconds' sum over its count, from /metrics).
# Prints req/s and latency per target (median over rounds) and the ratios.
#
# BENCH_BEFORE=DIR adds "before": the gateway of another checkout DIR (its
# build/tally-agent, built, and its haproxy/ files) on the same database, key and mock,
# sent what the gateway is sent: DIR at an earlier commit measures what came since.
#
# BENCH_LONG=1 sends a long prompt instead (BENCH_LONG_BYTES, 40000, in the OpenAI
# Python SDK's order, a stream of 10 frames) and adds (e) a gateway whose agent judges
# such bodies on their first frame (--long-body-memory 0): on HAProxy 3.4 the gateway
# sends the whole body in pieces first, and gateway / first-frame is what that costs.
#
# Knobs: BENCH_SECONDS (per round, 5), BENCH_ROUNDS (3), BENCH_CONNECTIONS (32),
# BENCH_THREADS (wrk threads, 1), BENCH_AGENT_THREADS (agent I/O threads, 2),
# BENCH_BODY_BYTES (1024), BENCH_END_USER, BENCH_TAGS, BENCH_BEFORE, HAPROXY (as for make test),
# TALLY_BUILD (build).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${TALLY_BUILD:-build}
seconds=${BENCH_SECONDS:-5}
rounds=${BENCH_ROUNDS:-3}
conns=${BENCH_CONNECTIONS:-32}
threads=${BENCH_THREADS:-1}
export BENCH_BODY_BYTES=${BENCH_BODY_BYTES:-1024}
end_user=${BENCH_END_USER:-user-7f3e9a2c-41d8-4b6e-9f0a-3c5d2e8b1a47}
tags=${BENCH_TAGS:-feature=search, env=prod, project=atlas}
before=${BENCH_BEFORE:-}
[ -z "$before" ] || [ -x "$before/build/tally-agent" ] ||
  { echo "bench: $before/build/tally-agent is not built" >&2; exit 1; }
source scripts/stack.sh

stack_scratch

mock_port=$(stack_free_port); agent_port=$(stack_free_port); gw_port=$(stack_free_port); plain_port=$(stack_free_port)
records_port=$(stack_free_port); metrics_port=$(stack_free_port)
long=${BENCH_LONG:-0}
db=$tmp/tally.db
stack_seed "$db" "$mock_port" >/dev/null
export TALLY_KEY=$("$build/tallyctl" --db "$db" key create --name bench --default-model mock-gpt)
"$build/tallyctl" --db "$db" tag set project=atlas --budget-usd 1000000000 > /dev/null
tagged_key=$("$build/tallyctl" --db "$db" key create --name bench-tagged --default-model mock-gpt \
  --tags project=atlas)
eu_key=$("$build/tallyctl" --db "$db" key create --name bench-eu --default-model mock-gpt)
"$build/tallyctl" --db "$db" enduser set --key bench-eu --rpm 1000000000000 \
  --budget-usd 1000000000 > /dev/null
mb_key=$("$build/tallyctl" --db "$db" key create --name bench-mb --default-model mock-gpt)
"$build/tallyctl" --db "$db" model set mock-gpt-2 --provider mock-openai --input-micros 1 > /dev/null
"$build/tallyctl" --db "$db" model set mock-gpt-3 --provider mock-openai --input-micros 1 > /dev/null
bud_key=$("$build/tallyctl" --db "$db" key create --name bench-bud --default-model mock-gpt \
  --budget-usd 1000000000 --budget-period day)
tz_key=$("$build/tallyctl" --db "$db" key create --name bench-tz --default-model mock-gpt \
  --budget-usd 1000000000 --budget-period day --budget-tz America/New_York)
for m in mock-gpt-2 mock-gpt mock-gpt-3; do
  "$build/tallyctl" --db "$db" modelbudget set "$m" --key bench-mb --budget-usd 1000000000 > /dev/null
done

stack_spawn "$build/mock-upstream" --listen "127.0.0.1:$mock_port" --quiet 2>"$tmp/mock.log"
stack_spawn "$build/tally-agent" --listen "127.0.0.1:$agent_port" --db "$db" \
  --records "127.0.0.1:$records_port" --metrics "127.0.0.1:$metrics_port" \
  --threads "${BENCH_AGENT_THREADS:-2}" --log-level warn 2>"$tmp/agent.log"
agent_pid=${stack_pids[-1]}
stack_wait_port "$mock_port"; stack_wait_port "$agent_port"
if [ -n "$before" ]; then
  before_agent_port=$(stack_free_port); before_records_port=$(stack_free_port)
  before_metrics_port=$(stack_free_port); before_port=$(stack_free_port)
  stack_spawn "$before/build/tally-agent" --listen "127.0.0.1:$before_agent_port" --db "$db" \
    --node before --records "127.0.0.1:$before_records_port" \
    --metrics "127.0.0.1:$before_metrics_port" --control "$tmp/before.ctl" \
    --journal "$tmp/before.journal" \
    --threads "${BENCH_AGENT_THREADS:-2}" --log-level warn 2>"$tmp/before-agent.log"
  before_agent_pid=${stack_pids[-1]}
  stack_wait_port "$before_agent_port"
fi
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
gw_pid=${stack_pids[-1]}
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
lifted_pid=$!
stack_wait_port "$lifted_port"
if [ -n "$before" ]; then
  mkdir -p "$tmp/before"
  TALLY_AGENT_ADDR=127.0.0.1:$before_agent_port TALLY_RECORDS_ADDR=127.0.0.1:$before_records_port \
  TALLY_HAPROXY_DIR=$before/haproxy TALLY_SPOE_CONF=$before/haproxy/spoe-tally.conf \
  TALLY_RUN_DIR=$tmp/before TALLY_GATEWAY_ADDR=127.0.0.1:$before_port \
    stack_spawn haproxy -db -f "$before/haproxy/tally.cfg" -f "$before/haproxy/demo.cfg" \
    2>"$tmp/before.log"
  before_pid=${stack_pids[-1]}
  stack_wait_port "$before_port"
fi
if [ "$long" = 1 ]; then
  mkdir -p "$tmp/prefix"
  TALLY_AGENT_ADDR=127.0.0.1:$prefix_agent_port TALLY_RECORDS_ADDR=127.0.0.1:$prefix_records_port \
  TALLY_RUN_DIR=$tmp/prefix TALLY_GATEWAY_ADDR=127.0.0.1:$prefix_port \
    stack_spawn haproxy -db -f haproxy/tally.cfg -f haproxy/demo.cfg 2>"$tmp/prefix.log"
  stack_wait_port "$prefix_port"
fi

# The gateway must actually be deciding: a wrong key is refused, the right one passes.
for port in "$gw_port" "$lifted_port" ${before:+"$before_port"}; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' \
    -d '{"model":"mock-gpt"}' "http://127.0.0.1:$port/v1/chat/completions")
  [ "$code" = 401 ] || { echo "bench: gateway :$port did not refuse a bad key ($code)" >&2; exit 1; }
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The agent's decision latency histogram at metrics port $1: "sum_seconds count".
decisions() {
  curl -s "http://127.0.0.1:$1/metrics" |
    awk '/^tally_decision_seconds_sum/ {s = $2} /^tally_decision_seconds_count/ {c = $2}
         END {print s, c}'
}

run() { # name port [haproxy-pid agent-pid agent-metrics-port]
  local out eu= tg= key=$TALLY_KEY t0 a0 d0 cpu=
  [ "$1" = end-user ] && eu=$end_user
  [ "$1" = end-user-limited ] && eu=$end_user && key=$eu_key
  [ "$1" = model-budget ] && key=$mb_key
  [ "$1" = budget ] && key=$bud_key
  [ "$1" = zoned-budget ] && key=$tz_key
  [ "$1" = tagged ] && tg=$tags && key=$tagged_key
  if [ $# -gt 2 ]; then t0=$(cpu_ticks "$3"); a0=$(cpu_ticks "$4"); d0=$(decisions "$5"); fi
  out=$(TALLY_KEY=$key BENCH_END_USER=$eu BENCH_TAGS=$tg wrk -t"$threads" -c"$conns" -d"${seconds}s" --timeout 5s \
        -s loadtest/bench-decision.lua "http://127.0.0.1:$2/v1/chat/completions" | grep '^RESULT')
  case $out in *" errors=0 "*) ;; *) echo "bench: $1 had errors: $out" >&2; exit 1 ;; esac
  if [ $# -gt 2 ]; then
    cpu=" cpu_ticks=$(($(cpu_ticks "$3") - t0)) agent_ticks=$(($(cpu_ticks "$4") - a0))"
    cpu+=" decision_us=$(awk -v a="$d0" -v b="$(decisions "$5")" 'BEGIN {split(a, x, " ");
      split(b, y, " "); n = y[2] - x[2]; printf "%.3f", (n > 0 ? (y[1] - x[1]) / n * 1e6 : 0)}')"
  fi
  echo "$1 $out$cpu" >> "$tmp/results"
}

what="${BENCH_BODY_BYTES}-byte responses"
[ "$long" = 1 ] && what="${BENCH_LONG_BYTES:-40000}-byte prompts, model last, 10-frame streams"
echo "bench-decision: ${rounds} rounds x ${seconds}s per target, $conns connections, $what, $($stack_haproxy -v | head -1 | cut -d' ' -f1-3), $(nproc) cores"
# The gateways' runs take turns at going first, so that none is always the one that
# runs on the caches and buffers the previous target left.
gateways=(gateway end-user end-user-limited model-budget budget zoned-budget tagged ${before:+before} lifted)
for r in $(seq "$rounds"); do
  run upstream "$mock_port"
  run haproxy "$plain_port"
  for i in "${!gateways[@]}"; do
    case ${gateways[(i + r) % ${#gateways[@]}]} in
      gateway) run gateway "$gw_port" "$gw_pid" "$agent_pid" "$metrics_port" ;;
      end-user) run end-user "$gw_port" "$gw_pid" "$agent_pid" "$metrics_port" ;;
      end-user-limited) run end-user-limited "$gw_port" "$gw_pid" "$agent_pid" "$metrics_port" ;;
      model-budget|budget|zoned-budget) run "${gateways[(i + r) % ${#gateways[@]}]}" \
                                            "$gw_port" "$gw_pid" "$agent_pid" "$metrics_port" ;;
      tagged) run tagged "$gw_port" "$gw_pid" "$agent_pid" "$metrics_port" ;;
      before) run before "$before_port" "$before_pid" "$before_agent_pid" "$before_metrics_port" ;;
      lifted) run lifted "$lifted_port" "$lifted_pid" "$agent_pid" "$metrics_port" ;;
    esac
  done
  [ "$long" = 1 ] && run first-frame "$prefix_port"
done

python3 - "$tmp/results" "$before" <<'PY'
import statistics, sys
hz = 100  # USER_HZ: /proc/PID/stat counts CPU in 1/100 s
rows = {}
for line in open(sys.argv[1]):
    name, _, *kv = line.split()
    r = {k: float(v) for k, v in (x.split("=") for x in kv)}
    if "cpu_ticks" in r:  # per request, round by round
        r["haproxy_us"] = r["cpu_ticks"] / hz / r["requests"] * 1e6
        r["agent_us"] = r["agent_ticks"] / hz / r["requests"] * 1e6
    rows.setdefault(name, []).append(r)
med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rows.items()}
print(f"{'target':16} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'HAProxy CPU us/req':>19} "
      f"{'agent CPU us/req':>17} {'decision us':>12}   (median of {len(rows['gateway'])} rounds)")
for n in ("upstream", "haproxy", "gateway", "end-user", "end-user-limited", "model-budget",
          "budget", "zoned-budget", "tagged", "before", "lifted", "first-frame"):
    if n not in med:
        continue
    m = med[n]
    cpu = (f" {m['haproxy_us']:19.1f} {m['agent_us']:17.1f} {m['decision_us']:12.3f}"
           if "haproxy_us" in m else "")
    print(f"{n:16} {m['rps']:10.0f} {m['p50_ms']:8.3f} {m['p99_ms']:8.3f}{cpu}")
g, h, u = med["gateway"], med["haproxy"], med["upstream"]
target = "" if "first-frame" in med else " (target >= 0.70x)"
print(f"gateway / plain haproxy throughput: {g['rps'] / h['rps']:.2f}x{target}")
print(f"plain haproxy / upstream throughput: {h['rps'] / u['rps']:.2f}x")
print(f"gateway added p50 latency over plain haproxy: {g['p50_ms'] - h['p50_ms']:+.3f} ms")
lf = med["lifted"]
print(f"behind the operator's frontend / standalone gateway throughput: {lf['rps'] / g['rps']:.2f}x, "
      f"{lf['p50_ms'] - g['p50_ms']:+.3f} ms p50")
def against(what, a, b):
    """a over b: throughput, latency and CPU per request, and the medians of the per-round
    ratios of the two CPU figures (runs of a round are minutes apart at most)."""
    ra, rb = rows[a], rows[b]
    per_round = {k: statistics.median(x[k] / y[k] for x, y in zip(ra, rb) if y[k])
                 for k in ("rps", "haproxy_us", "agent_us", "decision_us")}
    x, y = med[a], med[b]
    print(f"{what}: throughput {x['rps'] / y['rps']:.2f}x, p50 {x['p50_ms'] - y['p50_ms']:+.3f} ms; "
          f"HAProxy CPU {x['haproxy_us']:.1f} / {y['haproxy_us']:.1f} us/req, agent CPU "
          f"{x['agent_us']:.1f} / {y['agent_us']:.1f} us/req, decision {x['decision_us']:.3f} / "
          f"{y['decision_us']:.3f} us; per-round ratios (median): req/s {per_round['rps']:.2f}x, "
          f"HAProxy CPU {per_round['haproxy_us']:.2f}x, agent CPU {per_round['agent_us']:.2f}x, "
          f"decision {per_round['decision_us']:.2f}x")
against("an end user named by the header / none", "end-user", "gateway")
against("an end user with limits / one without", "end-user-limited", "end-user")
against("budgets for three models, one applying / none", "model-budget", "gateway")
against("three tags, one budgeted / none", "tagged", "gateway")
against("a day budget in America/New_York / in UTC", "zoned-budget", "budget")
if "before" in med:
    against(f"before ({sys.argv[2]}) / the gateway, no end user", "before", "gateway")
if "first-frame" in med:
    f = med["first-frame"]
    print(f"gateway judging whole / judging the first frame: {g['rps'] / f['rps']:.2f}x throughput, "
          f"{g['p50_ms'] - f['p50_ms']:+.3f} ms p50")
PY
