#!/usr/bin/env bash
# How long PostgreSQL's append lock is held per batch (issue 21, item 3), from the server's own
# counters around a `quota bench --workload fleet` run on PostgreSQL.
#
# An append holds the transaction-scoped advisory lock from its first statement until its
# commit is on disk, so per batch the lock is held for the guarded append function's time
# (`pg_stat_user_functions.self_time` of quota_append_keyed, or of quota_append_guarded for a
# binary from before migration 0012) plus the commit's WAL fsync
# (`pg_stat_wal.wal_sync_time / wal_sync`). Both counters are off by default: the script turns
# `track_functions` and `track_wal_io_timing` on with ALTER SYSTEM for the run and RESETs them
# after. Run it only against a server of your own (it reloads that server's configuration).
#
# Usage: bench/pg-lock-hold.sh [SECONDS (default 12, at least 8)] [more `quota bench` flags,
#   e.g. --no-views]
# Environment: QUOTA_BIN (default target/release/quota),
#   QUOTA_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test).
# Prints the bench's JSON line, then the lock's figures over the run's steady part (from 3 s in
# to 1 s before the end).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_OF_LOAD="${1:-12}"
shift || true
if ! [[ "$SECONDS_OF_LOAD" =~ ^[0-9]+$ ]] || [ "$SECONDS_OF_LOAD" -lt 8 ]; then
  echo "pg-lock-hold.sh: SECONDS must be a whole number, at least 8 (got '$SECONDS_OF_LOAD')" >&2
  exit 2
fi
QUOTA_BIN="${QUOTA_BIN:-target/release/quota}"
PG="${QUOTA_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
OUT="$(mktemp)"
sql() { psql "$PG" -Atq -v ON_ERROR_STOP=1 -c "$1"; }
reset_tracking() {
  sql "ALTER SYSTEM RESET track_functions" && sql "ALTER SYSTEM RESET track_wal_io_timing" &&
    sql "SELECT pg_reload_conf()" >/dev/null
}
trap 'reset_tracking; rm -f "$OUT"' EXIT

sql "ALTER SYSTEM SET track_functions = 'pl'"
sql "ALTER SYSTEM SET track_wal_io_timing = on"
sql "SELECT pg_reload_conf()" >/dev/null
# One line: calls, function ms, WAL syncs, sync ms, WAL bytes, full-page images.
counters() {
  sql "SELECT (SELECT COALESCE(SUM(calls), 0) || '|' || COALESCE(SUM(self_time), 0)
                 FROM pg_stat_user_functions
                WHERE funcname IN ('quota_append_guarded', 'quota_append_keyed'))
              || '|' || wal_sync || '|' || wal_sync_time || '|' || wal_bytes || '|' || wal_fpi
         FROM pg_stat_wal"
}

"$QUOTA_BIN" bench --workload fleet --seconds "$SECONDS_OF_LOAD" --store "$PG" "$@" >"$OUT" 2>/dev/null &
BENCH=$!
sleep 3
BEFORE="$(counters)"
STARTED="$(date +%s.%N)"
sleep $((SECONDS_OF_LOAD - 4))
AFTER="$(counters)"
ENDED="$(date +%s.%N)"
wait "$BENCH"
cat "$OUT"

python3 - "$BEFORE" "$AFTER" "$STARTED" "$ENDED" <<'EOF'
import sys
before = [float(x) for x in sys.argv[1].split("|")]
after = [float(x) for x in sys.argv[2].split("|")]
wall_ms = (float(sys.argv[4]) - float(sys.argv[3])) * 1000
calls, function_ms, syncs, sync_ms, wal_bytes, fpi = (a - b for a, b in zip(after, before))
if calls == 0 or syncs == 0:
    sys.exit("pg-lock-hold.sh: no guarded appends or WAL syncs were counted")
per_call = function_ms / calls
per_sync = sync_ms / syncs
print(f"pg-lock-hold: {calls / wall_ms * 1000:.0f} guarded appends/s, {syncs / wall_ms * 1000:.0f} "
      f"WAL fsyncs/s (the views' commits too); per append "
      f"{per_call:.3f} ms in the function + {per_sync:.3f} ms WAL fsync = "
      f"{per_call + per_sync:.3f} ms holding the lock; held {(function_ms + sync_ms) / wall_ms:.2f} "
      f"of the time; WAL {wal_bytes / syncs / 1024:.1f} KiB and {fpi / syncs:.1f} full-page "
      f"images per fsync")
EOF
