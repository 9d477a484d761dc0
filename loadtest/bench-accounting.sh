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
# "hold" (first round only, before anything else has grown HAProxy's pools) opens
# BENCH_HOLD_STREAMS (1024) SSE streams of BENCH_HOLD_FRAMES (10) frames
# BENCH_HOLD_DELAY_MS (500) apart at once and, when every one has its response headers,
# reads HAProxy's and the agent's VmRSS: the growth over the idle figure, divided by the
# streams, is the memory one in-flight request holds.
#
# BENCH_HAPROXY_VERSIONS (e.g. "2.6 3.4"; `make bench-accounting HAPROXY=3.4` sets one):
# a gateway and a plain HAProxy of each version (scripts/haproxy-version.sh prepares
# them), all against the same mock and agent, run interleaved (each mode on every
# version before the next mode); each version's ratios are against plain HAProxy of the
# same version. Unset: TALLY_HAPROXY, else haproxy on PATH. An entry VERSION:FILE runs
# that version's gateway on the configuration FILE instead of haproxy/tally.cfg (a
# scratch copy with one change, loaded with haproxy/demo.cfg), labelled
# VERSION+NAME after FILE's name: "3.4 3.4:/tmp/nolog.cfg" measures the change side by side.
#
# BENCH_PROFILE=DIR: each HAProxy is sampled by `perf record -e cpu-clock` during its
# first-round runs, into DIR/VERSION-TARGET-MODE.data (`perf report -i` them); the
# sampling costs CPU, so take figures from a run without it.
#
# Knobs: BENCH_SECONDS (5), BENCH_ROUNDS (3), BENCH_CONNECTIONS, BENCH_STREAMS,
# BENCH_FRAMES, BENCH_FRAME_DELAY_MS, BENCH_AGENT_THREADS (2),
# BENCH_MODES ("hold unary limited team unbounded long sse rsse"; rsse: Responses API streams
# of the same shape), BENCH_HOLD_STREAMS,
# BENCH_HOLD_FRAMES, BENCH_HOLD_DELAY_MS, BENCH_HAPROXY_VERSIONS, TALLY_BUILD (build),
# BENCH_MOCK_ARGS (options of mock-upstream, e.g. "--audio-input-tokens 1
# --service-tier default" for answers that name every class, as OpenAI's do).
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

mock_port=$(stack_free_port); agent_port=$(stack_free_port)
records_port=$(stack_free_port); metrics_port=$(stack_free_port)
db=$tmp/tally.db
stack_seed "$db" "$mock_port" >/dev/null
export TALLY_KEY=$("$build/tallyctl" --db "$db" key create --name bench --default-model mock-gpt)
# Every limit on, none ever reached: what enforcing them costs.
limits=(--rpm 1000000000 --tpm 1000000000000 --max-concurrent 100000 --budget-usd 1000000000
        --budget-period day)
limited_key=$("$build/tallyctl" --db "$db" key create --name bench-limited \
  --default-model mock-gpt "${limits[@]}")
# The same in a team whose every limit is on too: what the second level costs.
"$build/tallyctl" --db "$db" team create bench-team "${limits[@]}" >/dev/null
team_key=$("$build/tallyctl" --db "$db" key create --name bench-team-key \
  --default-model mock-gpt --team bench-team "${limits[@]}")

# shellcheck disable=SC2086 # BENCH_MOCK_ARGS is a list of options
stack_spawn "$build/mock-upstream" --listen "127.0.0.1:$mock_port" --quiet ${BENCH_MOCK_ARGS:-} \
  2>"$tmp/mock.log"
stack_spawn "$build/tally-agent" --listen "127.0.0.1:$agent_port" --db "$db" \
  --records "127.0.0.1:$records_port" --metrics "127.0.0.1:$metrics_port" \
  --threads "${BENCH_AGENT_THREADS:-2}" --log-level warn 2>"$tmp/agent.log"
agent_pid=${stack_pids[-1]}
stack_wait_port "$mock_port"; stack_wait_port "$agent_port"

export TALLY_FAIL_POLICY=closed
stack_haproxy_env "$agent_port" "$mock_port" bench-credential "$records_port" "$db"
# The HAProxy binaries: one per version asked for, else TALLY_HAPROXY or PATH's.
bins=(); cfgs=(); labels=()
if [ -n "${BENCH_HAPROXY_VERSIONS:-}" ]; then
  for v in $BENCH_HAPROXY_VERSIONS; do
    bins+=("$(bash scripts/haproxy-version.sh "${v%%:*}")")
    case $v in *:*) cfgs+=("${v#*:}") ;; *) cfgs+=(haproxy/tally.cfg) ;; esac
  done
