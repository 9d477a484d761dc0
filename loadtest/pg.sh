# Sourced by the loadtest/bench-*.sh scripts: a private PostgreSQL cluster for a
# benchmark run, in a directory of the bench's own, on a free loopback port (TCP only, no
# Unix socket), trust authentication for user postgres. As root the server runs as user
# postgres (the data directory is given to it); otherwise as the caller. It is stopped
# by the PID in its postmaster.pid, never by name. Expects stack_free_port (scripts/
# stack.sh). Binaries: PG_BIN, else pg_config --bindir, else Debian's PostgreSQL 15.

pg_bin=${PG_BIN:-$(pg_config --bindir 2>/dev/null || true)}
[[ -x $pg_bin/initdb ]] || pg_bin=/usr/lib/postgresql/15/bin
pg_pid=
pg_port=
pg_dir=

# Runs a server command as the user that owns the cluster.
pg_as() {
  if [[ $(id -u) == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# pg_start DIR: makes the cluster in DIR if it has none (initdb), starts it and sets
# pg_pid, pg_port and pg_dir. Settings beyond the defaults: shared_buffers
# (PG_SHARED_BUFFERS, 512MB) and autovacuum off while a bench runs, so that its figures do
# not depend on when a vacuum happens to start.
pg_start() {
  pg_dir=$1
  if [[ ! -f $pg_dir/PG_VERSION ]]; then
    mkdir -p "$pg_dir"
    [[ $(id -u) == 0 ]] && chown postgres: "$pg_dir"
    chmod 700 "$pg_dir"
    pg_as "$pg_bin/initdb" -D "$pg_dir" -U postgres --auth=trust -E UTF8 --no-locale \
      >"$pg_dir.initdb.log" 2>&1 || { cat "$pg_dir.initdb.log" >&2; return 1; }
  fi
  pg_port=$(stack_free_port)
  pg_restart
}

# pg_restart: starts the cluster of the last pg_start again (after pg_stop: an outage),
# on the same port, so that its clients' URLs still hold.
pg_restart() {
  pg_as "$pg_bin/pg_ctl" -D "$pg_dir" -w -t 60 -l "$pg_dir/server.log" start \
    -o "-p $pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c shared_buffers=${PG_SHARED_BUFFERS:-512MB} -c autovacuum=off" \
    >/dev/null || 
    { tail -20 "$pg_dir/server.log" >&2; return 1; }
  pg_pid=$(head -1 "$pg_dir/postmaster.pid")
}

# The URL of database $1 on the running cluster.
pg_url() {
  echo "postgresql://postgres@127.0.0.1:$pg_port/$1"
}

# pg_sql DB SQL: runs SQL on database DB, rows as a|b|c lines.
pg_sql() {
  psql -X -q -At -v ON_ERROR_STOP=1 -d "$(pg_url "$1")" -c "$2"
}

# pg_alive PID: the process runs. A postmaster that exited is not our child (pg_ctl
# started it): where nothing reaps orphans (a container whose PID 1 is no init) it stays
# a zombie, which kill -0 still finds.
pg_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# Stops the cluster started by pg_start (fast shutdown: SIGINT to the postmaster, by
# PID) and waits up to 60 s for it to be gone.
pg_stop() {
  [[ -n $pg_pid ]] || return 0
  kill -INT "$pg_pid" 2>/dev/null || true
  for _ in $(seq 600); do
    pg_alive "$pg_pid" || break
    sleep 0.1
  done
  pg_pid=
}
