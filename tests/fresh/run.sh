#!/usr/bin/env bash
# tests/fresh/run.sh (make test-fresh): the README's two commands on a pristine Debian 12.
# In a container of the project's debootstrapped Debian 12 base (tally/base:bookworm,
# scripts/compose-base.sh, as make test-compose uses) with make and git added and
# nothing else, the checkout's tracked files (as they are in the working tree) are put in
# /root/tally; there tests/fresh/drive.py types `make run` on a terminal, sends the
# printed curls, checks the rows and types Ctrl-C; then `make test` runs there, whole.
# Logs: build/fresh/run.log (make run), build/fresh/test.log (make test).
# Prints "N passed, N failed" last (make test's pytest counts plus this script's checks);
# exit status 0 only when nothing failed. The container is removed on every exit path,
# and the dockerd started here, if any, stopped; the base image is kept.
set -euo pipefail
root_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=scripts/docker-env.sh
. "$root_dir/scripts/docker-env.sh"

passed=0
failed=0
started=$(date +%s)
container=tallyfresh$$$(date +%s)
logs=$root_dir/build/fresh
mkdir -p "$logs"
rm -f "$logs/run.log" "$logs/test.log"

say() { echo "test-fresh: $*" >&2; }
pass() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

cleanup() {
  local rc=$?
  set +e
  docker rm -f "$container" >/dev/null 2>&1
  docker_release
  echo "$passed passed, $failed failed ($(( $(date +%s) - started )) s)"
  if [ "$rc" -eq 0 ] && [ "$failed" -gt 0 ]; then rc=1; fi
  exit "$rc"
}
trap cleanup EXIT

docker_ensure
"$root_dir/scripts/compose-base.sh" bookworm

# Chromium (the dashboard's browser test) wants more than Docker's 64 MB of /dev/shm.
docker run -d --name "$container" --hostname fresh --shm-size=1g tally/base:bookworm \
  sleep infinity >/dev/null
say "container $container: installing make and git"
docker exec "$container" bash -c 'apt-get update -qq &&
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make git >/dev/null'
docker exec "$container" mkdir /root/tally
git -C "$root_dir" ls-files -z | tar -C "$root_dir" --null -T - -c |
  docker exec -i "$container" tar -x -C /root/tally
pass "a Debian 12 base with make and git, the checkout in /root/tally"

say "make run (the first one installs and builds: minutes)"
step=$(date +%s)
if python3 "$root_dir/tests/fresh/drive.py" "$container" "$logs/run.log"; then
  pass "make run, its curls and rows, Ctrl-C ($(( $(date +%s) - step )) s)"
else
  fail "make run, its curls and rows, Ctrl-C: see $logs/run.log"
fi

say "make test (log: $logs/test.log)"
step=$(date +%s)
rc=0
docker exec -w /root/tally "$container" make test >"$logs/test.log" 2>&1 || rc=$?
summary=$(grep -E '^=*.*[0-9]+ (passed|failed)' "$logs/test.log" | tail -n 1 || true)
p=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
f=0
for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$summary" | grep -oE '^[0-9]+' || true); do f=$((f + n)); done
grep -E '^(FAILED|ERROR) ' "$logs/test.log" || true
echo "make test: ${summary:-no pytest summary} (exit $rc, $(( $(date +%s) - step )) s)"
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; tail -n 30 "$logs/test.log"; fi
passed=$((passed + p))
failed=$((failed + f))
