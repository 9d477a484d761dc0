# shellcheck shell=bash
# scripts/debian-root.sh: sourced by scripts/haproxy-version.sh and
# scripts/python-clients.sh. Makes a minimal Debian chroot of a newer suite than the
# host's and runs its programs on the host without chroot(2): through the chroot's own
# dynamic loader and libraries, so that a program sees the host's files and sockets,
# needs no root, and keeps its own PID (tests stop and reload it by PID).
#
#   debian_root_make DIR SUITE EXTRA PACKAGE...
#       debootstrap SUITE (minbase) into DIR/root, then apt-get install the packages
#       there (from EXTRA, a suite such as experimental, when not empty). Needs root and
#       the Debian mirror of the host's apt sources (TALLY_DEBIAN_MIRROR overrides it).
#       debootstrap's downloads are kept in build/debian-cache/SUITE for the next root;
#       nothing stays mounted under DIR (make clean removes build/ with rm -rf).
#   debian_root_wrapper DIR PROGRAM OUT [ARG...]
#       writes OUT, a script that execs DIR/root/PROGRAM through the chroot's loader,
#       with DIR/root/ARG... (paths in the chroot, a script for an interpreter) before
#       its own arguments.
#
# The caller holds the lock (flock on DIR/lock) and says progress through debian_root_say.

debian_root_say() { echo "${DEBIAN_ROOT_WHO:-debian-root}: $*" >&2; }
debian_root_die() { debian_root_say "$*"; exit 1; }

debian_root_mounts_under() {
  awk -v p="$1" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r
}

debian_root_release_mounts() {
  local m
  for m in $(debian_root_mounts_under "$1/"); do umount -l "$m" 2>/dev/null || true; done
  if [ -n "$(debian_root_mounts_under "$1/")" ]; then
    debian_root_die "still mounted under $1: $(debian_root_mounts_under "$1/" | tr '\n' ' ')"
  fi
}

# The Debian mirror the host's apt uses (deb822 or one-line sources), else deb.debian.org.
debian_root_mirror() {
  local f m
  m=${TALLY_DEBIAN_MIRROR:-$(
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
      [ -f "$f" ] && cat "$f"
    done |
      awk '/^[[:space:]]*#/ { next }
           /^URIs:/ { for (i = 2; i <= NF; i++) print $i }
           /^deb[[:space:]]/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' |
      grep -E '/debian/?$' | head -n 1 || true)}
  m=${m:-http://deb.debian.org/debian}
  echo "${m%/}"
}

debian_root_make() {
  local dir=$1 suite=$2 extra=$3
  shift 3
  local root=$dir/root cache mirror
  cache=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/debian-cache/$suite
  [ "$(id -u)" -eq 0 ] || debian_root_die "the first run needs root (debootstrap, apt-get in the chroot)"
  if ! command -v debootstrap >/dev/null 2>&1; then
    debian_root_say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null 2>&1 || {
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    }
  fi
  mirror=$(debian_root_mirror)
  # A chroot whose debootstrap did not finish is made again from scratch.
  if [ ! -f "$dir/bootstrapped" ]; then
    debian_root_release_mounts "$root"
    rm -rf "$root"
    mkdir -p "$cache"
    debian_root_say "debootstrap $suite from $mirror into $root"
    debootstrap --variant=minbase --include=ca-certificates --cache-dir="$cache" \
      "$suite" "$root" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
        debian_root_release_mounts "$root"
        tail -n 20 "$dir/debootstrap.log" >&2
        debian_root_die "debootstrap failed (log: $dir/debootstrap.log)"
      }
    debian_root_release_mounts "$root"
    touch "$dir/bootstrapped"
  fi
  # Services are never started inside the chroot (a server package would start one).
  printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  # The host's local CAs (a TLS-inspecting proxy's, say), for apt over https.
  if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
    debian_root_in "$root" update-ca-certificates >/dev/null 2>&1 ||
      debian_root_say "update-ca-certificates failed in the chroot"
  fi
  # Sid's and experimental's Release files carry a Valid-Until that the mirror (or a
  # snapshot of it) can be past; signatures are still checked.
  local apt_opts=(-o Dpkg::Use-Pty=0 -o APT::Install-Recommends=false -o Acquire::Check-Valid-Until=false)
  local target=()
  if [ -n "$extra" ]; then
    echo "deb $mirror $extra main" > "$root/etc/apt/sources.list.d/$extra.list"
    target=(-t "$extra")
  fi
  debian_root_say "apt-get install $*${extra:+ from $extra}"
  {
    debian_root_in "$root" apt-get "${apt_opts[@]}" update -qq &&
    debian_root_in "$root" apt-get "${apt_opts[@]}" install -y -qq "${target[@]}" "$@" &&
    debian_root_in "$root" apt-get clean
  } >"$dir/apt.log" 2>&1 || {
    debian_root_release_mounts "$root"
    tail -n 20 "$dir/apt.log" >&2
    debian_root_die "apt-get failed in the chroot (log: $dir/apt.log)"
  }
  debian_root_release_mounts "$root"
}

debian_root_in() {
  local root=$1
  shift
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}

debian_root_wrapper() {
  local dir=$1 program=$2 out=$3
  shift 3
  local root=$dir/root loader loader_rel
  loader=$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
  [ -f "$loader" ] || loader=$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
  [ -f "$loader" ] || debian_root_die "no x86-64 dynamic loader in $root"
  case "$(readlink -f "$loader")" in "$root"/*) ;; *) debian_root_die "$loader resolves outside the chroot" ;; esac
  loader_rel=${loader#"$root"/}
  # The wrapper finds the root beside itself, so that build/ may move.
  {
    echo '#!/bin/sh'
    echo "# $program of the Debian chroot beside this file, made by scripts/debian-root.sh:"
    echo "# the chroot's loader and libraries, the host's filesystem, the program's own PID."
    echo "root=\$(cd \"\${0%/*}\" && pwd)/root"
    # $root expands in the wrapper, not here.
    # shellcheck disable=SC2016
    printf 'exec "$root/%s" --library-path "$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu" "$root/%s"' \
      "$loader_rel" "$program"
    local a
    # shellcheck disable=SC2016
    for a in "$@"; do printf ' "$root/%s"' "$a"; done
    echo ' "$@"'
  } > "$out.new"
  chmod 755 "$out.new"
  mv "$out.new" "$out"
}
