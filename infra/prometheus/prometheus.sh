#!/usr/bin/env bash
# memstream: local Prometheus (the Debian package's binary) scraping the workers listed in
# <data dir>/targets/*.json. Usage: infra/prometheus/prometheus.sh {start|stop|status|targets FILE HOST:PORT...}
#
# Environment:
#   MEMSTREAM_PROMETHEUS_PORT   HTTP port                 (default: 9090)
#   MEMSTREAM_PROMETHEUS_DATA   data dir (TSDB, targets)  (default: <repo>/.data/prometheus)
#   MEMSTREAM_PROMETHEUS_BIN    prometheus binary         (default: prometheus on PATH)
#   MEMSTREAM_PROMETHEUS_SCRAPE scrape interval           (default: the config's 5s)
set -euo pipefail

# shellcheck source=../lib/service.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/service.sh" prometheus.sh
PORT="${MEMSTREAM_PROMETHEUS_PORT:-9090}"
DATA_DIR="$(absolute "${MEMSTREAM_PROMETHEUS_DATA:-$REPO_ROOT/.data/prometheus}")"
BIN="${MEMSTREAM_PROMETHEUS_BIN:-prometheus}"
PID_FILE="$DATA_DIR/prometheus.pid"
CONF="$DATA_DIR/prometheus.yml"


running_pid() { pidfile_alive "$PID_FILE"; }

start() {
    command -v "$BIN" >/dev/null 2>&1 \
        || die "$BIN not found: apt-get install --no-install-recommends prometheus (scripts/install.sh does)"
    if pid="$(running_pid)"; then log "already running (pid $pid) on 127.0.0.1:$PORT"; return 0; fi
    mkdir -p "$DATA_DIR/targets" "$DATA_DIR/tsdb"
    local interval="${MEMSTREAM_PROMETHEUS_SCRAPE:-}"
    if [[ -n $interval ]]; then
        sed "s/^\(  *\)scrape_interval: .*/\1scrape_interval: $interval/; s/^\(  *\)evaluation_interval: .*/\1evaluation_interval: $interval/" \
            "$SCRIPT_DIR/prometheus-local.yml" > "$CONF"
    else
        cp "$SCRIPT_DIR/prometheus-local.yml" "$CONF"
    fi
    "$BIN" --config.file="$CONF" --storage.tsdb.path="$DATA_DIR/tsdb" \
        --web.listen-address="127.0.0.1:$PORT" --log.level=warn --enable-feature=exemplar-storage \
        >"$DATA_DIR/prometheus.out" 2>&1 &
    echo $! > "$PID_FILE"
    local waited=0
    pidfile_wait_ready "$PID_FILE" 60 0.5 answers || waited=$?
    ((waited != 1)) || { tail -n 20 "$DATA_DIR/prometheus.out" >&2; die "exited"; }
    ((waited == 0)) || die "not ready after 30s (see $DATA_DIR/prometheus.out)"
    log "ready on 127.0.0.1:$PORT (pid $(cat "$PID_FILE"), targets in $DATA_DIR/targets)"
}

answers() { curl -fsS "http://127.0.0.1:$PORT/-/ready" >/dev/null 2>&1; }

stop() { pidfile_stop_saying "$PID_FILE"; }

status() {
    if pid="$(running_pid)"; then echo "running (pid $pid, 127.0.0.1:$PORT, data $DATA_DIR)"; else echo "not running"; return 3; fi
}

# targets NAME HOST:PORT...: write <data dir>/targets/NAME.json (Prometheus picks it up by itself)
targets() {
    local name="$1"; shift
    mkdir -p "$DATA_DIR/targets"
    local list; list="$(printf '"%s",' "$@")"
    printf '[{"targets": [%s]}]\n' "${list%,}" > "$DATA_DIR/targets/$name.json.tmp"
    mv "$DATA_DIR/targets/$name.json.tmp" "$DATA_DIR/targets/$name.json"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    targets) shift; [[ $# -ge 2 ]] || die "usage: $0 targets NAME HOST:PORT..."; targets "$@" ;;
    *) echo "usage: $0 {start|stop|status|targets NAME HOST:PORT...}" >&2; exit 2 ;;
esac
