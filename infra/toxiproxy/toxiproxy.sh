#!/usr/bin/env bash
# memstream: a local Toxiproxy (built from the Go module proxy): TCP proxies on loopback whose traffic
# the chaos bench degrades on purpose (latency, resets, timeouts, bandwidth) through its HTTP API.
# Usage: infra/toxiproxy/toxiproxy.sh {build|start|stop|status|url}
#   build   print the binary's path, building it the first time (go build of the tool this folder's
#           go.mod pins: github.com/Shopify/toxiproxy/v2/cmd/server v2.5.0) into
#           ${MEMSTREAM_CACHE_DIR:-~/.cache/memstream}/toxiproxy/<version>/toxiproxy-server; later calls
#           only check it
#   start   start the server (API on 127.0.0.1 only, no proxy yet) and wait until its API answers
#   url     the API's URL
#
# Environment:
#   MEMSTREAM_TOXIPROXY_PORT  the HTTP API      (default: 8474, on 127.0.0.1)
#   MEMSTREAM_TOXIPROXY_DATA  pid and log       (default: <repo>/.data/toxiproxy; a relative folder is
#                             read against the directory the script is started in)
#   MEMSTREAM_TOXIPROXY_BIN   a toxiproxy-server binary to use instead of building one
#   MEMSTREAM_CACHE_DIR       build cache root  (default: ~/.cache/memstream)
set -euo pipefail

# shellcheck source=../lib/service.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/service.sh" toxiproxy.sh
PORT="${MEMSTREAM_TOXIPROXY_PORT:-8474}"
# Absolute now, before anything changes directory: a relative folder means the caller's directory.
DATA_DIR="$(realpath -m -- "${MEMSTREAM_TOXIPROXY_DATA:-$REPO_ROOT/.data/toxiproxy}")"
PID_FILE="$DATA_DIR/toxiproxy.pid"
LOG_FILE="$DATA_DIR/toxiproxy.log"

# shellcheck source=../lib/gobuild.sh
source "$SCRIPT_DIR/../lib/gobuild.sh"

[[ $PORT =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT <= 65535)) || die "bad MEMSTREAM_TOXIPROXY_PORT '$PORT'"

build() {
    go_tool Toxiproxy github.com/Shopify/toxiproxy/v2 github.com/Shopify/toxiproxy/v2/cmd/server toxiproxy-server \
        MEMSTREAM_TOXIPROXY_BIN
}

running_pid() { pidfile_alive "$PID_FILE"; }

url() { echo "http://127.0.0.1:$PORT"; }

start() {
    local bin pid; bin="$(build)"
    if pid="$(running_pid)"; then log "already running (pid $pid): $(url)"; return 0; fi
    mkdir -p "$DATA_DIR"
    # -host 127.0.0.1: the API stays on loopback (its default, "localhost", may resolve elsewhere).
    # LOG_LEVEL info: not a debug line for every API request.
    LOG_LEVEL=info "$bin" -host 127.0.0.1 -port "$PORT" >"$LOG_FILE" 2>&1 &
    echo $! > "$PID_FILE"
    local waited=0
    pidfile_wait_ready "$PID_FILE" 60 0.25 answers || waited=$?
    ((waited != 1)) || { rm -f "$PID_FILE"; tail -n 30 "$LOG_FILE" >&2; die "exited"; }
    if ((waited)); then
        pidfile_stop "$PID_FILE" 5 >/dev/null || true
        die "not ready after 15s (see $LOG_FILE)"
    fi
    log "ready (pid $(cat "$PID_FILE")): $(url)"
}

answers() { curl -fsS "$(url)/version" >/dev/null 2>&1; }

stop() { pidfile_stop_saying "$PID_FILE"; }

status() {
    local pid
    if pid="$(running_pid)"; then echo "running (pid $pid): $(url)"; else echo "not running"; return 3; fi
}

case "${1:-}" in
    build) build ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    url) url ;;
    *) echo "usage: $0 {build|start|stop|status|url}" >&2; exit 2 ;;
esac
