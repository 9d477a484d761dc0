#!/usr/bin/env bash
# scripts/haproxy-version.sh VERSION: prints the path of an HAProxy VERSION binary the
# tests can run (TALLY_HAPROXY), preparing it on first use.
#
#   2.6  the host's /usr/sbin/haproxy (Debian 12)
#   3.0  Debian 13 (trixie)      3.2  Debian sid      3.4  Debian experimental (on sid)
#
# A 3.x version is Debian's own package, installed in a minimal chroot made with
# debootstrap in build/haproxy/VERSION/root, and run through the wrapper
# build/haproxy/VERSION/haproxy: it execs the chroot's dynamic loader on the chroot's
# haproxy with the chroot's libraries. No chroot(2) at run time, so HAProxy sees the
# host's files (configurations, sockets, temporary directories, the system CA bundle),
# needs no root, and keeps its own PID (tests stop and reload it by PID, -sf included).
#
# The first run needs root on Debian (it installs debootstrap if missing) and the
# Debian mirror of the host's apt sources (TALLY_DEBIAN_MIRROR overrides it); it took
# 21 to 28 s per version here. Later runs only print the path. Nothing is written outside
# build/haproxy/ (debootstrap's downloads are kept in build/haproxy/cache for the next
# chroot of the same suite) but for apt's own cache when debootstrap is installed.
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail
root_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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
root=$dir/root
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

[ "$(id -u)" -eq 0 ] || die "the first run needs root (debootstrap, apt-get in the chroot)"
started=$(date +%s)

# Nothing may stay mounted under build/: `make clean` removes it with rm -rf.
mounts_under() {
  awk -v p="$1" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r
}
release_mounts() {
  local m
  for m in $(mounts_under "$1/"); do umount -l "$m" 2>/dev/null || true; done
  if [ -n "$(mounts_under "$1/")" ]; then
    die "still mounted under $1: $(mounts_under "$1/" | tr '\n' ' ')"
  fi
}

if ! command -v debootstrap >/dev/null 2>&1; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null 2>&1 || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  }
fi

# The Debian mirror the host's apt uses (deb822 or one-line sources), else deb.debian.org.
host_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && cat "$f"
  done |
    awk '/^[[:space:]]*#/ { next }
         /^URIs:/ { for (i = 2; i <= NF; i++) print $i }
         /^deb[[:space:]]/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' |
    grep -E '/debian/?$' | head -n 1 || true
}
mirror=${TALLY_DEBIAN_MIRROR:-$(host_mirror)}
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}

in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}

# A chroot whose debootstrap did not finish is made again from scratch.
if [ ! -f "$dir/bootstrapped" ]; then
  release_mounts "$root"
  rm -rf "$root"
  mkdir -p "$root_dir/build/haproxy/cache/$suite"
  say "debootstrap $suite from $mirror into $root"
  debootstrap --variant=minbase --include=ca-certificates \
    --cache-dir="$root_dir/build/haproxy/cache/$suite" \
    "$suite" "$root" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
      release_mounts "$root"
      tail -n 20 "$dir/debootstrap.log" >&2
      die "debootstrap failed (log: $dir/debootstrap.log)"
    }
  release_mounts "$root"
  touch "$dir/bootstrapped"
fi

# Services are never started inside the chroot (the haproxy package would start one).
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
# The host's local CAs (a TLS-inspecting proxy's, say), for apt over https.
if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
  in_root update-ca-certificates >/dev/null 2>&1 || say "update-ca-certificates failed in the chroot"
fi
# Sid's and experimental's Release files carry a Valid-Until that the mirror (or a
# snapshot of it) can be past; signatures are still checked.
apt_opts=(-o Dpkg::Use-Pty=0 -o APT::Install-Recommends=false -o Acquire::Check-Valid-Until=false)
target=()
if [ -n "$extra" ]; then
  echo "deb $mirror $extra main" > "$root/etc/apt/sources.list.d/$extra.list"
  target=(-t "$extra")
fi
say "apt-get install haproxy${extra:+ from $extra}"
{
  in_root apt-get "${apt_opts[@]}" update -qq &&
  in_root apt-get "${apt_opts[@]}" install -y -qq "${target[@]}" haproxy ca-certificates &&
  in_root apt-get clean
} >"$dir/apt.log" 2>&1 || { tail -n 20 "$dir/apt.log" >&2; die "apt-get failed in the chroot (log: $dir/apt.log)"; }
release_mounts "$root"

# The wrapper: the chroot's loader, libraries and binary; exec keeps the PID.
loader=$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
[ -f "$loader" ] || loader=$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
[ -f "$loader" ] || die "no x86-64 dynamic loader in $root"
case "$(readlink -f "$loader")" in "$root"/*) ;; *) die "$loader resolves outside the chroot" ;; esac
loader_rel=${loader#"$root"/}
cat > "$wrapper.new" <<EOF
#!/bin/sh
# HAProxy from Debian $suite${extra:+ + $extra}, made by scripts/haproxy-version.sh $version:
# the chroot's loader and libraries, the host's filesystem, HAProxy's own PID.
root=\$(cd "\${0%/*}" && pwd)/root
exec "\$root/$loader_rel" --library-path "\$root/usr/lib/x86_64-linux-gnu:\$root/lib/x86_64-linux-gnu" "\$root/usr/sbin/haproxy" "\$@"
EOF
chmod 755 "$wrapper.new"
mv "$wrapper.new" "$wrapper"

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
