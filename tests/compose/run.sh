#!/usr/bin/env bash
# tests/compose/run.sh (make test-compose): the docker-compose stack end to end, built
# from this checkout. Makes the base images if missing (scripts/compose-base.sh), builds
# every image (--build), starts the stack with the demo profile under a compose project
# of its own, on free host ports and a free subnet, waits for every service to be
# healthy, creates a key with tallyctl in the agent's container, sends one unary and one
# streamed chat request through the gateway with curl, and checks their rows through
# queryd's JSON API (model, the mock's token counts, stream flag, status, outcome).
# Prints "N passed, N failed" last; exit status 0 only when nothing failed.
#
# On every exit path it removes what it made: the project's containers, networks,
# volumes and images (`down -v --rmi all`: every image is tagged with the project's
# name), its build stage's image (labelled tally.image-tag), its scratch files, and the dockerd it started when none
# was running. The base images are kept for the next run (they take a minute to make);
# TALLY_COMPOSE_CLEAN=all removes them too. Needs root on first use (debootstrap,
# installing docker.io) and a Debian mirror.
set -euo pipefail
root_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/docker-env.sh
. "$root_dir/scripts/docker-env.sh"

passed=0
failed=0
project=tallytest$$$(date +%s)
tmp=$(mktemp -d)
started=$(date +%s)

say() { echo "test-compose: $*" >&2; }
pass() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

compose() {
  "${COMPOSE[@]}" -p "$project" -f "$root_dir/docker-compose.yml" \
    --env-file "$tmp/env" --profile demo "$@"
}

