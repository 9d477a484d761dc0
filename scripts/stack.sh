# Sourced by scripts/run.sh and the loadtest/bench-*.sh scripts: starting and stopping
# the local stack's processes, and the settings they give it. Expects $root and $build.

stack_pids=()

# The HAProxy binary: TALLY_HAPROXY (`make run HAPROXY=3.4` sets it to the wrapper
# scripts/haproxy-version.sh prepares), else haproxy on PATH.
stack_haproxy=${TALLY_HAPROXY:-haproxy}

# stack_spawn CMD...: runs CMD in the background and remembers its PID for stack_stop.
# A CMD of "haproxy" runs $stack_haproxy.
stack_spawn() {
  if [ "$1" = haproxy ]; then
    shift
    set -- "$stack_haproxy" "$@"
  fi
  "$@" &
  stack_pids+=($!)
}

# Stops, by PID, every process stack_spawn started, and waits for them.
stack_stop() {
  local pid
  for pid in "${stack_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${stack_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# stack_scratch: sets $tmp to a new scratch directory; on exit the processes are
# stopped and the directory removed.
stack_scratch() {
  tmp=$(mktemp -d /tmp/tally-bench.XXXXXX)
  trap 'stack_stop; rm -rf "$tmp"' EXIT INT TERM
}

# A loopback port that is free now (the kernel picks it).
stack_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stack_wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1: see the logs" >&2
  return 1
}

# stack_seed DB MOCK_PORT: the demo providers (both served by the mock upstream) and
# their models, created or updated.
stack_seed() {
  local ctl=("$build/tallyctl" --db "$1")
  "${ctl[@]}" provider set mock-openai --api openai --backend be_mock_openai --url "http://127.0.0.1:$2"
  "${ctl[@]}" provider set mock-anthropic --api anthropic --backend be_mock_anthropic --url "http://127.0.0.1:$2"
  "${ctl[@]}" model set mock-gpt --provider mock-openai --input-micros 150000 --output-micros 600000 --cached-micros 75000
  "${ctl[@]}" model set mock-claude --provider mock-anthropic --input-micros 3000000 --output-micros 15000000 --cached-micros 300000
}

# stack_haproxy_env AGENT_PORT MOCK_PORT MOCK_CREDENTIAL RECORDS_PORT DB: what
# haproxy/haproxy.cfg reads from its environment, but for the gateway address and run
# directory (per instance); the gateway secret is the one the agent of DB expects.
stack_haproxy_env() {
  TALLY_GATEWAY_SECRET=$("$build/tallyctl" --db "$5" gateway-secret)
  export TALLY_GATEWAY_SECRET
  export TALLY_AGENT_ADDR=127.0.0.1:$1
  export TALLY_MOCK_ADDR=127.0.0.1:$2
  export TALLY_MOCK_CREDENTIAL=$3
  export TALLY_RECORDS_ADDR=127.0.0.1:$4
  export TALLY_HAPROXY_DIR=$root/haproxy
  export TALLY_SPOE_CONF=$root/haproxy/spoe-tally.conf
  export TALLY_FAIL_POLICY=${TALLY_FAIL_POLICY:-closed}
  export TALLY_FAILOPEN_BACKEND=${TALLY_FAILOPEN_BACKEND:-be_mock_openai}
}
