# Sourced by scripts/run.sh, scripts/run-cluster.sh and the loadtest/bench-*.sh scripts:
# starting and stopping the local stack's processes, the settings they give it, and the
# demo data and printed instructions of make run and make run-cluster. Expects $root and
# $build.

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

# stack_haproxy_as_root DIR: sets stack_haproxy_root to the arguments that say, when this
# runs as root, that HAProxy runs as root on purpose (a global section in
# DIR/haproxy-root.cfg: uid 0, chroot /); HAProxy 3.4 warns on every start otherwise.
stack_haproxy_root=()
stack_haproxy_as_root() {
  [ "$(id -u)" -eq 0 ] || return 0
  printf 'global\n    uid 0\n    chroot /\n' > "$1/haproxy-root.cfg"
  stack_haproxy_root=(-f "$1/haproxy-root.cfg")
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

# stack_wait_port PORT [WHAT]: waits for a listener on 127.0.0.1:PORT (WHAT names it).
stack_wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1${2:+ ($2)}: see the logs" >&2
  return 1
}

# stack_wait_listener ADDR [WHAT]: as stack_wait_port for an agent address, host:port or
# unix:PATH.
stack_wait_listener() {
  local path=${1#unix:}
  [ "$path" != "$1" ] || { stack_wait_port "${1##*:}" "${2:-}"; return; }
  for _ in $(seq 100); do
    [ -S "$path" ] && return 0
    sleep 0.1
  done
  echo "nothing listens on $path: see the logs" >&2
  return 1
}

# stack_ports_free VAR=PORT:WHAT...: fails, naming the variable and the listener, when
# 127.0.0.1:PORT cannot be bound (TCP; a WHAT containing "UDP" checks UDP as well), so
# that a taken port is named before anything starts and fails on another's account.
stack_ports_free() {
  python3 - "$@" <<'PY'
import socket, sys
for arg in sys.argv[1:]:
    var, rest = arg.split("=", 1)
    port, what = rest.split(":", 1)
    kinds = [socket.SOCK_STREAM] + ([socket.SOCK_DGRAM] if "UDP" in what else [])
    for kind in kinds:
        with socket.socket(socket.AF_INET, kind) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", int(port)))
            except OSError as e:
                proto = "TCP" if kind == socket.SOCK_STREAM else "UDP"
                sys.exit(f"port {port} ({proto}) is taken ({e.strerror}): it is {var}, {what};"
                         f" set {var} to a free port")
PY
}

# stack_seed DB MOCK_PORT: the demo providers (both served by the mock upstream) and
# their models, created or updated.
stack_seed() {
  local ctl=("$build/tallyctl" --db "$1")
  "${ctl[@]}" provider set mock-openai --api openai --backend be_mock_openai --url "http://127.0.0.1:$2"
  "${ctl[@]}" provider set mock-anthropic --api anthropic --backend be_mock_anthropic --url "http://127.0.0.1:$2"
  "${ctl[@]}" model set mock-gpt --provider mock-openai --input-micros 150000 --output-micros 600000 --cached-micros 75000
  "${ctl[@]}" model set mock-claude --provider mock-anthropic --input-micros 3000000 --output-micros 15000000 --cached-micros 300000
  # A web search at the providers' $10 per 1000 calls: Codex CLI offers one in every
  # request, which a model without the price refuses (docs/pricing.md).
  "${ctl[@]}" prices set mock-gpt --web-search-micros-per-call 10000 >/dev/null
  "${ctl[@]}" prices set mock-claude --web-search-micros-per-call 10000 >/dev/null
  echo "mock-gpt and mock-claude price a web search (\$0.01 a call): Codex CLI offers one in every request"
}

# stack_haproxy_env AGENT_PORT MOCK_PORT MOCK_CREDENTIAL RECORDS_PORT DB: what
# haproxy/tally.cfg reads from its environment, but for the gateway address and run
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
  export TALLY_NBTHREAD=${TALLY_NBTHREAD:-2}
}

# stack_demo_key DB MOCK_PORT DIR: on first use seeds DB (stack_seed) and makes the demo
# key, kept in DIR/demo.key (mode 600) so that every run can print it: keys made with
# tallyctl are shown once and never stored in clear. Sets key, key_label and model.
stack_demo_key() {
  local name
  if [ ! -s "$3/demo.key" ]; then
    echo "seeding $1"
    stack_seed "$1" "$2"
    name=demo
    "$build/tallyctl" --db "$1" key list --json | grep -q '"name":"demo"' && name="demo-$(date +%s)"
    (umask 077; "$build/tallyctl" --db "$1" key create --name "$name" --default-model mock-gpt > "$3/demo.key")
  fi
  key=$(cat "$3/demo.key")
  key_label="demo key"
  model=mock-gpt
}

