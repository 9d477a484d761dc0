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

stop() {
  trap '' INT TERM
  trap - EXIT
  stack_stop
  [ ${#stack_pids[@]} -eq 0 ] || echo "tally stopped"
}
trap stop EXIT
# Ctrl-C is how it is meant to end, at any moment: exit 0, so that make reports no error.
trap 'stop; exit 0' INT TERM

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

# Either the user's own server or the demo (the mock, its providers, models and key).
stack_upstream "$db" "$data"
[ -n "$upstream" ] || stack_demo_key "$db" "$mock_port" "$data"
stack_local_secrets "$data"
# A taken port is named before anything starts (else one process fails on another's).
ports=("TALLY_GATEWAY_PORT=$gateway_port:the gateway (HAProxy)"
       "TALLY_METRICS_PORT=$metrics_port:the agent's metrics"
       "TALLY_QUERYD_PORT=$queryd_port:tally-queryd, the dashboard")
[ "${TALLY_SOCKETS:-unix}" = unix ] ||
  ports+=("TALLY_AGENT_PORT=$agent_port:the agent's SPOP listener"
          "TALLY_RECORDS_PORT=$records_port:the agent's records listener, TCP and UDP")
[ -n "$upstream" ] || ports+=("TALLY_MOCK_PORT=$mock_port:the mock upstream")
stack_ports_free "${ports[@]}"
stack_haproxy_as_root "$data"

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

if [ -z "$upstream" ]; then
  stack_spawn "$build/mock-upstream" --listen "$TALLY_MOCK_ADDR" --quiet
  stack_wait_port "$mock_port" "the mock upstream, TALLY_MOCK_PORT"
fi
stack_spawn "$build/tally-agent" --listen "$agent_listen" --db "$db" \
  --records "$records_listen" --metrics "127.0.0.1:$metrics_port" \
  --haproxy-socket "$data/haproxy.sock"
stack_wait_listener "$agent_listen" "the agent's SPOP listener"
stack_spawn haproxy -db -f haproxy/tally.cfg -f haproxy/demo.cfg "${stack_haproxy_root[@]}"
stack_wait_port "$gateway_port" "the gateway, TALLY_GATEWAY_PORT"
stack_spawn "$build/tally-queryd" --db "$db" --listen "127.0.0.1:$queryd_port"
stack_wait_port "$queryd_port" "tally-queryd, TALLY_QUERYD_PORT"

echo
echo "tally is running: gateway http://$TALLY_GATEWAY_ADDR (agent $TALLY_AGENT_ADDR, upstream ${upstream:-mock $TALLY_MOCK_ADDR})"
echo "$key_label: $key"
stack_curl "$TALLY_GATEWAY_ADDR" "$key" "$model"
stack_curl "$TALLY_GATEWAY_ADDR" "$key" "$model" stream
[ -n "$upstream" ] || stack_client_lines "$TALLY_GATEWAY_ADDR" "$key"
stack_queryd_lines "$queryd_port"
cat <<MSG

Manage keys with: $build/tallyctl --db $db key list
Ctrl-C stops everything.
MSG

# Any process ending takes the others down with it.
wait -n "${stack_pids[@]}"
echo "stopping tally" >&2
