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

# shellcheck source=../lib/service.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/service.sh" jaeger.sh
OTLP_PORT="${MEMSTREAM_JAEGER_OTLP_PORT:-4318}"
QUERY_PORT="${MEMSTREAM_JAEGER_QUERY_PORT:-16686}"
DATA_DIR="$(absolute "${MEMSTREAM_JAEGER_DATA:-$REPO_ROOT/.data/jaeger}")"
PID_FILE="$DATA_DIR/jaeger.pid"

# shellcheck source=../lib/gobuild.sh
source "$SCRIPT_DIR/../lib/gobuild.sh"

build() {
    go_tool Jaeger github.com/jaegertracing/jaeger github.com/jaegertracing/jaeger/cmd/jaeger jaeger \
        MEMSTREAM_JAEGER_BIN "; minutes the first time"
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
    local waited=0
    pidfile_wait_ready "$PID_FILE" 120 0.5 answers || waited=$?
    ((waited != 1)) || { tail -n 30 "$DATA_DIR/jaeger.log" >&2; die "exited"; }
    ((waited == 0)) || die "not ready after 60s (see $DATA_DIR/jaeger.log)"
    log "ready (pid $(cat "$PID_FILE")): $(urls | tr '\n' ' ')"
}

# Both the query API and the OTLP endpoint answer.
answers() {
    curl -fsS "http://127.0.0.1:$QUERY_PORT/api/services" >/dev/null 2>&1 \
        && curl -fsS -o /dev/null -X POST -H 'Content-Type: application/json' -d '{}' \
            "http://127.0.0.1:$OTLP_PORT/v1/traces" 2>/dev/null
}

stop() { pidfile_stop_saying "$PID_FILE"; }

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