else
  bins=("$stack_haproxy"); cfgs=(haproxy/tally.cfg)
fi
gw_ports=(); plain_ports=(); gw_pids=(); plain_pids=()
for i in "${!bins[@]}"; do
  label=$("${bins[$i]}" -v | sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p' | sed 's/-[0-9][^-]*$//')
  [ "${cfgs[$i]}" = haproxy/tally.cfg ] || label+=+$(basename "${cfgs[$i]}" .cfg)
  labels+=("$label")
  gw_ports+=("$(stack_free_port)"); plain_ports+=("$(stack_free_port)")
  mkdir -p "$tmp/gw-$i" "$tmp/plain-$i"
  TALLY_RUN_DIR=$tmp/gw-$i TALLY_GATEWAY_ADDR=127.0.0.1:${gw_ports[$i]} \
    stack_spawn "${bins[$i]}" -db -f "${cfgs[$i]}" -f haproxy/demo.cfg 2>"$tmp/gw-$i.log"
  gw_pids+=("${stack_pids[-1]}")
  TALLY_RUN_DIR=$tmp/plain-$i TALLY_GATEWAY_ADDR=127.0.0.1:${plain_ports[$i]} \
    stack_spawn "${bins[$i]}" -db -f haproxy/plain.cfg 2>"$tmp/plain-$i.log"
  plain_pids+=("${stack_pids[-1]}")
done
for i in "${!bins[@]}"; do stack_wait_port "${gw_ports[$i]}"; stack_wait_port "${plain_ports[$i]}"; done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The agent's decision latency histogram: "sum_seconds count".
decisions() {
  curl -s "http://127.0.0.1:$metrics_port/metrics" |
    awk '/^tally_decision_seconds_sum/ {s = $2} /^tally_decision_seconds_count/ {c = $2}
         END {print s, c}'
}

# hold NAME PORT PID LABEL: BENCH_HOLD_STREAMS streams held at once, VmRSS of HAProxy
# and the agent before and while they are all in flight.
hold() {
  local out
  out=$(python3 - "$2" "$hold_streams" "$TALLY_KEY" "$hold_frames" "$hold_delay" "$3" "$agent_pid" <<'PY'
import selectors, socket, sys, time
port, n, key, frames, delay = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
pids = sys.argv[6:8]
def rss():
    out = []
    for pid in pids:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                out.append(int(line.split()[1]))
    return out
body = ('{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},'
        '"messages":[{"role":"user","content":"Say hello in one short sentence."}]}')
req = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
       f"Authorization: Bearer {key}\r\nx-mock-frames: {frames}\r\nx-mock-frame-delay-ms: {delay}\r\n"
       f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}").encode()
before = rss()
sel = selectors.DefaultSelector()
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(req)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, {"buf": b"", "head": False})
started = done = ok = 0
held, settle = None, None
deadline = time.time() + 60 + int(frames) * int(delay) / 1000
while done < n and time.time() < deadline:
    for k, _ in sel.select(0.05):
        st, c = k.data, k.fileobj.recv(65536)
        if c:
            st["buf"] += c
            if not st["head"] and b"\r\n\r\n" in st["buf"]:
                st["head"] = True
                started += 1
            continue
        done += 1
        ok += st["buf"].startswith(b"HTTP/1.1 200") and b"data: [DONE]" in st["buf"]
        sel.unregister(k.fileobj)
        k.fileobj.close()
    # Every stream has its headers: all are in flight until the last frame.
    if started == n and settle is None:
        settle = time.time() + 0.25
    if settle is not None and held is None and time.time() >= settle:
        held = rss()
if held is None:
    sys.exit(f"hold: {started} of {n} streams started, {done} ended before memory was read")
print(f"RESULT streams={n} started={started} ok={ok} rss_kib={before[0]} held_kib={held[0]} "
      f"agent_rss_kib={before[1]} agent_held_kib={held[1]}")
PY
)
  case $out in *" ok=$hold_streams "*) ;; *) echo "bench: $1 hold failed: $out" >&2; exit 1 ;; esac
  echo "$4/$1-hold $out" >> "$tmp/results"
}

