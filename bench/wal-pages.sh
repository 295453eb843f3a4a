#!/usr/bin/env bash
# What a commit of the events file writes (issue 21): the pages in each transaction's WAL
# frames, counted per b-tree (table or index, leaf or interior), over a `quota bench` run on
# SQLite. A commit's fsync costs more the more it wrote, so this says what the cycle pays for.
#
# The WAL is copied in the middle of the run; its frame headers name the page each frame holds,
# and the finished file's `dbstat` names the b-tree each page belongs to (the events file only
# grows, so a page keeps its b-tree). Needs python3 with SQLite's dbstat table (Debian's has it).
#
# Usage: bench/wal-pages.sh [WORKLOAD (default fleet)] [more `quota bench` flags]
# Environment: QUOTA_BIN (default target/release/quota).
# Prints the bench's JSON line, then frames a commit, overall and per b-tree, over the last
# 200 commits of the copy.
set -euo pipefail
cd "$(dirname "$0")/.."

WORKLOAD="${1:-fleet}"
shift || true
QUOTA_BIN="${QUOTA_BIN:-target/release/quota}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$QUOTA_BIN" bench --workload "$WORKLOAD" --seconds 8 --store "sqlite://$WORK/events.db" "$@" \
  >"$WORK/bench.json" 2>/dev/null &
BENCH=$!
sleep 6
cp "$WORK/events.db-wal" "$WORK/copy-wal"
wait "$BENCH"
tail -n 1 "$WORK/bench.json"

python3 - "$WORK/copy-wal" "$WORK/events.db" <<'PY'
import collections, sqlite3, struct, sys

wal = open(sys.argv[1], "rb").read()
_, _, page_size, _, salt1, salt2, _, _ = struct.unpack(">8I", wal[:32])
frame_bytes = 24 + page_size
commits, pages = [], []
for offset in range(32, len(wal) - frame_bytes + 1, frame_bytes):
    page, db_pages, s1, s2 = struct.unpack(">4I", wal[offset:offset + 16])
    if (s1, s2) != (salt1, salt2):
        break  # the rest is left from the WAL's previous cycle
    pages.append(page)
    if db_pages:  # a commit's last frame records the file's size
        commits.append(pages)
        pages = []
last = commits[-200:]
if not last:
    sys.exit("wal-pages.sh: no whole commit in the copied WAL")
db = sqlite3.connect(f"file:{sys.argv[2]}?mode=ro", uri=True)
btree = {page: (name, kind) for name, page, kind in
         db.execute("SELECT name, pageno, pagetype FROM dbstat")}
per_btree = collections.Counter(btree.get(p, ("(new since)", "")) for c in last for p in c)
print(f"page size {page_size} B; {len(last)} commits; "
      f"{sum(map(len, last)) / len(last):.1f} frames a commit")
for (name, kind), frames in per_btree.most_common():
    print(f"{frames / len(last):6.2f}  {name} {kind}")
PY
