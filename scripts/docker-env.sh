# scripts/docker-env.sh: sourced by scripts/compose-base.sh and tests/compose/run.sh.
# Finds what they need of Docker on this machine, installing Debian's packages when
# missing (root), without touching a daemon that already answers:
#
#   docker_ensure    a daemon that answers. When none does, starts dockerd in the
#                    background (log: $DOCKERD_LOG) and sets DOCKERD_PID.
#   docker_release   stops that dockerd, by its PID, only if docker_ensure started it.
#   COMPOSE          the compose command, as an array: `docker compose` (the v2 plugin)
#                    when present, else Debian 12's docker-compose (v1.29, package
#                    docker-compose; Debian has no docker-compose-plugin).
DOCKERD_PID=
DOCKERD_LOG=${DOCKERD_LOG:-/tmp/tally-dockerd.log}
COMPOSE=()

docker_say() { echo "docker-env: $*" >&2; }

docker_apt_install() {
  [ "$(id -u)" -eq 0 ] || { docker_say "missing $*, and installing it needs root"; return 1; }
  docker_say "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  }
}

docker_answers() { docker info >/dev/null 2>&1; }

docker_ensure() {
  local i
  if ! command -v dockerd >/dev/null 2>&1; then
    docker_apt_install docker.io
  fi
  command -v docker >/dev/null 2>&1 || docker_apt_install docker.io
  if ! docker_answers; then
    docker_say "no Docker daemon answers: starting dockerd (log: $DOCKERD_LOG)"
    dockerd >"$DOCKERD_LOG" 2>&1 &
    DOCKERD_PID=$!
    for i in $(seq 1 300); do
      docker_answers && break
      kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -n 20 "$DOCKERD_LOG" >&2; DOCKERD_PID=; docker_say "dockerd exited"; return 1; }
      sleep 0.1
    done
    docker_answers || { docker_say "dockerd does not answer after 30 s"; return 1; }
  fi
  if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
  else
    command -v docker-compose >/dev/null 2>&1 || docker_apt_install docker-compose
    COMPOSE=(docker-compose)
  fi
}

docker_release() {
  local i
  [ -n "$DOCKERD_PID" ] || return 0
  docker_say "stopping the dockerd started here (PID $DOCKERD_PID)"
  kill -TERM "$DOCKERD_PID" 2>/dev/null || true
  for i in $(seq 1 150); do
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$DOCKERD_PID" 2>/dev/null && kill -KILL "$DOCKERD_PID" 2>/dev/null
  wait "$DOCKERD_PID" 2>/dev/null || true
  DOCKERD_PID=
}
