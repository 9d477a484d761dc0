#!/usr/bin/env bash
# scripts/compose-base.sh: makes the base images docker/Dockerfile builds FROM, without
# a registry: each is a Debian root made by debootstrap (--variant=minbase) and loaded
# with `docker import`.
#
#   tally/base:bookworm   Debian 12: the build stage and the runtime stages (the binaries
#                         link Debian 12's libraries)
#   tally/base:sid        Debian sid with experimental's sources: the HAProxy stage
#                         installs HAProxy 3.4 from experimental
#
# Each root carries the host's local CAs (/usr/local/share/ca-certificates, a
# TLS-inspecting proxy's, say) in its system bundle, and NODE_EXTRA_CA_CERTS points Node
# at that bundle, so that apt-get and npm in `docker build` trust what the host trusts.
# An image that exists is kept: the script only makes what is missing (idempotent), so
# `docker image rm tally/base:bookworm tally/base:sid` (or TALLY_COMPOSE_CLEAN=all with
# tests/compose/run.sh) makes it start over. Needs root (debootstrap) and a Docker
# daemon: one is started for the run if none answers (scripts/docker-env.sh). The Debian
# mirror is the host's apt mirror (TALLY_DEBIAN_MIRROR overrides it). Scratch files go
# under build/compose/ and are removed; debootstrap's downloads stay in
# build/compose/cache/ for the next run.
set -euo pipefail
root_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/docker-env.sh
. "$root_dir/scripts/docker-env.sh"
# shellcheck source=scripts/debian-root.sh
. "$root_dir/scripts/debian-root.sh"
DEBIAN_ROOT_WHO=compose-base

say() { echo "compose-base: $*" >&2; }
die() { say "$*"; exit 1; }

work=
cleanup() {
  if [ -n "$work" ] && [ -d "$work" ]; then
    debian_root_release_mounts "$work"
    rm -rf "$work"
  fi
  docker_release
}
trap cleanup EXIT

mirror=$(debian_root_mirror)

# make_base TAG SUITE [EXTRA_SUITE]
make_base() {
  local tag=$1 suite=$2 extra=${3:-} root started
  if docker image inspect "$tag" >/dev/null 2>&1; then
    say "$tag exists"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || die "making $tag needs root (debootstrap)"
  command -v debootstrap >/dev/null 2>&1 || docker_apt_install debootstrap
  started=$(date +%s)
  mkdir -p "$root_dir/build/compose/cache/$suite"
  work=$(mktemp -d "$root_dir/build/compose/root.XXXXXX")
  root=$work/root
  say "debootstrap $suite from $mirror"
  debootstrap --variant=minbase --include=ca-certificates \
    --cache-dir="$root_dir/build/compose/cache/$suite" \
    "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
      tail -n 20 "$work/debootstrap.log" >&2
      die "debootstrap $suite failed"
    }
  debian_root_release_mounts "$root"
  # Services are never started by a package's postinst inside an image.
  printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
    cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin update-ca-certificates >/dev/null 2>&1 ||
      die "update-ca-certificates failed in the $suite root"
  fi
  if [ -n "$extra" ]; then
    echo "deb $mirror $extra main" > "$root/etc/apt/sources.list.d/$extra.list"
    # Sid's and experimental's Release files carry a Valid-Until that the mirror (or a
    # snapshot of it) can be past; signatures are still checked.
    echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99tally-valid-until"
  fi
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/var/cache/apt/*.bin
  say "docker import $tag"
  tar -C "$root" --numeric-owner -c . |
    docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt' \
      --change 'CMD ["bash"]' \
      --message "scripts/compose-base.sh: debootstrap --variant=minbase $suite${extra:+ + $extra sources}" \
      - "$tag" >/dev/null
  debian_root_release_mounts "$work"
  rm -rf "$work"
  work=
  say "$tag made in $(( $(date +%s) - started )) s"
}

# Arguments name the images to make (bookworm, sid: make test-fresh needs only the
# first); none, both.
docker_ensure
for base in ${*:-bookworm sid}; do
  case $base in
    bookworm) make_base tally/base:bookworm bookworm ;;
    sid) make_base tally/base:sid sid experimental ;;
    *) die "no base image $base (bookworm, sid)" ;;
  esac
done
