#!/usr/bin/env bash
# make run: the whole local stack in the foreground. Seeds ./data on first use (a demo
# provider served by the mock upstream, the model mock-gpt, a demo key), starts the mock
# upstream, tally-agent, HAProxy and tally-queryd, prints the demo key, a curl to paste
# and the dashboard's address, and stops everything it started on Ctrl-C or when any of
# them dies.
#
# TALLY_UPSTREAM=http://HOST:PORT[/v1] serves the user's own OpenAI-compatible server
# (Ollama, vLLM, llama.cpp) instead of the mock (stack_upstream in scripts/stack.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${TALLY_BUILD:-build}
source scripts/stack.sh

gateway_port=${TALLY_GATEWAY_PORT:-8080}
agent_port=${TALLY_AGENT_PORT:-12345}
records_port=${TALLY_RECORDS_PORT:-12346}
metrics_port=${TALLY_METRICS_PORT:-9464}
mock_port=${TALLY_MOCK_PORT:-8090}
queryd_port=${TALLY_QUERYD_PORT:-8081}
data=${TALLY_DATA_DIR:-$root/data}
db=$data/tally.db

mkdir -p "$data"
chmod 700 "$data"

stack_demo_key "$db" "$mock_port" "$data"
stack_upstream "$db" "$data"
stack_local_secrets "$data"

export TALLY_GATEWAY_ADDR=127.0.0.1:$gateway_port TALLY_RUN_DIR=$data
stack_haproxy_env "$agent_port" "$mock_port" "$(cat "$data/mock.credential")" "$records_port" "$db"
# SPOP and records on unix sockets in the data directory, mode 0660 (the agent's
# --unix-mode): no other user's process can send the agent decisions or records.
# TALLY_SOCKETS=tcp puts them on TALLY_AGENT_PORT and TALLY_RECORDS_PORT instead.
if [ "${TALLY_SOCKETS:-unix}" = unix ]; then
  agent_listen=unix:$data/spop.sock records_listen=unix:$data/records.sock
  export TALLY_AGENT_ADDR=unix@$data/spop.sock TALLY_RECORDS_ADDR=unix@$data/records.sock
  export TALLY_RECORDS_LOG_ADDR=unix@$data/records.sock.dgram
else
  agent_listen=$TALLY_AGENT_ADDR records_listen=$TALLY_RECORDS_ADDR
fi

stop() {
  trap - INT TERM EXIT
  stack_stop
  echo "tally stopped"
}
trap stop INT TERM EXIT

if [ -z "$upstream" ]; then
  stack_spawn "$build/mock-upstream" --listen "$TALLY_MOCK_ADDR" --quiet
  stack_wait_port "$mock_port"
fi
stack_spawn "$build/tally-agent" --listen "$agent_listen" --db "$db" \
  --records "$records_listen" --metrics "127.0.0.1:$metrics_port" \
  --haproxy-socket "$data/haproxy.sock"
stack_wait_listener "$agent_listen"
stack_spawn haproxy -db -f haproxy/haproxy.cfg
stack_wait_port "$gateway_port"
stack_spawn "$build/tally-queryd" --db "$db" --listen "127.0.0.1:$queryd_port"
stack_wait_port "$queryd_port"

echo
echo "tally is running: gateway http://$TALLY_GATEWAY_ADDR (agent $TALLY_AGENT_ADDR, upstream ${upstream:-mock $TALLY_MOCK_ADDR})"
echo "$key_label: $key"
stack_curl "$TALLY_GATEWAY_ADDR" "$key" "$model"
stack_curl "$TALLY_GATEWAY_ADDR" "$key" "$model" stream
stack_queryd_lines "$queryd_port"
cat <<MSG

Manage keys with: $build/tallyctl --db $db key list
Ctrl-C stops everything.
MSG

# Any process ending takes the others down with it.
wait -n "${stack_pids[@]}"
echo "stopping tally" >&2