run() { # name port pid mode label
  local out t0 t1 a0 a1 d0 d1 dus key=$TALLY_KEY
  [ "$4" = hold ] && { hold "$1" "$2" "$3" "$5"; return; }
  [ "$4" = limited ] && key=$limited_key
  [ "$4" = team ] && key=$team_key
  local prof=
  if [ -n "${BENCH_PROFILE:-}" ] && [ "$r" = 1 ]; then
    perf record -q -e cpu-clock -p "$3" -o "$BENCH_PROFILE/$5-$1-$4.data" 2>/dev/null &
    prof=$!
    stack_pids+=("$prof")
  fi
  t0=$(cpu_ticks "$3"); a0=$(cpu_ticks "$agent_pid"); d0=$(decisions)
  if [ "$4" = sse ] || [ "$4" = rsse ]; then
    # rsse: the Responses API's stream (usage only in its terminal event)
    out=$(BENCH_FRAMES=$frames BENCH_RESPONSES=$([ "$4" = rsse ] && echo 1 || echo 0) \
          wrk -t1 -c"$streams" -d"${seconds}s" --timeout 30s -s loadtest/bench-decision.lua \
          "http://127.0.0.1:$2/v1/$([ "$4" = rsse ] && echo responses || echo chat/completions)" |
          grep '^RESULT')
  else
    out=$(TALLY_KEY=$key BENCH_UNBOUNDED=$([ "$4" = unbounded ] && echo 1 || echo 0) \
          BENCH_LONG=$([ "$4" = long ] && echo 1 || echo 0) wrk -t1 -c"$conns" -d"${seconds}s" --timeout 5s -s loadtest/bench-decision.lua \
          "http://127.0.0.1:$2/v1/chat/completions" | grep '^RESULT')
  fi
  t1=$(cpu_ticks "$3"); a1=$(cpu_ticks "$agent_pid"); d1=$(decisions)
  if [ -n "$prof" ]; then kill -INT "$prof"; wait "$prof" || true; fi
  case $out in *" errors=0 "*) ;; *) echo "bench: $1 $4 had errors: $out" >&2; exit 1 ;; esac
  dus=$(awk -v a="$d0" -v b="$d1" 'BEGIN {split(a, x, " "); split(b, y, " "); n = y[2] - x[2];
                                          printf "%.3f", (n > 0 ? (y[1] - x[1]) / n * 1e6 : 0)}')
  echo "$5/$1-$4 $out cpu_ticks=$((t1 - t0)) agent_ticks=$((a1 - a0)) decision_us=$dus" >> "$tmp/results"
}

[ -z "${BENCH_PROFILE:-}" ] || mkdir -p "$BENCH_PROFILE"
hold_streams=${BENCH_HOLD_STREAMS:-1024}; hold_frames=${BENCH_HOLD_FRAMES:-10}
hold_delay=${BENCH_HOLD_DELAY_MS:-500}
echo "bench-accounting: HAProxy ${labels[*]}; ${rounds} rounds x ${seconds}s; unary 1 KB at" \
     "$conns connections; SSE $frames frames x ${BENCH_FRAME_DELAY_MS} ms at $streams streams;" \
     "hold $hold_streams streams; $(nproc) cores"
for r in $(seq "$rounds"); do
  for mode in ${BENCH_MODES:-hold unary limited team unbounded long sse rsse}; do
    # Held memory is read once, on processes no earlier run grew.
    [ "$mode" = hold ] && [ "$r" -gt 1 ] && continue
    for i in "${!bins[@]}"; do
      # "limited" is the unary run again with a key whose every limit is on, "team"
      # with that key in a team whose every limit is on too.
      [ "$mode" = limited ] || [ "$mode" = team ] || run haproxy "${plain_ports[$i]}" "${plain_pids[$i]}" "$mode" "${labels[$i]}"
      run gateway "${gw_ports[$i]}" "${gw_pids[$i]}" "$mode" "${labels[$i]}"
    done
  done
done

# The count check. HAProxy's own count of 2xx responses its gateway frontend sent (show
# stat, hrsp_2xx) against the rows with a 2xx status (HAProxy also counts a 400 for a
# connection closed before it sent a byte, which dontlognull keeps out of the log), and
# received = written + dropped with dropped = 0.
haproxy_resp=0
for i in "${!bins[@]}"; do
  n=$(python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"show stat\n")
out = b""
while (c := s.recv(65536)): out += c
lines = out.decode().splitlines(); head = lines[0].lstrip("# ").split(",")
for l in lines[1:]:
    r = dict(zip(head, l.split(",")))
    if r.get("pxname") == "gateway" and r.get("svname") == "FRONTEND":
        print(r["hrsp_2xx"])
' "$tmp/gw-$i/haproxy.sock")
  haproxy_resp=$((haproxy_resp + n))
done
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
if any(m.get("requests", 1) == 0 for m in med.values()):
    sys.exit("bench: a run completed no request (raise BENCH_SECONDS above the stream length)")
