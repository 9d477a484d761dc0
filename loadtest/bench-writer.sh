#!/usr/bin/env bash
# make bench-writer [STORE=postgres]: the writer's rows/s against a plain INSERT loop
# (build/bench-writer, loadtest/bench-writer.c) on SQLite; with STORE=postgres the same
# bench-writer run then goes on to a private PostgreSQL cluster this script starts
# (loadtest/pg.sh: initdb in a scratch directory, a free loopback port, stopped by PID on
# exit), and the two stores' figures are printed side by side with their ratio.
# Knobs: BENCH_ROWS, BENCH_BATCH, BENCH_ROUNDS, BENCH_STATEMENT_ROWS, BENCH_KEYS,
# BENCH_END_USERS, BENCH_BASELINE (bench-writer's), BUILD (build),
# PG_SHARED_BUFFERS (512MB).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD:-build}
store=${STORE:-sqlite}
bin=$build/bench-writer
source scripts/stack.sh
source loadtest/pg.sh

[[ -x $bin ]] || { echo "bench-writer: $bin is not built" >&2; exit 1; }
case $store in
  sqlite) exec "$bin" ;;
  postgres) ;;
  *) echo "bench-writer: STORE is sqlite or postgres, not $store" >&2; exit 2 ;;
esac

stack_scratch
trap 'pg_stop; stack_stop; rm -rf "$tmp"' EXIT INT TERM
chmod 711 "$tmp"   # the server's user reaches its data directory inside
pg_start "$tmp/pg"
pg_sql postgres "CREATE DATABASE bench_writer"

echo "== SQLite"
"$bin" | tee "$tmp/sqlite.out"
echo
echo "== PostgreSQL (private cluster on 127.0.0.1:$pg_port, shared_buffers" \
  "${PG_SHARED_BUFFERS:-512MB}, fsync and synchronous_commit on)"
BENCH_STORE=$(pg_url bench_writer) "$bin" | tee "$tmp/pg.out"

# "writer:   123456 rows/s ..." and "baseline: 12345 rows/s ..." of each run.
figure() { sed -n "s/^$1: *\([0-9]*\) rows\/s.*/\1/p" "$2"; }
sw=$(figure writer "$tmp/sqlite.out") pw=$(figure writer "$tmp/pg.out")
sb=$(figure baseline "$tmp/sqlite.out") pb=$(figure baseline "$tmp/pg.out")
echo
printf '%-28s %12s %12s %18s\n' "rows/s (best of rounds)" SQLite PostgreSQL "PostgreSQL/SQLite"
printf '%-28s %12s %12s %18s\n' "writer (queue -> commit)" "$sw" "$pw" \
  "$(awk -v a="$pw" -v b="$sw" 'BEGIN { printf "%.2f", a / b }')"
[ -z "$sb" ] || [ -z "$pb" ] ||
  printf '%-28s %12s %12s %18s\n' "baseline (1-row INSERT)" "$sb" "$pb" \
    "$(awk -v a="$pb" -v b="$sb" 'BEGIN { printf "%.2f", a / b }')"
# BENCH_END_USERS: "end users U: writer 123456 rows/s ..." of each count.
for u in $(sed -n 's/^end users \([0-9]*\): writer.*/\1/p' "$tmp/sqlite.out"); do
  sw=$(sed -n "s/^end users $u: writer *\([0-9]*\) rows\/s.*/\1/p" "$tmp/sqlite.out")
  pw=$(sed -n "s/^end users $u: writer *\([0-9]*\) rows\/s.*/\1/p" "$tmp/pg.out")
  printf '%-28s %12s %12s %18s\n' "writer, end users $u" "$sw" "$pw" \
    "$(awk -v a="$pw" -v b="$sw" 'BEGIN { printf "%.2f", a / b }')"
done
