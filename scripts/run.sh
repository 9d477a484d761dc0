#!/usr/bin/env bash
# make run: the whole local stack in the foreground. Seeds ./data on first use (a demo
# provider served by the mock upstream, the model mock-gpt, a demo key), starts the mock
# upstream, tally-agent and HAProxy, prints the demo key and a curl to paste, and stops
# everything it started on Ctrl-C or when any of them dies.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${TALLY_BUILD:-build}

gateway_port=${TALLY_GATEWAY_PORT:-8080}
agent_port=${TALLY_AGENT_PORT:-12345}
mock_port=${TALLY_MOCK_PORT:-8090}
data=${TALLY_DATA_DIR:-$root/data}
db=$data/tally.db

mkdir -p "$data"
chmod 700 "$data"
ctl() { "$build/tallyctl" --db "$db" "$@"; }

# The demo key is kept in data/demo.key (mode 600) so that every `make run` can print
# it; keys made with tallyctl are shown once and never stored in clear.
if [ ! -s "$data/demo.key" ]; then
  echo "seeding $db"
  ctl provider set mock-openai --api openai --backend be_mock_openai --url "http://127.0.0.1:$mock_port"
  ctl provider set mock-anthropic --api anthropic --backend be_mock_anthropic --url "http://127.0.0.1:$mock_port"
  ctl model set mock-gpt --provider mock-openai --input-micros 150000 --output-micros 600000 --cached-micros 75000
  ctl model set mock-claude --provider mock-anthropic --input-micros 3000000 --output-micros 15000000 --cached-micros 300000
  name=demo
  ctl key list --json | grep -q '"name":"demo"' && name="demo-$(date +%s)"
  (umask 077; ctl key create --name "$name" --default-model mock-gpt > "$data/demo.key")
fi
key=$(cat "$data/demo.key")

[ -s "$data/mock.credential" ] || (umask 077; head -c 18 /dev/urandom | base64 | tr '+/' '-_' > "$data/mock.credential")

export TALLY_GATEWAY_ADDR=127.0.0.1:$gateway_port
export TALLY_AGENT_ADDR=127.0.0.1:$agent_port
export TALLY_MOCK_ADDR=127.0.0.1:$mock_port
export TALLY_SPOE_CONF=$root/haproxy/spoe-tally.conf
export TALLY_RUN_DIR=$data
export TALLY_FAIL_POLICY=${TALLY_FAIL_POLICY:-closed}
export TALLY_FAILOPEN_BACKEND=${TALLY_FAILOPEN_BACKEND:-be_mock_openai}
TALLY_MOCK_CREDENTIAL=$(cat "$data/mock.credential")
export TALLY_MOCK_CREDENTIAL

pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "tally stopped"
}
trap stop INT TERM EXIT

wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1: see the logs above" >&2
  return 1
}

"$build/mock-upstream" --listen "$TALLY_MOCK_ADDR" --quiet & pids+=($!)
wait_port "$mock_port"
"$build/tally-agent" --listen "$TALLY_AGENT_ADDR" --db "$db" & pids+=($!)
wait_port "$agent_port"
haproxy -db -f haproxy/haproxy.cfg & pids+=($!)
wait_port "$gateway_port"

cat <<MSG

tally is running: gateway http://$TALLY_GATEWAY_ADDR (agent $TALLY_AGENT_ADDR, mock upstream $TALLY_MOCK_ADDR)
demo key: $key

  curl -s http://$TALLY_GATEWAY_ADDR/v1/chat/completions \\
    -H "Authorization: Bearer $key" -H "Content-Type: application/json" \\
    -d '{"model":"mock-gpt","messages":[{"role":"user","content":"Hello"}]}'

  curl -sN http://$TALLY_GATEWAY_ADDR/v1/chat/completions \\
    -H "Authorization: Bearer $key" -H "Content-Type: application/json" \\
    -d '{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"Hello"}]}'

Manage keys with: $build/tallyctl --db $db key list
Ctrl-C stops everything.
MSG

# Any process ending takes the others down with it.
wait -n "${pids[@]}"
echo "stopping tally" >&2
