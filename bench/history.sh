#!/usr/bin/env bash
# The usage history's latency on a long history (issue 20: "fast on a project with a million
# events"). Fills one project with `quota bench --workload hot` (two events a boot) on a fresh
# SQLite store, serves it, waits for the views to apply every event, then times each query
# shape below REPEAT times with curl, end to end over HTTP. Prints one JSON line per shape:
# {"events", "query", "points", "median_ms", "max_ms"}.
#
# Usage: bench/history.sh [SECONDS_OF_LOAD (default 40)] [REPEAT (default 20)]
# Environment: QUOTA_BIN (default target/release/quota; build it with cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."

LOAD_SECONDS="${1:-40}"
REPEAT="${2:-20}"
QUOTA_BIN="${QUOTA_BIN:-target/release/quota}"
WORK="$(mktemp -d)"
SERVER_PID=""
say() { printf 'history.sh: %s\n' "$*" >&2; }
# shellcheck source=.ci/lib.sh
. .ci/lib.sh
trap 'ci_stop_server; rm -rf "$WORK"' EXIT

say "filling one project for ${LOAD_SECONDS} s (hot workload)"
"$QUOTA_BIN" bench --workload hot --seconds "$LOAD_SECONDS" --skip-verify \
  --store "sqlite://$WORK/q.db" >"$WORK/bench.json"
ci_start_server "sqlite://$WORK/q.db" "" "$WORK/server.log"
for _ in $(seq 1 600); do
  lag="$(curl -fsS "$BASE/v1/admin/projections" 2>/dev/null |
    python3 -c 'import json, sys; print(max(v["lag"] for v in json.load(sys.stdin)))' 2>/dev/null || echo x)"
  [ "$lag" = 0 ] && break
  sleep 0.5
done
[ "$lag" = 0 ] || { say "the views did not catch up"; exit 1; }
PROJECT="$(curl -fsS "$BASE/v1/projects?limit=1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["projects"][0]["project"])')"
EVENTS="$(curl -fsS "$BASE/v1/admin/projections" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["head"])')"
FIRST="$(curl -fsS "$BASE/v1/projects/$PROJECT/audit?limit=1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["entries"][0]["at"])')"
MIDDLE="$(python3 -c "
import datetime, sys
first = datetime.datetime.fromisoformat('$FIRST'.replace('Z', '+00:00'))
print((first + datetime.timedelta(seconds=$LOAD_SECONDS / 2)).strftime('%Y-%m-%dT%H:%M:%S.000Z'))")"
say "$PROJECT: $EVENTS events in the store; timing $REPEAT requests of each shape"

for query in \
  "resource=instances" \
  "resource=cores" \
  "resource=instances&step=1" \
  "resource=ram&since=$MIDDLE" \
  "resource=instances&since=$MIDDLE&step=60"; do
  url="$BASE/v1/projects/$PROJECT/usage/history?$query"
  times=()
  for _ in $(seq 1 "$REPEAT"); do
    times+=("$(curl -fsS -o "$WORK/answer.json" -w '%{time_total}' "$url")")
  done
  points="$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["points"]))' "$WORK/answer.json")"
  python3 - "$EVENTS" "$query" "$points" "${times[@]}" <<'EOF'
import json, statistics, sys
events, query, points, *times = sys.argv[1:]
ms = sorted(float(t) * 1000 for t in times)
print(json.dumps({"events": int(events), "query": query, "points": int(points),
                  "median_ms": round(statistics.median(ms), 1), "max_ms": round(ms[-1], 1)}))
EOF
done
