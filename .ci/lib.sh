# Shared by the scripts that drive a real `quota serve`: the CI's third-party clients
# (.ci/schemathesis.sh, .ci/novaclient.sh, .ci/console.sh) and the benchmarks over HTTP
# (bench/peers.sh, bench/history.sh). Source it after setting `say`.

# A fresh virtualenv at $1 with the pip requirements $2...: installs python3-venv first if the
# machine lacks it (Debian's python3 comes without it).
ci_make_venv() {
  local venv="$1"
  shift
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    say "installing python3-venv"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  say "installing $* into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
}

# The server binary: $QUOTA_BIN, else this checkout's debug build (a no-op after `cargo test`).
ci_quota_bin() {
  if [ -z "${QUOTA_BIN:-}" ]; then
    cargo build --quiet -p quota-cli --bin quota
    QUOTA_BIN=target/debug/quota
  fi
}

# Starts `quota serve` on a free loopback port with the SQLite store $1 and the tokens file $2
# (empty: no tokens, every request allowed, as the benchmarks run it), logging to $3; sets
# SERVER_PID and BASE, and returns once /healthz answers (or exits 1 with the log if the server
# died).
ci_start_server() {
  local store="$1" tokens="$2" log="$3" port
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  BASE="http://127.0.0.1:$port"
  "$QUOTA_BIN" serve --listen "127.0.0.1:$port" --store "$store" ${tokens:+--tokens "$tokens"} >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    if curl -fsS "$BASE/healthz" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      say "the server exited at start:"
      cat "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  curl -fsS "$BASE/healthz" >/dev/null
}

# Stops the server started by ci_start_server, if it still runs.
ci_stop_server() {
  if [ -n "${SERVER_PID:-}" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}

# A temporary folder in WORK and an admin token in TOKEN, written to "$WORK/tokens" (mode 0600)
# with the name $1; on exit the server started by ci_start_server is stopped and the folder
# removed.
ci_workspace() {
  WORK="$(mktemp -d)"
  SERVER_PID=""
  trap 'ci_stop_server; rm -rf "$WORK"' EXIT
  TOKEN="ci-admin-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
  printf '%s admin %s\n' "$TOKEN" "$1" >"$WORK/tokens"
  chmod 600 "$WORK/tokens"
}
