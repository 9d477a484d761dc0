#!/usr/bin/env bash
# make run: the whole local stack in the foreground. Seeds ./data on first use (a demo
# provider served by the mock upstream, the model mock-gpt, a demo key), starts the mock
# upstream, tally-agent, HAProxy and tally-queryd, prints the demo key, a curl to paste
# and the dashboard's address, and stops everything it started on Ctrl-C or when any of
# them dies.
#
# TALLY_UPSTREAM=http://HOST:PORT[/v1] serves the user's own OpenAI-compatible server
# (Ollama, vLLM, llama.cpp) instead of the mock: on first use the provider "upstream"
# (haproxy.cfg's be_upstream), the models its GET /v1/models lists (unpriced) and a key
# allowed them (data/upstream.key) are registered. TALLY_UPSTREAM_API_KEY is sent to it
# as a bearer token when the server wants one.
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
key_label="demo key"
model=mock-gpt

upstream=${TALLY_UPSTREAM:-}
if [ -n "$upstream" ]; then
  if [[ ! $upstream =~ ^http://([A-Za-z0-9.-]+):([0-9]+)(/v1)?/?$ ]]; then
    echo "TALLY_UPSTREAM must be http://HOST:PORT or http://HOST:PORT/v1 (got '$upstream')" >&2
    exit 2
  fi
  export TALLY_UPSTREAM_ADDR="${BASH_REMATCH[1]}:${BASH_REMATCH[2]}"
  base="http://$TALLY_UPSTREAM_ADDR"
  if [ ! -s "$data/upstream.key" ]; then
    auth=()
    [ -n "${TALLY_UPSTREAM_API_KEY:-}" ] && auth=(-H "Authorization: Bearer $TALLY_UPSTREAM_API_KEY")
    listed=$(curl -sf --max-time 10 "${auth[@]}" "$base/v1/models") || {
      echo "TALLY_UPSTREAM: GET $base/v1/models failed: is the server up?" >&2; exit 1; }
    models=$(printf '%s' "$listed" | python3 -c 'import json, sys
for m in json.load(sys.stdin).get("data", []):
    if isinstance(m, dict) and isinstance(m.get("id"), str):
        print(m["id"])') || { echo "TALLY_UPSTREAM: $base/v1/models is not an OpenAI model list" >&2; exit 1; }
    ctl provider set upstream --api openai --backend be_upstream --url "$base"
    registered=()
    while IFS= read -r m; do
      [ -n "$m" ] || continue
      if ctl model set "$m" --provider upstream >/dev/null 2>&1; then
        registered+=("$m")
      else
        echo "TALLY_UPSTREAM: model '$m' not registered (a name tallyctl refuses)" >&2
      fi
    done <<< "$models"
    [ ${#registered[@]} -gt 0 ] || { echo "TALLY_UPSTREAM: $base/v1/models lists no usable model" >&2; exit 1; }
    echo "registered ${#registered[@]} models of $base: ${registered[*]}"
    name=upstream
    ctl key list --json | grep -q '"name":"upstream"' && name="upstream-$(date +%s)"
    list=$(IFS=,; echo "${registered[*]}")
    echo "${registered[0]}" > "$data/upstream.model"
    (umask 077; ctl key create --name "$name" --models "$list" --default-model "${registered[0]}" \
       > "$data/upstream.key")
  fi
  key=$(cat "$data/upstream.key")
  key_label="upstream key"
  model=$(cat "$data/upstream.model")
fi

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

if [ -z "$upstream" ]; then
  stack_spawn "$build/mock-upstream" --listen "$TALLY_MOCK_ADDR" --quiet
  stack_wait_port "$mock_port"
fi
stack_spawn "$build/tally-agent" --listen "$TALLY_AGENT_ADDR" --db "$db" \
  --records "$TALLY_RECORDS_ADDR" --metrics "127.0.0.1:$metrics_port" \
  --haproxy-socket "$data/haproxy.sock"
stack_wait_port "$agent_port"
stack_spawn haproxy -db -f haproxy/haproxy.cfg
stack_wait_port "$gateway_port"
stack_spawn "$build/tally-queryd" --db "$db" --listen "127.0.0.1:$queryd_port"
stack_wait_port "$queryd_port"

cat <<MSG

tally is running: gateway http://$TALLY_GATEWAY_ADDR (agent $TALLY_AGENT_ADDR, upstream ${upstream:-mock $TALLY_MOCK_ADDR})
$key_label: $key

  curl -s http://$TALLY_GATEWAY_ADDR/v1/chat/completions \\
    -H "Authorization: Bearer $key" -H "Content-Type: application/json" \\
    -d '{"model":"$model","messages":[{"role":"user","content":"Hello"}]}'

  curl -sN http://$TALLY_GATEWAY_ADDR/v1/chat/completions \\
    -H "Authorization: Bearer $key" -H "Content-Type: application/json" \\
    -d '{"model":"$model","stream":true,"messages":[{"role":"user","content":"Hello"}]}'

dashboard: http://127.0.0.1:$queryd_port/
operator token ($token_note): $TALLY_OPERATOR_TOKEN

  curl -s http://127.0.0.1:$queryd_port/api/summary -H "Authorization: Bearer $TALLY_OPERATOR_TOKEN"

Manage keys with: $build/tallyctl --db $db key list
Ctrl-C stops everything.
MSG

# Any process ending takes the others down with it.
wait -n "${stack_pids[@]}"
echo "stopping tally" >&2