frames = int(sys.argv[2])
hz = 100  # USER_HZ: /proc/PID/stat counts CPU in 1/100 s
labels = list(dict.fromkeys(n.split("/")[0] for n in med))
for label in labels:
    m_of = {n.split("/", 1)[1]: m for n, m in med.items() if n.split("/")[0] == label}
    print(f"\nHAProxy {label}")
    print(f"{'target':17} {'req/s':>9} {'events/s':>10} {'p50 ms':>9} {'p99 ms':>9} "
          f"{'HAProxy CPU us/req':>19} {'agent CPU us/req':>17} {'decision us':>12}")
    for n in ("haproxy-unary", "gateway-unary", "gateway-limited", "gateway-team",
              "haproxy-unbounded",
              "gateway-unbounded", "haproxy-long", "gateway-long", "haproxy-sse", "gateway-sse",
              "haproxy-rsse", "gateway-rsse"):
        if n not in m_of:
            continue
        m = m_of[n]
        ev = m["rps"] * frames if n.endswith("sse") else 0
        cpu, agent = (m[k] / hz / m["requests"] * 1e6 for k in ("cpu_ticks", "agent_ticks"))
        gw = n.startswith("gateway")
        print(f"{n:17} {m['rps']:9.0f} {ev:10.0f} {m['p50_ms']:9.3f} {m['p99_ms']:9.3f} "
              f"{cpu:19.1f} {agent if gw else 0:17.1f} {m['decision_us'] if gw else 0:12.3f}")
    # Issue 13's targets (set for HAProxy 3.4).
    for mode, what, target in (("unary", "req/s", 0.7), ("unbounded", "req/s", 0.6),
                               ("long", "req/s", 0.0), ("sse", "events/s", 0.95),
                               ("rsse", "events/s", 0.95)):
        if f"gateway-{mode}" in m_of:
            ratio = m_of[f"gateway-{mode}"]["rps"] / m_of[f"haproxy-{mode}"]["rps"]
            goal = (f" (target >= {target:.2f}x: {'met' if ratio >= target else 'NOT met'})"
                    if target else "")
            print(f"{label} {mode}: gateway / plain haproxy {what} {ratio:.2f}x{goal}")
    if "gateway-limited" in m_of:
        on, off = m_of["gateway-limited"], m_of["gateway-unary"]
        print(f"{label} limits: gateway unary with every limit on / without "
              f"{on['rps'] / off['rps']:.2f}x (target >= 0.95x); decision "
              f"{on['decision_us']:.3f} us vs {off['decision_us']:.3f} us")
    if "gateway-team" in m_of and "gateway-limited" in m_of:
        on, off = m_of["gateway-team"], m_of["gateway-limited"]
        print(f"{label} teams: gateway unary with key and team limits on / key limits alone "
              f"{on['rps'] / off['rps']:.2f}x; decision {on['decision_us']:.3f} us vs "
              f"{off['decision_us']:.3f} us; agent CPU "
              f"{on['agent_ticks'] / on['requests'] / hz * 1e6:.1f} vs "
              f"{off['agent_ticks'] / off['requests'] / hz * 1e6:.1f} us/req")
    for n in ("haproxy-hold", "gateway-hold"):
        if n in m_of:
            m = m_of[n]
            hb = (m["held_kib"] - m["rss_kib"]) * 1024 / m["streams"]
            ab = (m["agent_held_kib"] - m["agent_rss_kib"]) * 1024 / m["streams"]
            print(f"{label} {n}: {m['streams']:.0f} held streams: HAProxy RSS "
                  f"{m['rss_kib'] / 1024:.1f} -> {m['held_kib'] / 1024:.1f} MiB, {hb:.0f} B/stream"
                  + (f"; agent {m['agent_rss_kib'] / 1024:.1f} -> "
                     f"{m['agent_held_kib'] / 1024:.1f} MiB, {ab:.0f} B/stream"
                     if n.startswith("gateway") else ""))
if len(labels) > 1:
    print()
    for other in labels[1:]:
        for n in ("haproxy-unary", "gateway-unary", "gateway-unbounded", "gateway-sse"):
            a, b = med.get(f"{labels[0]}/{n}"), med.get(f"{other}/{n}")
            if a and b:
                print(f"{n}: HAProxy {other} / {labels[0]} req/s {b['rps'] / a['rps']:.2f}x")
resp, rows_status, rows_nostatus, received, written, dropped = (int(x) for x in sys.argv[3:9])
ok = resp == rows_status and received == written + dropped and dropped == 0
print(f"count check: HAProxy 2xx responses {resp} = 2xx rows {rows_status} "
      f"(+ {rows_nostatus} other rows); received {received} = written {written} "
      f"+ dropped {dropped}: {'exact' if ok else 'MISMATCH'}")
sys.exit(0 if ok else 1)
PY
