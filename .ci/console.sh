#!/usr/bin/env bash
# CI: the audit console (/ui/) in a real browser. Starts a real `quota serve` (SQLite, a tokens
# file with an admin token), seeds a history over HTTP and drives Debian's headless Chromium with
# Selenium (.ci/console.py): the token form, the projects, a project's limits, usage and charts,
# the audit trail filtered, a reservation's history, a hostile actor shown as text, a wrong
# token's 401. Screenshots of each page go to $CONSOLE_ARTEFACTS. Selenium goes into a virtualenv
# outside the checkout, pinned; Chromium and its driver come from apt when missing.
#
# Environment (all optional):
#   CONSOLE_VENV        virtualenv to install into
#   CONSOLE_ARTEFACTS   where the screenshots go (default: target/console-screenshots)
#   QUOTA_BIN           the server binary (default: target/debug/quota, built first)
set -euo pipefail
cd "$(dirname "$0")/.."

PINS=(selenium==4.51.0)
VENV="${CONSOLE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/quota-ci/console-selenium-4.51.0}"
QUOTA_BIN="${QUOTA_BIN:-}"
ARTEFACTS="${CONSOLE_ARTEFACTS:-target/console-screenshots}"

say() { printf 'console.sh: %s\n' "$*" >&2; }
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  say "installing chromium and chromium-driver"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
if ! "$VENV/bin/python" -c 'import selenium' 2>/dev/null; then
  ci_make_venv "$VENV" "${PINS[@]}"
fi
ci_quota_bin

ci_workspace console-ci
mkdir -p "$ARTEFACTS"

ci_start_server "sqlite://$WORK/console.db" "$WORK/tokens" "$WORK/server.log"

status=0
"$VENV/bin/python" .ci/console.py "$BASE" "$TOKEN" "$ARTEFACTS" || status=$?
if [ "$status" -ne 0 ]; then
  say "server log tail:"
  tail -n 20 "$WORK/server.log" >&2
fi
exit "$status"
