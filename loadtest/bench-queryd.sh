#!/usr/bin/env bash
# make bench-queryd: tally-queryd on a database of BENCH_ROWS (10 000 000) realistic rows
# over 30 days of 200 keys, the keys in BENCH_TEAMS (20) teams (every 8th key in none),
# every row naming one of BENCH_END_USERS (100 000) end users (BENCH_END_USERS / 200 per
# key, a few busy and most not) and carrying 0 to 3 of BENCH_TAGS (1 000) tags (a few
# common, most rare), made by tally-gen once and kept in
# build/bench/queryd-10M-t20-u100000-g1000.db (made again when missing).
# The run works on a copy, so the cached file stays at BENCH_ROWS rows.
#   1. Latency: build/queryd-probe sends BENCH_N (200) sequential requests per endpoint of
#      the dashboard (docs/api.md), or as many as fit in BENCH_MAX_SECONDS (10), over one
#      keep-alive connection and prints p50/p95;
#      targets: p95 < 50 ms for every endpoint, < 5 ms for each page of 200 requests.
#      Team endpoints (summaries by team and of the busiest team, its pages, the rows
#      without a team) sit beside the key ones they mirror, and so do end users' (by end
#      user, of the busiest key; the busiest end user's days and page) and tags' (by
#      tag; the commonest and the rarest tag's days and pages).
#      /api/health is the floor (the probe's own cost plus queryd's least work).
#   2. Writer: tally-gen --duration BENCH_SECONDS (10) stores new rows (stamped now, of
#      the same keys and end users) through the agent's writer into the same database,
#      alternately with queryd idle and with the dashboard's calls made once per second,
#      BENCH_ROUNDS (3) times; medians of rows/s, ratio polled / idle, target >= 0.9.
#   3. queryd's VmRSS after start and after the run; target < 10 MiB.
# STORE=postgres: the same rows (tally-gen, same seed) are also kept in a PostgreSQL
# cluster, build/bench/queryd-10M-t20-u100000.pg (its data directory, made once like the
# .db, with a VACUUM ANALYZE after the fill), started privately on a loopback port
# (loadtest/pg.sh); the run works on a copy (CREATE DATABASE ... TEMPLATE). Step 1 runs
# on both stores and prints them side by side (PostgreSQL's target: p95 < 20 ms for
# every endpoint); steps 2 and 3 then run on PostgreSQL.
# Exit 1 if a target is missed or anything fails. Knobs: QUERYD (build/tally-queryd),
# QUERYD_THREADS (queryd's default), BENCH_ROWS, BENCH_N, BENCH_MAX_SECONDS, BENCH_SECONDS,
# BENCH_ROUNDS, BENCH_TEAMS, BENCH_END_USERS, BENCH_TAGS, BUILD (build), STORE (sqlite),
# PG_SHARED_BUFFERS (512MB).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD:-build}
queryd=${QUERYD:-$build/tally-queryd}
rows=${BENCH_ROWS:-10000000}
n=${BENCH_N:-200}
max_seconds=${BENCH_MAX_SECONDS:-10}
seconds=${BENCH_SECONDS:-10}
rounds=${BENCH_ROUNDS:-3}
teams=${BENCH_TEAMS:-20}
end_users=${BENCH_END_USERS:-100000}
tags=${BENCH_TAGS:-1000}
keys=200
store=${STORE:-sqlite}
source scripts/stack.sh
source loadtest/pg.sh
case $store in
  sqlite|postgres) ;;
  *) echo "bench-queryd: STORE is sqlite or postgres, not $store" >&2; exit 2 ;;
esac

for bin in "$queryd" "$build/tally-gen" "$build/queryd-probe" "$build/tallyctl"; do
  [[ -x $bin ]] || { echo "bench-queryd: $bin is not built" >&2; exit 1; }
done
(( end_users % keys == 0 )) ||
  { echo "bench-queryd: BENCH_END_USERS must be a multiple of $keys (the keys)" >&2; exit 2; }
