#!/usr/bin/env bash
# memstream: a local Qdrant server, one node or a cluster of N nodes in distributed mode, on loopback.
#
# Usage: infra/qdrant/qdrant.sh {start|stop|restart|status|urls|logs I} [--nodes N]
#        infra/qdrant/qdrant.sh {kill-node I|stop-node I|start-node I|node-pid I}   (chaos: node I of 1..N)
#
# Node i (1..N) listens on HTTP port BASE+10*(i-1), gRPC +1, p2p +2, and keeps its storage in
# DATA/node-i. The first node bootstraps the cluster, the others join it; start returns once every
# node answers and the first reports all N peers. A node restarted with start-node keeps its storage
# (its shard replicas recover from the others). `urls` prints the nodes' HTTP URLs, comma-separated:
# the value for MEMSTREAM_QDRANT_URL (memstream fails over between them).
#
# Environment:
#   MEMSTREAM_QDRANT_BIN    the qdrant binary (default: ../shared/bin/qdrant beside the checkout, else
#                           qdrant on PATH). A user runs the official release or image, v1.18 or later.
#   MEMSTREAM_QDRANT_NODES  nodes (default 1; --nodes N wins). N > 1 runs distributed mode.
#   MEMSTREAM_QDRANT_PORT   HTTP port of node 1 (default 6333)
#   MEMSTREAM_QDRANT_DATA   data folder (default: $MEMSTREAM_DATA_DIR/qdrant-server, else <repo>/.data/qdrant-server)
#   MEMSTREAM_QDRANT_TIMEOUT  seconds start waits for the nodes and peers (default 90)
set -euo pipefail

# shellcheck source=../lib/service.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/service.sh" qdrant.sh

# --nodes N may come before or after the verb (as kafka.sh's --brokers N).
VERB=""
NODE_ARG=""
NODES_FLAG=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --nodes) NODES_FLAG="${2:?--nodes needs a number}"; shift 2 ;;
        --nodes=*) NODES_FLAG="${1#--nodes=}"; shift ;;
        *) if [[ -z "$VERB" ]]; then VERB="$1"; else NODE_ARG="$1"; fi; shift ;;
    esac
done

DATA_DIR="$(absolute "${MEMSTREAM_QDRANT_DATA:-${MEMSTREAM_DATA_DIR:-$REPO_ROOT/.data}/qdrant-server}")"
BASE_PORT="${MEMSTREAM_QDRANT_PORT:-6333}"
START_TIMEOUT="${MEMSTREAM_QDRANT_TIMEOUT:-90}"
NODES_FILE="$DATA_DIR/nodes"

# The node count: --nodes, else what the last start recorded (stop/status/chaos), else the variable.
if [[ -n "$NODES_FLAG" ]]; then
    NODES="$NODES_FLAG"
elif [[ "$VERB" != start && -s "$NODES_FILE" ]]; then
    NODES="$(cat "$NODES_FILE")"
else
    NODES="${MEMSTREAM_QDRANT_NODES:-1}"
fi
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || die "--nodes must be a positive number, not '$NODES'"

find_binary() {
    local candidate
    for candidate in "${MEMSTREAM_QDRANT_BIN:-}" "$REPO_ROOT/../shared/bin/qdrant" "$(command -v qdrant 2>/dev/null || true)"; do
        if [[ -n "$candidate" && -x "$candidate" ]]; then
            echo "$candidate"
            return 0
        fi
    done
    [[ -z "${MEMSTREAM_QDRANT_BIN:-}" ]] || die "MEMSTREAM_QDRANT_BIN=$MEMSTREAM_QDRANT_BIN is not an executable file"
    die "no Qdrant server binary: set MEMSTREAM_QDRANT_BIN to one (the release binary from \
github.com/qdrant/qdrant/releases, v1.18 or later), put qdrant on PATH, or run the official image \
qdrant/qdrant:v1.18.3 and set MEMSTREAM_QDRANT_URL instead of starting one here"
}

