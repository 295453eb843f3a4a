#!/usr/bin/env bash
# CI: the OpenAPI document is the contract. Starts a real `quota serve` (SQLite, a tokens file
# with an admin token) and runs schemathesis against /openapi.json with every check, positive
# and negative data, and the stateful phase (which chains reserve -> get/commit -> release
# through the document's `links`). Exits non-zero on any failure; the last line is a summary.
#
# Environment (all optional):
#   SCHEMATHESIS_VENV          virtualenv to install into (outside the repository)
#   SCHEMATHESIS_MAX_EXAMPLES  test cases per operation and phase (default 40)
#   SCHEMATHESIS_SEED          a fixed seed, to reproduce a run
#   QUOTA_BIN                  the server binary (default: target/debug/quota, built first)
#
# Checks: `--checks all` and `--mode all`, with one check excluded:
#   - use_after_free expects a resource to be gone (404) after its DELETE. The API's DELETEs
#     remove a project's own overrides (`DELETE /v1/projects/{p}/limits`), a user's
#     (`…/users/{u}/limits`) and a project's parent (`…/parent`); `GET` then rightly answers 200
#     with the defaults (SPEC: "204 (back to defaults)"), the project's limits, or `"parent":
#     null`. schemathesis 4.32.5 does not honour a per-operation switch for this stateful check,
#     so it is excluded for the run; every DELETE of the API is such a pair.
# What else is narrowed is narrowed for one operation and one reason, each written down in
# .ci/schemathesis.toml:
#   - not_a_server_error allows 503 on the reads that take `min_position` (`not-caught-up`
#     after a 5 s wait is the contract);
#   - positive_data_acceptance allows 400 on reserve and project limits (`unknown-resource` and
#     64-bit overflow depend on earlier requests, not on the request's shape);
#   - positive_data_acceptance allows 400 on the usage history (`since` after `until`, or a
#     `step` giving more than 1,000 points: relations between parameters);
#   - positive_data_acceptance allows 400 and 409 on setting a parent (a cycle, the tree's depth
#     and rule 6 for the new ancestors depend on the tree earlier requests built);
#   - the stateful phase follows the document's links only (schemathesis' inferred links are a
#     loop over the projections endpoints that would take every scenario).
# .ci/schemathesis_hooks.py makes generated writes realistic (existing resource names,
# non-negative reserve deltas, integer literals for `2.0`) and never turns a malformed request
# into a well-formed one. One worker: with two, CPython 3.11's `ast.parse` (called by hypothesis
# to describe lambdas) raced between threads and crashed the tool itself ("AST constructor
# recursion depth mismatch") with no check failing. Health checks: too_slow and filter_too_much
# are suppressed; they judge the generator on a slow shared machine, not the server.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
VENV="${SCHEMATHESIS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/quota-ci/schemathesis-$SCHEMATHESIS_VERSION}"
MAX_EXAMPLES="${SCHEMATHESIS_MAX_EXAMPLES:-40}"
QUOTA_BIN="${QUOTA_BIN:-}"

say() { printf 'schemathesis.sh: %s\n' "$*" >&2; }
# shellcheck source=.ci/lib.sh
. .ci/lib.sh

install_schemathesis() {
  if [ -x "$VENV/bin/schemathesis" ] &&
    [ "$("$VENV/bin/schemathesis" --version 2>/dev/null)" = "schemathesis, version $SCHEMATHESIS_VERSION" ]; then
    return
  fi
  ci_make_venv "$VENV" "schemathesis==$SCHEMATHESIS_VERSION"
}

install_schemathesis
ci_quota_bin

ci_workspace schemathesis
ci_start_server "sqlite://$WORK/x.db" "$WORK/tokens" "$WORK/server.log"

# The resources schemathesis_hooks.py maps generated names onto, so that positive reserves can
# be granted and the stateful phase can chain commit and release onto them.
curl -fsS -X PUT "$BASE/v1/defaults" -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/json' \
  -d '{"limits": {"instances": 1000000, "cores": 1000000, "class:VCPU": 1000000,
       "ram": -1, "disk": -1, "gpus": -1, "volumes": -1, "ports": -1}}' >/dev/null

SEED_ARGS=()
if [ -n "${SCHEMATHESIS_SEED:-}" ]; then SEED_ARGS=(--seed "$SCHEMATHESIS_SEED"); fi

status=0
SCHEMATHESIS_HOOKS=.ci/schemathesis_hooks.py \
  "$VENV/bin/schemathesis" --config-file .ci/schemathesis.toml run "$BASE/openapi.json" \
  --checks all \
  --exclude-checks use_after_free \
  --mode all \
  --phases examples,coverage,fuzzing,stateful \
  --max-examples "$MAX_EXAMPLES" \
  --header "Authorization: Bearer $TOKEN" \
  --suppress-health-check too_slow,filter_too_much \
  --request-timeout 15 \
  --generation-database none \
  --workers 1 \
  --no-color \
  "${SEED_ARGS[@]}" || status=$?

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
  say "the server died during the run:"
  tail -n 50 "$WORK/server.log" >&2
  status=1
fi

if [ "$status" -eq 0 ]; then
  echo "schemathesis $SCHEMATHESIS_VERSION: 0 failures against $BASE/openapi.json (max-examples $MAX_EXAMPLES)"
else
  say "server log tail:"
  tail -n 20 "$WORK/server.log" >&2
  echo "schemathesis $SCHEMATHESIS_VERSION: FAILED (exit $status) against $BASE/openapi.json"
fi
exit "$status"