# What every tally-gen run of the bench is given: its keys, their end users, the tags.
population=(--keys "$keys" --end-users $((end_users / keys)) --tags "$tags")
if (( rows % 1000000 == 0 )); then label=$((rows / 1000000))M; else label=$rows; fi
label=$label-t$teams-u$end_users-g$tags
cache=$build/bench/queryd-$label.db
if [[ ! -f $cache ]]; then
  mkdir -p "$build/bench"
  echo "generating $cache ($rows rows over 30 days, $teams teams, $end_users end users, $tags tags, seed 1) ..."
  rm -f "$cache.tmp" "$cache.tmp-wal" "$cache.tmp-shm" "$cache.tmp.secret"
  "$build/tally-gen" --db "$cache.tmp" --rows "$rows" --seed 1 --days 30 --teams "$teams" \
    "${population[@]}"
  mv "$cache.tmp.secret" "$cache.secret"
  mv "$cache.tmp" "$cache"
fi

# A cache made by an older tally is migrated in place, once (queryd opens only the
# current schema); tallyctl's first open does it.
"$build/tallyctl" --db "$cache" key list >/dev/null

stack_scratch
# The run's copy of the PostgreSQL database goes with the run (queryd stopped first).
trap 'stack_stop; [[ -z $pg_pid ]] || pg_sql postgres "DROP DATABASE IF EXISTS run" >/dev/null ||
      true; pg_stop; rm -rf "$tmp"' EXIT INT TERM
db=$tmp/queryd.db
# Anything a reader of the cache left in its WAL goes into the file before the copy.
sqlite3 "$cache" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
cp "$cache" "$db"
cp "$cache.secret" "$db.secret"

# The PostgreSQL cache: a cluster whose database "tally" holds the same rows. Filled in
# $pg_cache.tmp and renamed when complete, so an interrupted fill is made again.
pg_cache=$build/bench/queryd-$label.pg
if [[ $store == postgres ]]; then
  if [[ ! -f $pg_cache/PG_VERSION ]]; then
    echo "generating $pg_cache ($rows rows over 30 days, $teams teams, $end_users end users, $tags tags, seed 1) ..."
    rm -rf "$pg_cache.tmp" "$pg_cache.tmp.initdb.log"
    pg_start "$pg_cache.tmp"
    pg_sql postgres "CREATE DATABASE tally"
    "$build/tally-gen" --db "$(pg_url tally)" --secret "$pg_cache.secret" --rows "$rows" \
      --seed 1 --days 30 --teams "$teams" "${population[@]}"
    echo "VACUUM ANALYZE (what autovacuum would have done by now) ..."
    pg_sql tally "VACUUM (ANALYZE)"
    pg_stop
    mv "$pg_cache.tmp" "$pg_cache"
    rm -f "$pg_cache.tmp.initdb.log"
  fi
  pg_start "$pg_cache"
  TALLY_SECRET_FILE=$pg_cache.secret "$build/tallyctl" --db "$(pg_url tally)" key list >/dev/null
  pg_sql postgres "DROP DATABASE IF EXISTS run"
  pg_sql postgres "CREATE DATABASE run TEMPLATE tally"
  pg_db=$(pg_url run)
fi

export TALLY_OPERATOR_TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
threads=()
[[ -n ${QUERYD_THREADS:-} ]] && threads=(--threads "$QUERYD_THREADS")
rss() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$queryd_pid/status"; }
api() { curl -sf -H "Authorization: Bearer $TALLY_OPERATOR_TOKEN" "http://127.0.0.1:$port$1"; }

# serve STORE NAME: starts queryd on STORE (a path or a URL); sets port, queryd_pid and
# rss_start, and q, the helper that queries the same store.
serve() {
  port=$(stack_free_port)
  stack_spawn "$queryd" --db "$1" --listen "127.0.0.1:$port" --control "$tmp/no-agent.ctl" \
    "${threads[@]}" --log-level warn 2>"$tmp/queryd-$2.log"
  queryd_pid=${stack_pids[-1]}
  stack_wait_port "$port"
  rss_start=$(rss)
  if [[ $2 == postgres ]]; then
    q() { pg_sql run "$1"; }
  else
    q() { sqlite3 -readonly "$db" "$1"; }
  fi
}