http_port() { echo $((BASE_PORT + 10 * ($1 - 1))); }
grpc_port() { echo $((BASE_PORT + 10 * ($1 - 1) + 1)); }
p2p_port() { echo $((BASE_PORT + 10 * ($1 - 1) + 2)); }
node_dir() { echo "$DATA_DIR/node-$1"; }
url_of() { echo "http://127.0.0.1:$(http_port "$1")"; }

check_node() {
    [[ "$1" =~ ^[0-9]+$ && "$1" -ge 1 && "$1" -le "$NODES" ]] || die "node must be 1..$NODES, not '${1:-}'"
}

# The pid of node $1's qdrant process if it runs (and really is qdrant), else fails.
node_pid() { pidfile_alive_as "$(node_dir "$1")/qdrant.pid" qdrant; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_node() {
    local i="$1" bin dir pid
    bin="$(find_binary)"
    if pid="$(node_pid "$i")"; then
        log "node $i already running (pid $pid) at $(url_of "$i")"
        return 0
    fi
    local port
    for port in "$(http_port "$i")" "$(grpc_port "$i")" "$(p2p_port "$i")"; do
        port_open "$port" && die "port $port on 127.0.0.1 is in use by another process (node $i)"
    done
    dir="$(node_dir "$i")"
    mkdir -p "$dir/storage" "$dir/snapshots"
    local args=()
    if [[ "$NODES" -gt 1 ]]; then
        args+=(--uri "http://127.0.0.1:$(p2p_port "$i")")
        [[ "$i" -eq 1 ]] || args+=(--bootstrap "http://127.0.0.1:$(p2p_port 1)")
    fi
    local cluster=false
    [[ "$NODES" -gt 1 ]] && cluster=true
    # Config by environment (no config file): storage, ports, loopback, no telemetry; small thread pools.
    # setsid: the node outlives this script and is the pid recorded (kill-node kills qdrant itself).
    (
        cd "$dir"
        QDRANT__SERVICE__HOST=127.0.0.1 \
        QDRANT__SERVICE__HTTP_PORT="$(http_port "$i")" \
        QDRANT__SERVICE__GRPC_PORT="$(grpc_port "$i")" \
        QDRANT__CLUSTER__ENABLED="$cluster" \
        QDRANT__CLUSTER__P2P__PORT="$(p2p_port "$i")" \
        QDRANT__STORAGE__STORAGE_PATH="$dir/storage" \
        QDRANT__STORAGE__SNAPSHOTS_PATH="$dir/snapshots" \
        QDRANT__STORAGE__PERFORMANCE__MAX_SEARCH_THREADS=1 \
        QDRANT__STORAGE__PERFORMANCE__OPTIMIZER_CPU_BUDGET=1 \
        QDRANT__TELEMETRY_DISABLED=true \
        QDRANT__LOG_LEVEL=WARN \
        exec setsid "$bin" "${args[@]}" >>"$dir/qdrant.log" 2>&1 </dev/null 9>&-
    ) &
    echo $! >"$dir/qdrant.pid"
    log "node $i starting at $(url_of "$i") (pid $!, storage $dir/storage)"
}

wait_node() {
    local i="$1" deadline=$((SECONDS + START_TIMEOUT))
    until curl -fsS -m 2 "$(url_of "$i")/readyz" >/dev/null 2>&1; do
        node_pid "$i" >/dev/null || { tail -n 30 "$(node_dir "$i")/qdrant.log" >&2 || true; die "node $i exited while starting"; }
        [[ $SECONDS -lt $deadline ]] || { tail -n 30 "$(node_dir "$i")/qdrant.log" >&2 || true; die "node $i not ready after ${START_TIMEOUT}s"; }
        sleep 0.3
    done
}

wait_peers() {
    # Every node knows all N peers (distributed mode), so a collection made now places replicas on all.
    [[ "$NODES" -gt 1 ]] || return 0
    local deadline=$((SECONDS + START_TIMEOUT)) i peers
    for ((i = 1; i <= NODES; i++)); do
        while true; do
            peers="$(curl -fsS -m 2 "$(url_of "$i")/cluster" 2>/dev/null | jq -r '.result.peers | length' 2>/dev/null || echo 0)"
            [[ "$peers" -ge "$NODES" ]] && break
            [[ $SECONDS -lt $deadline ]] || die "node $i sees $peers of $NODES peers after ${START_TIMEOUT}s"
            sleep 0.5
        done
    done
}

start() {
    mkdir -p "$DATA_DIR"
    exec 9>"$DATA_DIR/.lock"
    flock 9
    if [[ -s "$NODES_FILE" && "$(cat "$NODES_FILE")" != "$NODES" ]] && ls "$DATA_DIR"/node-*/storage >/dev/null 2>&1; then
        die "$DATA_DIR holds a $(cat "$NODES_FILE")-node deployment: stop it and remove the folder, or use another MEMSTREAM_QDRANT_DATA"
    fi
    echo "$NODES" >"$NODES_FILE"
    find_binary >/dev/null
    local i
    start_node 1
    wait_node 1  # the others bootstrap from it
    for ((i = 2; i <= NODES; i++)); do start_node "$i"; done
    for ((i = 2; i <= NODES; i++)); do wait_node "$i"; done
    wait_peers
    log "ready: $NODES node(s) at $(urls)"
}

stop_node() {
    local i="$1" signal="${2:-TERM}" pid
    if ! pid="$(node_pid "$i")"; then
        rm -f "$(node_dir "$i")/qdrant.pid"
        return 0
    fi
    kill "-$signal" "$pid" 2>/dev/null || true
    pid_wait_exit "$pid" 100 0.1 || kill -KILL "$pid" 2>/dev/null || true
    rm -f "$(node_dir "$i")/qdrant.pid"
    log "node $i stopped (SIG$signal, pid $pid)"
}

stop() {
    mkdir -p "$DATA_DIR"
    exec 9>"$DATA_DIR/.lock"
    flock 9
    # Every node at once: each takes ~2 s to close its storage and consensus, and none waits on another.
    local i stopping=()
    for ((i = NODES; i >= 1; i--)); do
        stop_node "$i" &
        stopping+=($!)
    done
    wait "${stopping[@]}"
}

urls() {
    local i out=()
    for ((i = 1; i <= NODES; i++)); do out+=("$(url_of "$i")"); done
    (IFS=,; echo "${out[*]}")
}

status() {
    local i pid down=0
    for ((i = 1; i <= NODES; i++)); do
        if pid="$(node_pid "$i")"; then
            echo "node $i: running (pid $pid, $(url_of "$i"), storage $(node_dir "$i")/storage)"
        else
            echo "node $i: not running"
            down=1
        fi
    done
    [[ $down -eq 0 ]] || return 3
}

case "$VERB" in
    start) start ;;
    stop) stop ;;
    restart) "$0" stop --nodes "$NODES" && "$0" start --nodes "$NODES" ;;
    status) status ;;
    urls) urls ;;
    logs) check_node "${NODE_ARG:-1}"; tail -n 100 "$(node_dir "${NODE_ARG:-1}")/qdrant.log" ;;
    node-pid) check_node "$NODE_ARG"; node_pid "$NODE_ARG" || { log "node $NODE_ARG is not running"; exit 3; } ;;
    kill-node) check_node "$NODE_ARG"; stop_node "$NODE_ARG" KILL ;;
    stop-node) check_node "$NODE_ARG"; stop_node "$NODE_ARG" TERM ;;
    start-node) check_node "$NODE_ARG"; start_node "$NODE_ARG"; wait_node "$NODE_ARG" ;;
    *) echo "usage: $0 {start|stop|restart|status|urls|logs I|kill-node I|stop-node I|start-node I|node-pid I} [--nodes N]" >&2; exit 2 ;;
esac
