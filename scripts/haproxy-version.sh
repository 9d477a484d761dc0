#!/usr/bin/env bash
# scripts/haproxy-version.sh VERSION: prints the path of an HAProxy VERSION binary the
# tests can run (TALLY_HAPROXY), preparing it on first use.
#
#   2.6  the host's /usr/sbin/haproxy (Debian 12)
#   3.0  Debian 13 (trixie)      3.2  Debian sid      3.4  Debian experimental (on sid)
#
# A 3.x version is Debian's own package, installed in a minimal chroot in
# build/haproxy/VERSION/root and run through the wrapper build/haproxy/VERSION/haproxy
# (scripts/debian-root.sh): HAProxy sees the host's files (configurations, sockets,
# temporary directories, the system CA bundle), needs no root, and keeps its own PID
# (tests stop and reload it by PID, -sf included).
#
# The first run needs root on Debian (it installs debootstrap if missing) and the
# Debian mirror of the host's apt sources (TALLY_DEBIAN_MIRROR overrides it); it took
# 21 to 28 s per version here. Later runs only print the path. Nothing is written outside
# build/ but for apt's own cache when debootstrap is installed.
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail
root_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/debian-root.sh
. "$root_dir/scripts/debian-root.sh"
version=${1:-}

case "$version" in
  2.6) suite= ;;
  3.0) suite=trixie ;;
  3.2) suite=sid ;;
  3.4) suite=sid; extra=experimental ;;
  *) echo "usage: $0 2.6|3.0|3.2|3.4" >&2; exit 2 ;;
esac
extra=${extra:-}

say() { echo "haproxy-version $version: $*" >&2; }
die() { say "$*"; exit 1; }

# "X.Y.Z" (or "X.Y-devN") as `haproxy -v` reports it, without Debian's revision.
reported_version() {
  "$1" -v 2>/dev/null | sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p' | sed 's/-[0-9][^-]*$//'
}

if [ -z "$suite" ]; then
  bin=/usr/sbin/haproxy
  [ -x "$bin" ] || die "$bin is missing: install Debian 12's haproxy (make deps)"
  got=$(reported_version "$bin")
  case "$got" in 2.6|2.6.*) ;; *) die "$bin is HAProxy ${got:-?}, not 2.6" ;; esac
  echo "$bin"
  exit 0
fi

dir=$root_dir/build/haproxy/$version
wrapper=$dir/haproxy
ready=$dir/ready
if [ -f "$ready" ] && [ -x "$wrapper" ]; then
  echo "$wrapper"
  exit 0
fi

mkdir -p "$dir"
# One provisioning at a time per version (make -j, two checkouts' tests).
exec 9>"$dir/lock"
flock 9
if [ -f "$ready" ] && [ -x "$wrapper" ]; then
  echo "$wrapper"
  exit 0
fi

started=$(date +%s)
DEBIAN_ROOT_WHO="haproxy-version $version"
debian_root_make "$dir" "$suite" "$extra" haproxy ca-certificates
debian_root_wrapper "$dir" usr/sbin/haproxy "$wrapper"

# What the gateway needs of the binary: the version asked for, Lua, the SPOE filter,
# lua-load-per-thread and `ca-file @system-ca` accepted by `haproxy -c`.
got=$(reported_version "$wrapper")
case "$got" in "$version"|"$version".*|"$version"-*) ;; *) die "the chroot's haproxy is ${got:-unusable}, not $version" ;; esac
features=$("$wrapper" -vv 2>&1) || die "haproxy -vv failed: $features"
grep -q '^Built with Lua version' <<<"$features" || die "haproxy $got is built without Lua"
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
cat > "$check/check.lua" <<'EOF'
core.register_service("tally-check", "http", function(applet) applet:set_status(204); applet:start_response() end)
EOF
cat > "$check/spoe.conf" <<'EOF'
[check]
spoe-agent check
    messages check
    use-backend agents
    timeout hello 1s
    timeout idle 1s
    timeout processing 1s
spoe-message check
    args id=unique-id
    event on-frontend-http-request
EOF
cat > "$check/haproxy.cfg" <<EOF
global
    nbthread 2
    lua-load-per-thread $check/check.lua
defaults
    mode http
    timeout connect 1s
    timeout client 1s
    timeout server 1s
frontend fe
    bind 127.0.0.1:1
    filter spoe engine check config $check/spoe.conf
    http-request use-service lua.tally-check
backend agents
    mode tcp
    server a 127.0.0.1:1
backend tls
    server s 127.0.0.1:1 ssl verify required ca-file @system-ca
EOF
if ! out=$("$wrapper" -c -f "$check/haproxy.cfg" 2>&1); then
  printf '%s\n' "$out" >&2
  die "haproxy $got -c refused the check configuration (Lua, SPOE, @system-ca)"
fi

echo "$got" > "$ready"
say "haproxy $got ready in $(( $(date +%s) - started )) s"
echo "$wrapper"