# stack_upstream DB DIR: TALLY_UPSTREAM=http://HOST:PORT[/v1] serves the user's own
# OpenAI-compatible server instead of the mock: on first use the provider "upstream"
# (tally.cfg's be_upstream), the models its GET /v1/models lists (unpriced) and a key
# allowed them (DIR/upstream.key) are registered in DB. TALLY_UPSTREAM_API_KEY is sent
# to it as a bearer token when the server wants one. Sets upstream (empty without
# TALLY_UPSTREAM) and then key, key_label and model; exports TALLY_UPSTREAM_ADDR.
stack_upstream() {
  local ctl=("$build/tallyctl" --db "$1") base auth listed models registered m name list
  upstream=${TALLY_UPSTREAM:-}
  [ -n "$upstream" ] || return 0
  if [[ ! $upstream =~ ^http://([A-Za-z0-9.-]+):([0-9]+)(/v1)?/?$ ]]; then
    echo "TALLY_UPSTREAM must be http://HOST:PORT or http://HOST:PORT/v1 (got '$upstream')" >&2
    exit 2
  fi
  export TALLY_UPSTREAM_ADDR="${BASH_REMATCH[1]}:${BASH_REMATCH[2]}"
  base="http://$TALLY_UPSTREAM_ADDR"
  if [ ! -s "$2/upstream.key" ]; then
    auth=()
    [ -n "${TALLY_UPSTREAM_API_KEY:-}" ] && auth=(-H "Authorization: Bearer $TALLY_UPSTREAM_API_KEY")
    listed=$(curl -sf --max-time 10 "${auth[@]}" "$base/v1/models") || {
      echo "TALLY_UPSTREAM: GET $base/v1/models failed: is the server up?" >&2; exit 1; }
    models=$(printf '%s' "$listed" | python3 -c 'import json, sys
for m in json.load(sys.stdin).get("data", []):
    if isinstance(m, dict) and isinstance(m.get("id"), str):
        print(m["id"])') || { echo "TALLY_UPSTREAM: $base/v1/models is not an OpenAI model list" >&2; exit 1; }
    "${ctl[@]}" provider set upstream --api openai --backend be_upstream --url "$base"
    registered=()
    while IFS= read -r m; do
      [ -n "$m" ] || continue
      if "${ctl[@]}" model set "$m" --provider upstream >/dev/null 2>&1; then
        registered+=("$m")
      else
        echo "TALLY_UPSTREAM: model '$m' not registered (a name tallyctl refuses)" >&2
      fi
    done <<< "$models"
    [ ${#registered[@]} -gt 0 ] || { echo "TALLY_UPSTREAM: $base/v1/models lists no usable model" >&2; exit 1; }
    echo "registered ${#registered[@]} models of $base: ${registered[*]}"
    name=upstream
    "${ctl[@]}" key list --json | grep -q '"name":"upstream"' && name="upstream-$(date +%s)"
    list=$(IFS=,; echo "${registered[*]}")
    echo "${registered[0]}" > "$2/upstream.model"
    (umask 077; "${ctl[@]}" key create --name "$name" --models "$list" --default-model "${registered[0]}" \
       > "$2/upstream.key")
  fi
  key=$(cat "$2/upstream.key")
  key_label="upstream key"
  model=$(cat "$2/upstream.model")
}

# stack_local_secrets DIR: the mock upstream's credential (DIR/mock.credential) and the
# operator token for tally-queryd: TALLY_OPERATOR_TOKEN, else one made once and kept in
# DIR/operator.token; both mode 600. Sets token_note and exports TALLY_OPERATOR_TOKEN.
stack_local_secrets() {
  [ -s "$1/mock.credential" ] || (umask 077; head -c 18 /dev/urandom | base64 | tr '+/' '-_' > "$1/mock.credential")
  if [ -n "${TALLY_OPERATOR_TOKEN:-}" ]; then
    token_note="from TALLY_OPERATOR_TOKEN"
  else
    [ -s "$1/operator.token" ] || (umask 077; head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=' > "$1/operator.token")
    TALLY_OPERATOR_TOKEN=$(cat "$1/operator.token")
    export TALLY_OPERATOR_TOKEN
    token_note="kept in $1/operator.token"
  fi
}

# stack_curl ADDR KEY MODEL [stream]: a blank line and a curl to paste, unary or
# streaming, through the gateway at ADDR.
stack_curl() {
  local flags=-s body='"messages"'
  [ "${4:-}" = stream ] && flags=-sN body='"stream":true,"messages"'
  cat <<MSG

  curl $flags http://$1/v1/chat/completions \\
    -H "Authorization: Bearer $2" -H "Content-Type: application/json" \\
    -d '{"model":"$3",$body:[{"role":"user","content":"Hello"}]}'
MSG
}

# stack_client_lines ADDR KEY: the two lines that point Claude Code and Codex CLI at the
# gateway at ADDR with KEY on the demo's models (README.md, "Clients", has the rest).
stack_client_lines() {
  cat <<MSG

Claude Code: ANTHROPIC_BASE_URL=http://$1 ANTHROPIC_API_KEY=$2 ANTHROPIC_MODEL=mock-claude claude
Codex CLI:   TALLY_KEY=$2 codex -m mock-gpt -c model_provider=tally -c 'model_providers.tally={name="tally",base_url="http://$1/v1",env_key="TALLY_KEY",wire_api="responses"}'
MSG
}

# stack_queryd_lines PORT: the dashboard's address, the operator token and a curl of the
# API (stack_local_secrets set the token).
stack_queryd_lines() {
  cat <<MSG

dashboard: http://127.0.0.1:$1/
operator token ($token_note): $TALLY_OPERATOR_TOKEN

  curl -s http://127.0.0.1:$1/api/summary -H "Authorization: Bearer $TALLY_OPERATOR_TOKEN"
MSG
}
