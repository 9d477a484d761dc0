#!/usr/bin/env bash
# Installs what tally needs to build, run and test, only what is missing: Debian packages,
# then the npm packages pinned by package-lock.json files (tests/sdk: the official OpenAI
# and Anthropic SDKs test_sdk.py drives; tests/agents: Claude Code, Codex CLI and the
# OpenAI Agents SDK that test_agents.py drives; queryd/dashboard: the chart library the
# build vendors into tally-queryd, and the browser test's playwright-core).
# TALLY_DEPS=build installs only what `make build` needs (docker/Dockerfile's build stage).
# Runs as root on Debian 12 (CI, developers); elsewhere it says what is missing and fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pkgs=(gcc make pkg-config libev-dev libsqlite3-dev libpq-dev libmsgpack-dev libcjson-dev
      libssl-dev libhttp-parser-dev libmicrohttpd-dev)
npm_dirs=(queryd/dashboard)
if [ "${TALLY_DEPS:-all}" != build ]; then
  # postgresql: the tests run the store suites on a private cluster too
  # (tests/pgserver.py: initdb and pg_ctl from /usr/lib/postgresql/15/bin).
  # liblua5.4-dev: the unit and fuzz tests run haproxy/capture.lua under an embedded Lua.
  pkgs+=(liblua5.4-dev clang libclang-rt-14-dev haproxy sqlite3 postgresql python3-psycopg2 chromium python3
         python3-pytest python3-msgpack python3-yaml curl openssl wrk valgrind docker-compose)
  # capture.lua's tests run under the Luas HAProxy embeds (2.6: 5.3, 3.4: 5.4); the fuzz
  # target fuzz_capture_request links 5.4 (tests/test_lua.py, tests/fuzz/).
  pkgs+=(lua5.3 lua5.4 liblua5.4-dev)
  npm_dirs+=(tests/sdk tests/agents)
fi
# Any node on PATH will do (NodeSource, nvm). Debian's own is v18: the pinned SDKs
# document Node 20+, but pass test_sdk.py on Debian 12's 18.20.4 as well.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]} (run as root or install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian's haproxy package enables a system service; tally runs its own instances.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active -q haproxy 2>/dev/null; then
    systemctl stop haproxy || true
  fi
  # So does postgresql's (a cluster on port 5432); the tests start their own. Only one
  # this run installed is stopped: a cluster somebody uses is left alone.
  if [[ " ${missing[*]} " == *" postgresql "* ]] && command -v systemctl >/dev/null 2>&1 &&
     systemctl is-active -q postgresql 2>/dev/null; then
    systemctl stop postgresql || true
  fi
fi
# npm ci replaces node_modules; the touch marks it as matching the lock file, so that
# it runs again only when the lock file changes.
for dir in "${npm_dirs[@]}"; do
  [ -f "$root/$dir/package-lock.json" ] || continue
  nm="$root/$dir/node_modules"
  if [ ! -d "$nm" ] || [ "$root/$dir/package-lock.json" -nt "$nm" ]; then
    echo "install-deps: npm ci in $dir"
    (cd "$root/$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$nm"
  fi
done
