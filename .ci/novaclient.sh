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

if ! "$VENV/bin/python" -c 'import novaclient, tempest, jsonschema' 2>/dev/null; then
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    say "installing python3-venv"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  say "installing ${PINS[*]} into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PINS[@]}"
fi

if [ -z "$QUOTA_BIN" ]; then
  cargo build --quiet -p quota-cli --bin quota
  QUOTA_BIN=target/debug/quota
fi

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

TOKEN="ci-admin-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
printf '%s admin nova-ci\n' "$TOKEN" >"$WORK/tokens"
chmod 600 "$WORK/tokens"
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
BASE="http://127.0.0.1:$PORT"
"$QUOTA_BIN" serve --listen "127.0.0.1:$PORT" --store "sqlite://$WORK/nova.db" \
  --tokens "$WORK/tokens" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do
  if curl -fsS "$BASE/healthz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    say "the server exited at start:"
    cat "$WORK/server.log" >&2
    exit 1
  fi
  sleep 0.1
done

status=0
"$VENV/bin/python" .ci/nova_quotas.py "$BASE" "$TOKEN" || status=$?
if [ "$status" -ne 0 ]; then
  say "server log tail:"
  tail -n 20 "$WORK/server.log" >&2
fi
exit "$status"
