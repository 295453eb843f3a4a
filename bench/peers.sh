#!/usr/bin/env bash
# The project beside the two peers, back to back in one run (issue 21): the Nova-style row-lock
# quota on PostgreSQL (../shared/peers/nova-pg) and durable Redis+Lua (../shared/peers/redis-lua),
# then `quota bench` on the rows of the issue's bar. The machine's speed drifts by 2x within a
# day, so only figures of one run are compared; run it twice and keep both.
#
# Usage: bench/peers.sh [SECONDS per row (default 10)]
# Environment: QUOTA_BIN (default target/release/quota), PEERS (default ../shared/peers),
#   QUOTA_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test).
# Prints the peers' lines as they print them and one JSON line per `quota bench` row.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_ROW="${1:-10}"
QUOTA_BIN="${QUOTA_BIN:-target/release/quota}"
PEERS="${PEERS:-../shared/peers}"
PG="${QUOTA_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
WORK="$(mktemp -d)"
SERVER_PID=""
say() { printf 'peers.sh: %s\n' "$*" >&2; }
# shellcheck source=.ci/lib.sh
. .ci/lib.sh
trap 'ci_stop_server; rm -rf "$WORK"' EXIT
row() { "$QUOTA_BIN" bench "$@" 2>/dev/null; }

say "$(date -u +%FT%TZ): nova-pg (${SECONDS_PER_ROW} s a row)"
"$PEERS/nova-pg/run.sh" "$SECONDS_PER_ROW"
say "redis-lua"
"$PEERS/redis-lua/run.sh"
say "quota bench"
row --workload hot --seconds "$SECONDS_PER_ROW"
row --workload fleet --seconds "$SECONDS_PER_ROW"
row --workload fleet --seconds "$SECONDS_PER_ROW" --store "$PG"
ci_start_server "sqlite://$WORK/served.db" "" "$WORK/server.log"
row --workload hot --seconds "$SECONDS_PER_ROW" --target "$BASE" --store "sqlite://$WORK/served.db"
say "$(date -u +%FT%TZ): done"
