#!/usr/bin/env bash
# CI: the Nova-compatible quota API (SPEC) against the real client. Starts a real `quota serve`
# (SQLite, a tokens file with an admin token) and runs .ci/nova_quotas.py: python-novaclient's
# `quotas` and `quota_classes` managers through a keystoneauth1 token endpoint (X-Auth-Token),
# then every answer raw against OpenStack Tempest's compute v2.1 response schemas. The Python
# packages go into a virtualenv outside the checkout, pinned.
#
# Environment (all optional):
#   NOVACLIENT_VENV   virtualenv to install into
#   QUOTA_BIN         the server binary (default: target/debug/quota, built first)
set -euo pipefail
cd "$(dirname "$0")/.."

PINS=(python-novaclient==18.13.1 keystoneauth1==5.18.1 tempest==47.0.0)
VENV="${NOVACLIENT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/quota-ci/novaclient-18.13.1-tempest-47.0.0}"
QUOTA_BIN="${QUOTA_BIN:-}"

say() { printf 'novaclient.sh: %s\n' "$*" >&2; }
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

if ! "$VENV/bin/python" -c 'import novaclient, tempest, jsonschema' 2>/dev/null; then
  ci_make_venv "$VENV" "${PINS[@]}"
fi
ci_quota_bin

ci_workspace nova-ci

ci_start_server "sqlite://$WORK/nova.db" "$WORK/tokens" "$WORK/server.log"

status=0
"$VENV/bin/python" .ci/nova_quotas.py "$BASE" "$TOKEN" || status=$?
if [ "$status" -ne 0 ]; then
  say "server log tail:"
  tail -n 20 "$WORK/server.log" >&2
fi
exit "$status"
