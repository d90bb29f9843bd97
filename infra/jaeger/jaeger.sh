#!/usr/bin/env bash
# memstream: a local Jaeger (v2, built from the Go module proxy) taking OTLP traces and serving its
# query API and UI, on loopback, traces in memory.
# Usage: infra/jaeger/jaeger.sh {build|start|stop|status|urls}
#   build   print the binary's path, building it the first time (go build of the tool this folder's
#           go.mod pins: github.com/jaegertracing/jaeger/cmd/jaeger v1.75.0) into
#           ${MEMSTREAM_CACHE_DIR:-~/.cache/memstream}/jaeger/<version>/jaeger; later calls only check it
#   urls    the OTLP endpoint (for OTEL_EXPORTER_OTLP_ENDPOINT) and the query URL (API and UI)
#
# Environment:
#   MEMSTREAM_JAEGER_OTLP_PORT   OTLP over HTTP   (default: 4318; gRPC on 4317: this minus one)
#   MEMSTREAM_JAEGER_QUERY_PORT  query API and UI (default: 16686; its gRPC API this minus one)
#   MEMSTREAM_JAEGER_DATA        pid and log      (default: <repo>/.data/jaeger)
#   MEMSTREAM_JAEGER_BIN         a jaeger binary to use instead of building one
#   MEMSTREAM_CACHE_DIR          build cache root (default: ~/.cache/memstream)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
VERSION="$(awk '$1 == "github.com/jaegertracing/jaeger" {print $2; exit}' "$SCRIPT_DIR/go.mod")"
CACHE="${MEMSTREAM_CACHE_DIR:-$HOME/.cache/memstream}/jaeger"
OTLP_PORT="${MEMSTREAM_JAEGER_OTLP_PORT:-4318}"
QUERY_PORT="${MEMSTREAM_JAEGER_QUERY_PORT:-16686}"
DATA_DIR="${MEMSTREAM_JAEGER_DATA:-$REPO_ROOT/.data/jaeger}"
[[ $DATA_DIR == /* ]] || DATA_DIR="$PWD/$DATA_DIR"  # relative to the caller's folder, whatever the script cds into
PID_FILE="$DATA_DIR/jaeger.pid"

log() { echo "jaeger.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=../lib/pidfile.sh
source "$SCRIPT_DIR/../lib/pidfile.sh"

build() {
    if [[ -n ${MEMSTREAM_JAEGER_BIN:-} ]]; then echo "$MEMSTREAM_JAEGER_BIN"; return 0; fi
    [[ -n $VERSION ]] || die "no github.com/jaegertracing/jaeger version in $SCRIPT_DIR/go.mod"
    local dest="$CACHE/$VERSION" bin="$CACHE/$VERSION/jaeger"
    if [[ -x $bin ]]; then echo "$bin"; return 0; fi
    command -v go >/dev/null 2>&1 \
        || die "go not found on PATH: Jaeger $VERSION is built from source (or set MEMSTREAM_JAEGER_BIN to a release binary)"
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9
    if [[ ! -x $bin ]]; then  # another call may have built it while this one waited
        local tmp; tmp="$(mktemp -d "$CACHE/.build-$VERSION.XXXXXX")"
        log "building Jaeger $VERSION with $(go version | cut -d' ' -f3) (go build of the tool in $SCRIPT_DIR/go.mod; minutes the first time)"
        local start=$SECONDS
        # CGO off: a static binary, no C toolchain. -trimpath: no build paths in it.
        if ! (cd "$SCRIPT_DIR" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/jaeger" \
                github.com/jaegertracing/jaeger/cmd/jaeger >&2); then
            rm -rf "$tmp"
            die "go build of github.com/jaegertracing/jaeger/cmd/jaeger@$VERSION failed"
        fi
        rm -rf "$dest"
        mv "$tmp" "$dest"
        log "built $bin in $((SECONDS - start))s"
    fi
    echo "$bin"
}

running_pid() { pidfile_alive "$PID_FILE"; }

start() {
    local bin; bin="$(build)"
    if pid="$(running_pid)"; then log "already running (pid $pid): $(urls | tr '\n' ' ')"; return 0; fi
    mkdir -p "$DATA_DIR"
    MEMSTREAM_JAEGER_OTLP_PORT="$OTLP_PORT" MEMSTREAM_JAEGER_OTLP_GRPC_PORT="$((OTLP_PORT - 1))" \
    MEMSTREAM_JAEGER_QUERY_PORT="$QUERY_PORT" MEMSTREAM_JAEGER_QUERY_GRPC_PORT="$((QUERY_PORT - 1))" \
    MEMSTREAM_JAEGER_HEALTH_PORT="$((QUERY_PORT + 1))" \
        "$bin" --config "$SCRIPT_DIR/jaeger.yaml" >"$DATA_DIR/jaeger.log" 2>&1 &
    echo $! > "$PID_FILE"
    local i
    for ((i = 0; i < 120; i++)); do
        if curl -fsS "http://127.0.0.1:$QUERY_PORT/api/services" >/dev/null 2>&1 \
                && curl -fsS -o /dev/null -X POST -H 'Content-Type: application/json' -d '{}' \
                    "http://127.0.0.1:$OTLP_PORT/v1/traces" 2>/dev/null; then
            log "ready (pid $(cat "$PID_FILE")): $(urls | tr '\n' ' ')"
            return 0
        fi
        kill -0 "$(cat "$PID_FILE")" 2>/dev/null || { tail -n 30 "$DATA_DIR/jaeger.log" >&2; die "exited"; }
        sleep 0.5
    done
    die "not ready after 60s (see $DATA_DIR/jaeger.log)"
}

stop() {
    local pid
    if pid="$(pidfile_stop "$PID_FILE" 10)"; then log "stopped (pid $pid)"; else log "not running"; fi
}

urls() {
    echo "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$OTLP_PORT"
    echo "query: http://127.0.0.1:$QUERY_PORT"
}

status() {
    if pid="$(running_pid)"; then echo "running (pid $pid): $(urls | tr '\n' ' ')"; else echo "not running"; return 3; fi
}

case "${1:-}" in
    build) build ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    urls) urls ;;
    *) echo "usage: $0 {build|start|stop|status|urls}" >&2; exit 2 ;;
esac
