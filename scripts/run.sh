#!/usr/bin/env bash
# make run: the whole local stack in the foreground. Seeds ./data on first use (a demo
# provider served by the mock upstream, the model mock-gpt, a demo key), starts the mock
# upstream, tally-agent, HAProxy and tally-queryd, prints the demo key, a curl to paste
# and the dashboard's address, and stops everything it started on Ctrl-C or when any of
# them dies.
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
ctl() { "$build/tallyctl" --db "$db" "$@"; }

# The demo key is kept in data/demo.key (mode 600) so that every `make run` can print
# it; keys made with tallyctl are shown once and never stored in clear.
if [ ! -s "$data/demo.key" ]; then
  echo "seeding $db"
  stack_seed "$db" "$mock_port"
  name=demo
  ctl key list --json | grep -q '"name":"demo"' && name="demo-$(date +%s)"
  (umask 077; ctl key create --name "$name" --default-model mock-gpt > "$data/demo.key")
fi
key=$(cat "$data/demo.key")

[ -s "$data/mock.credential" ] || (umask 077; head -c 18 /dev/urandom | base64 | tr '+/' '-_' > "$data/mock.credential")

# The operator token for tally-queryd: TALLY_OPERATOR_TOKEN, else one made once and kept
# in data/operator.token (mode 600).
if [ -n "${TALLY_OPERATOR_TOKEN:-}" ]; then
  token_note="from TALLY_OPERATOR_TOKEN"
else
  [ -s "$data/operator.token" ] || (umask 077; head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=' > "$data/operator.token")
  export TALLY_OPERATOR_TOKEN=$(cat "$data/operator.token")
  token_note="kept in $data/operator.token"
fi

export TALLY_GATEWAY_ADDR=127.0.0.1:$gateway_port TALLY_RUN_DIR=$data
stack_haproxy_env "$agent_port" "$mock_port" "$(cat "$data/mock.credential")" "$records_port" "$db"

stop() {
  trap - INT TERM EXIT
  stack_stop
  echo "tally stopped"
}
trap stop INT TERM EXIT

stack_spawn "$build/mock-upstream" --listen "$TALLY_MOCK_ADDR" --quiet
stack_wait_port "$mock_port"
stack_spawn "$build/tally-agent" --listen "$TALLY_AGENT_ADDR" --db "$db" \
  --records "$TALLY_RECORDS_ADDR" --metrics "127.0.0.1:$metrics_port" \
  --haproxy-socket "$data/haproxy.sock"
stack_wait_port "$agent_port"
stack_spawn haproxy -db -f haproxy/haproxy.cfg
stack_wait_port "$gateway_port"
stack_spawn "$build/tally-queryd" --db "$db" --listen "127.0.0.1:$queryd_port"
stack_wait_port "$queryd_port"

cat <<MSG

tally is running: gateway http://$TALLY_GATEWAY_ADDR (agent $TALLY_AGENT_ADDR, mock upstream $TALLY_MOCK_ADDR)
demo key: $key

  curl -s http://$TALLY_GATEWAY_ADDR/v1/chat/completions \\
    -H "Authorization: Bearer $key" -H "Content-Type: application/json" \\
    -d '{"model":"mock-gpt","messages":[{"role":"user","content":"Hello"}]}'

  curl -sN http://$TALLY_GATEWAY_ADDR/v1/chat/completions \\
    -H "Authorization: Bearer $key" -H "Content-Type: application/json" \\
    -d '{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"Hello"}]}'

dashboard: http://127.0.0.1:$queryd_port/
operator token ($token_note): $TALLY_OPERATOR_TOKEN

  curl -s http://127.0.0.1:$queryd_port/api/summary -H "Authorization: Bearer $TALLY_OPERATOR_TOKEN"

Manage keys with: $build/tallyctl --db $db key list
Ctrl-C stops everything.
MSG

# Any process ending takes the others down with it.
wait -n "${stack_pids[@]}"
echo "stopping tally" >&2