# endpoints NAME: the endpoint list of the store queryd serves, in $tmp/endpoints-NAME.
endpoints() {
  # Ranges end at the hour after the newest row, so a cached database gives the same
  # figures whenever it is measured.
  end=$(q "SELECT (max(started_at) / 3600000 + 1) * 3600 FROM requests")
  total=$(q "SELECT count(*) FROM requests")
  key=$(q "SELECT k.name FROM usage_daily u JOIN keys k ON k.id = u.key_id GROUP BY k.id, k.name
           ORDER BY sum(u.requests) DESC LIMIT 1")
  team=$(q "SELECT t.name FROM team_daily d JOIN teams t ON t.id = d.team_id GROUP BY t.id, t.name
            ORDER BY sum(d.requests) DESC LIMIT 1")
  small_team=$(q "SELECT t.name FROM team_daily d JOIN teams t ON t.id = d.team_id GROUP BY t.id, t.name
                  ORDER BY sum(d.requests) LIMIT 1")
  rare_model=$(q "SELECT model FROM usage_daily GROUP BY model ORDER BY sum(requests) LIMIT 1")
  user=$(q "SELECT end_user FROM end_user_daily d JOIN keys k ON k.id = d.key_id
            WHERE k.name = '$key' GROUP BY end_user ORDER BY sum(requests) DESC, end_user LIMIT 1")
  top_tag=$(q "SELECT tag FROM tag_total_daily GROUP BY tag ORDER BY sum(requests) DESC, tag LIMIT 1")
  rare_tag=$(q "SELECT tag FROM tag_total_daily GROUP BY tag ORDER BY sum(requests), tag LIMIT 1")
  top_model=$(q "SELECT model FROM usage_daily GROUP BY model ORDER BY sum(requests) DESC LIMIT 1")
  mid=$(q "SELECT request_id, started_at, id FROM requests WHERE id = (SELECT max(id) / 2 FROM requests)")
  IFS='|' read -r mid_id mid_started mid_rowid <<<"$mid"
  # The cursor is "started_at.id" of a page's last row (docs/api.md); a page half-way down
  # the table starts after the middle row. The first page's cursor must have that shape.
  next=$(api "/api/requests?limit=200" | python3 -c 'import json,sys; print(json.load(sys.stdin)["next"])')
  [[ $next =~ ^[0-9]+\.[0-9]+$ ]] || { echo "bench-queryd: unexpected cursor $next" >&2; exit 1; }
  deep="$mid_started.$mid_rowid"

  {
    echo "health /api/health"
    for range in 24h:86400 7d:604800 30d:2592000; do
      for group in hour day key team model provider; do
        echo "summary-${range%%:*}-$group /api/summary?from=$((end - ${range##*:}))&to=$end&group=$group"
      done
      # one key's and one team's days, side by side
      echo "summary-${range%%:*}-day-of-key /api/summary?from=$((end - ${range##*:}))&to=$end&group=day&key=$key"
      echo "summary-${range%%:*}-day-of-team /api/summary?from=$((end - ${range##*:}))&to=$end&group=day&team=$team"
      # attribution: every tag, the busiest key's end users, one end user's and tag's days
      echo "summary-${range%%:*}-tag /api/summary?from=$((end - ${range##*:}))&to=$end&group=tag"
      echo "summary-${range%%:*}-end-user-of-key /api/summary?from=$((end - ${range##*:}))&to=$end&group=end_user&key=$key"
      echo "summary-${range%%:*}-day-of-user /api/summary?from=$((end - ${range##*:}))&to=$end&group=day&key=$key&end_user=$user"
      echo "summary-${range%%:*}-day-of-tag /api/summary?from=$((end - ${range##*:}))&to=$end&group=day&tag=$top_tag"
      echo "summary-${range%%:*}-day-of-rare-tag /api/summary?from=$((end - ${range##*:}))&to=$end&group=day&tag=$rare_tag"
    done
    echo "requests-first /api/requests?limit=200"
    echo "requests-deep /api/requests?limit=200&before=$deep"
    echo "requests-key /api/requests?key=$key&limit=200"
    echo "requests-team /api/requests?team=$team&limit=200"
    echo "requests-small-team /api/requests?team=$small_team&limit=200"
    echo "requests-no-team /api/requests?team_id=0&limit=200"
    echo "requests-model /api/requests?model=$top_model&limit=200"
    echo "requests-rare-model /api/requests?model=$rare_model&limit=200"
    echo "requests-end-user /api/requests?key=$key&end_user=$user&limit=200"
    echo "requests-tag /api/requests?tag=$top_tag&limit=200"
    echo "requests-rare-tag /api/requests?tag=$rare_tag&limit=200"
    echo "request-by-id /api/requests/$mid_id"
    echo "keys /api/keys"
    echo "teams /api/teams"
    echo "models /api/models"
    echo "live /api/live"
  } >"$tmp/endpoints-$1"
}

# What the dashboard asks for every second (its default range, the last 24 hours).
poll=$tmp/poll
cat >"$poll" <<EOF
summary-hour /api/summary?group=hour
summary-model /api/summary?group=model
summary-key /api/summary?group=key
summary-team /api/summary?group=team
summary-provider /api/summary?group=provider
requests-first /api/requests?limit=200
keys /api/keys
live /api/live
EOF

# latency NAME STORE: queryd on STORE, its facts, then the probe's figures per endpoint
# into $tmp/latency-NAME.
latency() {
  serve "$2" "$1"
  endpoints "$1"
  echo "== $1: $queryd on $total rows ($3), ranges ending" \
    "$(date -u -d "@$end" '+%F %H:%M') UTC"
  echo "key $key, teams $team (most rows) and $small_team (fewest), models $top_model (most" \
    "rows) and $rare_model (fewest), end user $user (the key's busiest), tags $top_tag" \
    "(commonest) and $rare_tag (rarest), deep page after row $mid_rowid"
  echo "rollups: usage_hourly $(q "SELECT count(*) FROM usage_hourly") rows" \
    "($(q "SELECT count(*) FROM usage_hourly WHERE hour >= $end - 86400") in the last 24 h)," \
    "usage_daily $(q "SELECT count(*) FROM usage_daily") rows;" \
    "key_hourly $(q "SELECT count(*) FROM key_hourly") rows;" \
    "team_hourly $(q "SELECT count(*) FROM team_hourly") rows (teams with traffic per hour: at most" \
    "$(q "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM team_hourly GROUP BY hour) x")" \
    "of $(q "SELECT count(*) FROM teams")), team_daily $(q "SELECT count(*) FROM team_daily") rows;" \
    "rows without a team $(q "SELECT count(*) FROM requests WHERE team_id IS NULL");" \
    "end_user_daily $(q "SELECT count(*) FROM end_user_daily") rows, end users with rows" \
    "$(q "SELECT count(*) FROM (SELECT DISTINCT key_id, end_user FROM end_user_daily) x");" \
    "tag_daily $(q "SELECT count(*) FROM tag_daily") rows, tag_total_daily" \
    "$(q "SELECT count(*) FROM tag_total_daily") rows of $(q "SELECT count(DISTINCT tag) FROM tag_total_daily") tags"
  "$build/queryd-probe" --addr "127.0.0.1:$port" -n "$n" --max-seconds "$max_seconds" \
    <"$tmp/endpoints-$1" >"$tmp/latency-$1"
}

# verdict NAME P95 TARGET_ALL TARGET_PAGES: the target that applies and PASS, FAIL or
# floor (/api/health).
verdict() {
  local target=$3 result=PASS
  [[ $1 == requests-* ]] && target=$4
  [[ $1 == health ]] && target=-
  if [[ $target == - ]]; then result=floor
  elif ! awk -v a="$2" -v b="$target" 'BEGIN { exit !(a < b) }'; then result=FAIL; fi
  echo "${target/#[0-9]*/p95<$target} $result"
}

fail=0
latency sqlite "$db" "$cache"
if [[ $store == postgres ]]; then
  latency postgres "$pg_db" "$pg_cache, PostgreSQL $(pg_sql run "SHOW server_version")"
  echo
  # Side by side, by endpoint name (both lists are made alike).
  printf '%-22s | %8s %8s %9s %-5s | %8s %8s %9s %-5s | %s\n' endpoint sq_p50 sq_p95 target \
    "" pg_p50 pg_p95 target "" "pg/sq p95"
  while read -r name p50 p95 _; do
    read -r _ pg50 pg95 _ < <(grep "^$name " "$tmp/latency-postgres")
    read -r sq_target sq_result <<<"$(verdict "$name" "$p95" 50 5)"
    read -r pg_target pg_result <<<"$(verdict "$name" "$pg95" 20 20)"
    printf '%-22s | %8s %8s %9s %-5s | %8s %8s %9s %-5s | %s\n' "$name" "$p50" "$p95" \
      "$sq_target" "$sq_result" "$pg50" "$pg95" "$pg_target" "$pg_result" \
      "$(awk -v a="$pg95" -v b="$p95" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
    [[ $sq_result == FAIL || $pg_result == FAIL ]] && fail=1
  done <"$tmp/latency-sqlite"
  echo "(milliseconds; SQLite's targets p95 < 50 ms, < 5 ms for a page of 200 requests;" \
    "PostgreSQL's p95 < 20 ms for every endpoint)"
else
  echo
  printf '%-22s %9s %9s %9s %9s %5s  %-9s %s\n' endpoint p50_ms p95_ms max_ms bytes n target result
  while read -r name p50 p95 max bytes count; do
    read -r target result <<<"$(verdict "$name" "$p95" 50 5)"
    [[ $result == FAIL ]] && fail=1
    printf '%-22s %9s %9s %9s %9s %5s  %-9s %s\n' "$name" "$p50" "$p95" "$max" "$bytes" \
      "$count" "$target" "$result"
  done <"$tmp/latency-sqlite"
fi
echo "(n sequential requests per endpoint, at most $n or ${max_seconds} s, on one keep-alive" \
  "connection, after 5 unmeasured; bytes: one answer's body)"
echo

# One tally-gen run of $seconds s; prints its rows/s.
# Steps 2 and 3 run on the store queryd last served.
gen_store=(--db "$db")
[[ $store == postgres ]] && gen_store=(--db "$pg_db" --secret "$pg_cache.secret")
writer_round() {
  "$build/tally-gen" "${gen_store[@]}" "${population[@]}" --duration "$seconds" --seed "$1" \
    | sed -n 's/.* \([0-9]*\) rows\/s$/\1/p'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
idle=() polled=()
for r in $(seq "$rounds"); do
  idle+=("$(writer_round $((2 * r)))")
  "$build/queryd-probe" --addr "127.0.0.1:$port" --interval-ms 1000 \
    --duration-s "$seconds" <"$poll" >"$tmp/poll.out" &
  probe_pid=$!
  polled+=("$(writer_round $((2 * r + 1)))")
  wait "$probe_pid" || { echo "bench-queryd: polling failed" >&2; exit 1; }
  echo "round $r: idle ${idle[-1]} rows/s, polled ${polled[-1]} rows/s ($(cat "$tmp/poll.out"))"
done
idle_med=$(printf '%s\n' "${idle[@]}" | median)
polled_med=$(printf '%s\n' "${polled[@]}" | median)
ratio=$(awk -v a="$polled_med" -v b="$idle_med" 'BEGIN { printf "%.2f", a / b }')
result=PASS
awk -v r="$ratio" 'BEGIN { exit !(r >= 0.9) }' || { result=FAIL; fail=1; }
echo "writer on the $label $store database: idle $idle_med rows/s, dashboard polling every 1 s" \
  "$polled_med rows/s (medians of $rounds), ratio $ratio (target >= 0.9): $result"

rss_end=$(rss)
result=PASS
awk -v a="$rss_start" -v b="$rss_end" 'BEGIN { exit !(a < 10 && b < 10) }' || { result=FAIL; fail=1; }
echo "queryd VmRSS: $rss_start MiB after start, $rss_end MiB after the run (target < 10 MiB): $result"
exit $fail