cleanup() {
  local rc=$?
  set +e
  if [ ${#COMPOSE[@]} -gt 0 ] && [ -f "$tmp/env" ]; then
    if [ "$failed" -gt 0 ] || [ "$rc" -ne 0 ]; then
      compose logs --no-color --tail 40 >&2 2>&1
    fi
    compose down -v --rmi all --remove-orphans >"$tmp/down.log" 2>&1 ||
      { cat "$tmp/down.log" >&2; say "compose down failed"; }
    docker image prune -f --filter "label=tally.image-tag=$project" >/dev/null 2>&1
    if [ "${TALLY_COMPOSE_CLEAN:-}" = all ]; then
      docker image rm tally/base:bookworm tally/base:sid >/dev/null 2>&1
      say "removed the base images (TALLY_COMPOSE_CLEAN=all)"
    fi
  fi
  rm -rf "$tmp"
  docker_release
  echo "$passed passed, $failed failed ($(( $(date +%s) - started )) s)"
  if [ "$rc" -eq 0 ] && [ "$failed" -gt 0 ]; then rc=1; fi
  exit "$rc"
}
trap cleanup EXIT

docker_ensure
say "compose: ${COMPOSE[*]}; project $project"
"$root_dir/scripts/compose-base.sh"

# A free loopback port: bound by the kernel's choice, then released.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# A /24 under 172.31.0.0/16 that no Docker network (nor host route) uses.
free_subnet() {
  local used n nets
  mapfile -t nets < <(docker network ls -q)
  used=$({ docker network inspect --format '{{range .IPAM.Config}}{{.Subnet}} {{end}}' "${nets[@]}"; ip -4 route; } 2>/dev/null)
  for n in $(shuf -i 100-249); do
    grep -q "172\.31\.$n\." <<<"$used" || { echo "$n"; return 0; }
  done
  return 1
}
gateway_port=$(free_port)
queryd_port=$(free_port)
net=$(free_subnet) || { say "no free 172.31.X.0/24 subnet"; exit 1; }
token=$(openssl rand -hex 32)
cat > "$tmp/env" <<ENV
TALLY_IMAGE_TAG=$project
TALLY_OPERATOR_TOKEN=$token
TALLY_GATEWAY_SECRET=$(openssl rand -base64 32)
TALLY_MOCK_CREDENTIAL=demo-credential
TALLY_GATEWAY_PUBLISH=127.0.0.1:$gateway_port
TALLY_QUERYD_PUBLISH=127.0.0.1:$queryd_port
TALLY_SUBNET=172.31.$net.0/24
TALLY_MOCK_IP=172.31.$net.20
ENV
chmod 600 "$tmp/env"

say "building the images and starting the stack (gateway 127.0.0.1:$gateway_port, queryd 127.0.0.1:$queryd_port)"
up_started=$(date +%s)
if compose up -d --build >"$tmp/up.log" 2>&1; then
  pass "images built and stack started ($(( $(date +%s) - up_started )) s)"
else
  tail -n 40 "$tmp/up.log" >&2
  fail "images built and stack started"
  exit 1
fi

# Every long-running service healthy, and demo-seed exited 0.
wait_healthy() {
  local svc id state i
  for i in $(seq 1 120); do
    state=ok
    for svc in agent haproxy queryd mock; do
      id=$(compose ps -q "$svc")
      [ -n "$id" ] || { state=missing; break; }
      [ "$(docker inspect --format '{{.State.Health.Status}}' "$id")" = healthy ] || { state=$svc; break; }
    done
    if [ "$state" = ok ]; then
      id=$(compose ps -q demo-seed)
      [ -n "$id" ] && [ "$(docker inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$id")" = "exited 0" ] || state=demo-seed
    fi
    [ "$state" = ok ] && return 0
    sleep 1
  done
  say "not ready after 120 s: $state"
  return 1
}
if wait_healthy; then pass "agent, haproxy, queryd and mock healthy, demo seeded"; else fail "stack healthy"; exit 1; fi

# The self-check ran before the agent and queryd started.
# The logs are read whole first: `grep -q` in a pipe under pipefail fails the pipe when
# it stops reading before compose has written everything (SIGPIPE).
for svc in agent queryd; do
  logs=$(compose logs --no-color "$svc" 2>&1 || true)
  if grep -q "tally-$svc --self-check: [0-9]* checks passed$" <<<"$logs"; then
    pass "$svc: self-check passed before the start"
  else
    grep -- "--self-check\|^.*FAIL" <<<"$logs" >&2 || true
    fail "$svc: self-check passed before the start"
  fi
done

haproxy_version=$(compose exec -T haproxy haproxy -v | sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p')
case "$haproxy_version" in
  3.4.*) pass "HAProxy $haproxy_version" ;;
  *) fail "HAProxy is ${haproxy_version:-?}, not 3.4" ;;
esac

key=$(compose exec -T agent tallyctl key create compose-test --default-model mock-gpt | tr -d '\r')
if [ -n "$key" ]; then pass "key created with tallyctl"; else fail "key created with tallyctl"; exit 1; fi

gw=http://127.0.0.1:$gateway_port
# The agent sees the new key at its next configuration poll (250 ms): until then the
# key is unknown (401, a row without a key, which the checks below do not count).
for _ in $(seq 1 20); do
  status=$(curl -sS -o "$tmp/unary.json" -w '%{http_code}' "$gw/v1/chat/completions" \
    -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -H 'x-mock-prompt-tokens: 11' -H 'x-mock-completion-tokens: 7' \
    -d '{"model":"mock-gpt","messages":[{"role":"user","content":"hello"}]}')
  [ "$status" = 401 ] || break
  sleep 0.25
done
if [ "$status" = 200 ] && grep -q '"completion_tokens":7' "$tmp/unary.json"; then
  pass "unary request through the gateway: 200"
else
  fail "unary request through the gateway: $status $(head -c 300 "$tmp/unary.json")"
fi
status=$(curl -sS -N -o "$tmp/stream.txt" -w '%{http_code}' "$gw/v1/chat/completions" \
  -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -H 'x-mock-prompt-tokens: 13' -H 'x-mock-completion-tokens: 5' \
  -d '{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}')
if [ "$status" = 200 ] && grep -q '^data: \[DONE\]' "$tmp/stream.txt"; then
  pass "streamed request through the gateway: 200"
else
  fail "streamed request through the gateway: $status $(head -c 300 "$tmp/stream.txt")"
fi

# Both rows, through queryd's API (the writer commits in batches: wait for them).
api() {
  curl -sS -H "Authorization: Bearer $token" "http://127.0.0.1:$queryd_port$1"
}
for _ in $(seq 1 50); do
  api "/api/requests?key=compose-test&limit=10" >"$tmp/rows.json" 2>/dev/null || true
  [ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["requests"]))' "$tmp/rows.json" 2>/dev/null)" = 2 ] && break
  sleep 0.2
done
check_row() {
  python3 - "$tmp/rows.json" "$@" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["requests"]
stream = sys.argv[2] == "1"
want = {"model": "mock-gpt", "status": 200, "stream": stream, "outcome": "complete",
        "prompt_tokens": int(sys.argv[3]), "completion_tokens": int(sys.argv[4]),
        "key_name": "compose-test"}
got = [r for r in rows if r.get("stream") is stream]
if len(got) != 1:
    print(f"{len(got)} rows with stream={stream} among {len(rows)}")
    sys.exit(1)
bad = {k: got[0].get(k) for k, v in want.items() if got[0].get(k) != v}
if bad:
    print(f"expected {want}, differs in {bad}")
    sys.exit(1)
PY
}
if why=$(check_row 0 11 7); then
  pass "unary row in queryd: mock-gpt, 11 + 7 tokens, stream false, 200, complete"
else
  fail "unary row in queryd: $why"
fi
if why=$(check_row 1 13 5); then
  pass "streamed row in queryd: mock-gpt, 13 + 5 tokens, stream true, 200, complete"
else
  fail "streamed row in queryd: $why"
fi
