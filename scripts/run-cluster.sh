#!/usr/bin/env bash
# make run-cluster: two gateway nodes on one private PostgreSQL, in the foreground, as a
# user tries the multi-node layout on one machine. Starts PostgreSQL (loadtest/pg.sh: a
# cluster kept in data/cluster/pg, on a free loopback port, trust authentication), seeds
# it as make run seeds SQLite (stack_demo_key, stack_upstream), then the mock upstream,
# per node a tally-agent (--node node1, node2; one secret file) and its HAProxy, and one
# tally-queryd. Prints the demo key and curls for both gateways and queryd, writes
# data/cluster.env (TALLY_DB and TALLY_SECRET_FILE, for tallyctl) and stops everything it
# started, PostgreSQL last, on Ctrl-C or SIGTERM. A process that dies is reported and the
# others keep running (the other node serves on: what a cluster is for); the script ends
# when the last one did. PostgreSQL is stopped by the PID its data directory names at
# that time, so that one restarted by hand is stopped too.
#
# Ports as make run's, with the second node's beside them: TALLY_GATEWAY_PORT (8080),
# TALLY_GATEWAY2_PORT (8082), TALLY_AGENT_PORT (12345), TALLY_AGENT2_PORT (12347),
# TALLY_RECORDS_PORT (12346), TALLY_RECORDS2_PORT (12348), TALLY_METRICS_PORT (9464),
# TALLY_METRICS2_PORT (9465), TALLY_MOCK_PORT (8090), TALLY_QUERYD_PORT (8081).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${TALLY_BUILD:-build}
source scripts/stack.sh
# pg_start, pg_sql, pg_url, pg_stop: the benches' private PostgreSQL cluster.
source loadtest/pg.sh

gateway_ports=("${TALLY_GATEWAY_PORT:-8080}" "${TALLY_GATEWAY2_PORT:-8082}")
agent_ports=("${TALLY_AGENT_PORT:-12345}" "${TALLY_AGENT2_PORT:-12347}")
records_ports=("${TALLY_RECORDS_PORT:-12346}" "${TALLY_RECORDS2_PORT:-12348}")
metrics_ports=("${TALLY_METRICS_PORT:-9464}" "${TALLY_METRICS2_PORT:-9465}")
mock_port=${TALLY_MOCK_PORT:-8090}
queryd_port=${TALLY_QUERYD_PORT:-8081}
data=${TALLY_DATA_DIR:-$root/data}
cluster=$data/cluster
# A demo's server: the bench's 512MB of shared buffers are not needed (its other
# settings, autovacuum off among them, are kept).
export PG_SHARED_BUFFERS=${PG_SHARED_BUFFERS:-128MB}

mkdir -p "$cluster"
chmod 700 "$data" "$cluster"
if [[ $(id -u) == 0 ]]; then
  # PostgreSQL runs as user postgres (pg_as), which must pass through to data/cluster/pg.
  chgrp postgres "$data" "$cluster"
  chmod 710 "$data" "$cluster"
  pg_as test -x "$cluster" || {
    echo "user postgres cannot reach $cluster (a directory above it is closed to it):" \
         "set TALLY_DATA_DIR to a directory it can reach" >&2; exit 1; }
fi

stop() {
  # (called with 0 by Ctrl-C, how it is meant to end: make reports no error)
  local rc=${1:-$?}
  trap '' INT TERM
  trap - EXIT
  stack_stop
  # A server restarted by hand on this data directory has a new postmaster.
  [[ -f $cluster/pg/postmaster.pid ]] && pg_pid=$(head -1 "$cluster/pg/postmaster.pid")
  pg_stop
  rm -f "$data/cluster.env"
  echo "tally cluster stopped"
  exit "$rc"
}
trap stop EXIT
trap 'stop 0' INT TERM

