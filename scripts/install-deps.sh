#!/usr/bin/env bash
# Installs the Debian packages tally needs to build, run and test, only those missing.
# Runs as root on Debian 12 (CI, developers); elsewhere it says what is missing and fails.
set -euo pipefail
pkgs=(gcc make pkg-config clang libclang-rt-14-dev
      haproxy libev-dev libsqlite3-dev sqlite3 libmsgpack-dev libcjson-dev libssl-dev
      libhttp-parser-dev python3 python3-pytest python3-msgpack curl wrk valgrind)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
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
