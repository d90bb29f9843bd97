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

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
VERSION="$(awk '$1 == "github.com/Shopify/toxiproxy/v2" {print $2; exit}' "$SCRIPT_DIR/go.mod")"
CACHE="${MEMSTREAM_CACHE_DIR:-$HOME/.cache/memstream}/toxiproxy"
PORT="${MEMSTREAM_TOXIPROXY_PORT:-8474}"
# Absolute now, before anything changes directory: a relative folder means the caller's directory.
DATA_DIR="$(realpath -m -- "${MEMSTREAM_TOXIPROXY_DATA:-$REPO_ROOT/.data/toxiproxy}")"
PID_FILE="$DATA_DIR/toxiproxy.pid"
LOG_FILE="$DATA_DIR/toxiproxy.log"

log() { echo "toxiproxy.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=../lib/pidfile.sh
source "$SCRIPT_DIR/../lib/pidfile.sh"

[[ $PORT =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT <= 65535)) || die "bad MEMSTREAM_TOXIPROXY_PORT '$PORT'"

build() {
    if [[ -n ${MEMSTREAM_TOXIPROXY_BIN:-} ]]; then echo "$MEMSTREAM_TOXIPROXY_BIN"; return 0; fi
    [[ -n $VERSION ]] || die "no github.com/Shopify/toxiproxy/v2 version in $SCRIPT_DIR/go.mod"
    local dest="$CACHE/$VERSION" bin="$CACHE/$VERSION/toxiproxy-server"
    if [[ -x $bin ]]; then echo "$bin"; return 0; fi
    command -v go >/dev/null 2>&1 \
        || die "go not found on PATH: Toxiproxy $VERSION is built from source (or set MEMSTREAM_TOXIPROXY_BIN to a release binary)"
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9
    if [[ ! -x $bin ]]; then  # another call may have built it while this one waited
        local tmp; tmp="$(mktemp -d "$CACHE/.build-$VERSION.XXXXXX")"
        log "building Toxiproxy $VERSION with $(go version | cut -d' ' -f3) (go build of the tool in $SCRIPT_DIR/go.mod)"
        local start=$SECONDS
        # CGO off: a static binary, no C toolchain. -trimpath: no build paths in it.
        if ! (cd "$SCRIPT_DIR" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/toxiproxy-server" \
                github.com/Shopify/toxiproxy/v2/cmd/server >&2); then
            rm -rf "$tmp"
            die "go build of github.com/Shopify/toxiproxy/v2/cmd/server@$VERSION failed"
        fi
        rm -rf "$dest"
        mv "$tmp" "$dest"
        log "built $bin in $((SECONDS - start))s"
    fi
    echo "$bin"
}

running_pid() { pidfile_alive "$PID_FILE"; }

url() { echo "http://127.0.0.1:$PORT"; }

start() {
    local bin pid i; bin="$(build)"
    if pid="$(running_pid)"; then log "already running (pid $pid): $(url)"; return 0; fi
    mkdir -p "$DATA_DIR"
    # -host 127.0.0.1: the API stays on loopback (its default, "localhost", may resolve elsewhere).
    # LOG_LEVEL info: not a debug line for every API request.
    LOG_LEVEL=info "$bin" -host 127.0.0.1 -port "$PORT" >"$LOG_FILE" 2>&1 &
    echo $! > "$PID_FILE"
    for ((i = 0; i < 60; i++)); do
        if curl -fsS "$(url)/version" >/dev/null 2>&1; then
            log "ready (pid $(cat "$PID_FILE")): $(url)"
            return 0
        fi
        kill -0 "$(cat "$PID_FILE")" 2>/dev/null || { rm -f "$PID_FILE"; tail -n 30 "$LOG_FILE" >&2; die "exited"; }
        sleep 0.25
    done
    pidfile_stop "$PID_FILE" 5 >/dev/null || true
    die "not ready after 15s (see $LOG_FILE)"
}

stop() {
    local pid
    if pid="$(pidfile_stop "$PID_FILE" 10)"; then log "stopped (pid $pid)"; else log "not running"; fi
}

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
