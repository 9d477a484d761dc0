#!/bin/bash
# docker/entrypoint.sh DAEMON [ARGS...]: the agent's and queryd's entry point. Runs
# `DAEMON ARGS --self-check` (configuration, database, secrets, listeners: see
# docs/operations.md, "Self-check") and starts the daemon with the same arguments only
# if every check passed, before anything binds; a failed check exits 1 with its FAIL
# lines in the container's log.
#
# The agent's first start has no database nor key-hashing secret yet, which the check
# reports: tallyctl creates both (the database at the current schema) when the
# database is absent. An existing database at an older schema still fails the check, so that an
# upgrade migrates it only after a backup (docs/operations.md, "Upgrades").
# ARGS holding --self-check run the check alone.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 DAEMON [ARGS...]" >&2; exit 2; }
for arg in "$@"; do
  [ "$arg" != --self-check ] || exec "$@"
done
if [ "$1" = tally-agent ] && [ -n "${TALLY_DB:-}" ] && [ ! -e "$TALLY_DB" ]; then
  echo "entrypoint: creating $TALLY_DB" >&2
  env -u TALLY_GATEWAY_SECRET tallyctl --db "$TALLY_DB" gateway-secret >/dev/null
  tallyctl --db "$TALLY_DB" model list >/dev/null
fi
"$@" --self-check
exec "$@"