pg_start "$cluster/pg"
[[ -n $(pg_sql postgres "SELECT 1 FROM pg_database WHERE datname = 'tally'") ]] ||
  pg_sql postgres "CREATE DATABASE tally"
db=$(pg_url tally)
# Every tallyctl below, and the user's through cluster.env, hashes keys with this file;
# both agents are given it.
export TALLY_SECRET_FILE=$cluster/tally.secret
printf 'TALLY_DB=%s\nTALLY_SECRET_FILE=%s\n' "$db" "$TALLY_SECRET_FILE" > "$data/cluster.env"

stack_upstream "$db" "$cluster"
[ -n "$upstream" ] || stack_demo_key "$db" "$mock_port" "$cluster"
stack_local_secrets "$data"

declare -A names    # pid -> what it is, for the report when it dies
if [ -z "$upstream" ]; then
  stack_spawn "$build/mock-upstream" --listen "127.0.0.1:$mock_port" --quiet
  names[${stack_pids[-1]}]="the mock upstream"
  stack_wait_port "$mock_port"
fi
for i in 0 1; do
  node=node$((i + 1))
  mkdir -p "$cluster/$node"
  stack_haproxy_env "${agent_ports[i]}" "$mock_port" "$(cat "$data/mock.credential")" \
    "${records_ports[i]}" "$db"
  stack_spawn "$build/tally-agent" --listen "$TALLY_AGENT_ADDR" --db "$db" --node "$node" \
    --secret "$TALLY_SECRET_FILE" --records "$TALLY_RECORDS_ADDR" \
    --metrics "127.0.0.1:${metrics_ports[i]}" --haproxy-socket "$cluster/$node/haproxy.sock" \
    --journal "$cluster/$node/tally.journal" --control "$cluster/$node/tally.ctl"
  names[${stack_pids[-1]}]="$node's tally-agent"
  stack_wait_port "${agent_ports[i]}"
  TALLY_GATEWAY_ADDR=127.0.0.1:${gateway_ports[i]} TALLY_RUN_DIR=$cluster/$node \
    stack_spawn haproxy -db -f haproxy/tally.cfg -f haproxy/demo.cfg
  names[${stack_pids[-1]}]="$node's HAProxy"
  stack_wait_port "${gateway_ports[i]}"
done
stack_spawn "$build/tally-queryd" --db "$db" --listen "127.0.0.1:$queryd_port"
names[${stack_pids[-1]}]="tally-queryd"
stack_wait_port "$queryd_port"

gw1=127.0.0.1:${gateway_ports[0]} gw2=127.0.0.1:${gateway_ports[1]}
cat <<MSG

tally cluster is running on PostgreSQL $db (upstream ${upstream:-mock 127.0.0.1:$mock_port})
  node1: gateway http://$gw1 (agent 127.0.0.1:${agent_ports[0]})
  node2: gateway http://$gw2 (agent 127.0.0.1:${agent_ports[1]})
$key_label: $key
MSG
stack_curl "$gw1" "$key" "$model"
stack_curl "$gw2" "$key" "$model"
stack_curl "$gw2" "$key" "$model" stream
stack_queryd_lines "$queryd_port"
cat <<MSG

Manage keys with: env \$(cat $data/cluster.env) $build/tallyctl key list
Ctrl-C stops everything, PostgreSQL included; the data stays in $cluster.
MSG

# A process ending is reported; the others keep running until the last one ends.
live=("${stack_pids[@]}")
while ((${#live[@]})); do
  status=0 dead=
  wait -n -p dead "${live[@]}" || status=$?
  [[ -n $dead ]] || break     # none of them is a child any more
  echo "tally cluster: ${names[$dead]:-process} (pid $dead) exited with status $status;" \
       "the others keep running (Ctrl-C stops them)" >&2
  rest=()
  for pid in "${live[@]}"; do [[ $pid == "$dead" ]] || rest+=("$pid"); done
  live=("${rest[@]}")
done
echo "stopping tally cluster: every process ended" >&2
