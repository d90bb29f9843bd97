#!/usr/bin/env bash
# memstream: the replay server (benchmark harness) in the background: an OpenAI-compatible server
# that records the local LLM's real answers and replays them with synthetic provider latency and
# limits (infra/llm/replay_server.py; see infra/llm/README.md, "Replay server (benchmarks)").
# Usage: infra/llm/replay_server.sh {start|stop|status}
#   start   start it (no-op if up), wait until GET /v1/models answers, print its base URL on stdout
#   stop    SIGTERM it (SIGKILL after 10 s)
#   status  print its base URL and exit 0 if up, exit 3 otherwise
#
# Environment (all optional):
#   MEMSTREAM_PYTHON               python with memstream's dependencies (<repo>/.venv/bin/python)
#   MEMSTREAM_DATA_DIR             pid + log go to $MEMSTREAM_DATA_DIR/llm-replay/ (<repo>/.data); a
#                                  relative path is read against the directory the script is run from
#   MEMSTREAM_REPLAY_PORT          port on 127.0.0.1 (8012)
#   MEMSTREAM_REPLAY_ARGS          the server's arguments, split on whitespace; relative paths in them are
#                                  read against the directory the script is run from. Default: record in
#                                  front of the local LLM server into $MEMSTREAM_DATA_DIR/llm-replay/recordings.jsonl:
#                                  record --upstream http://127.0.0.1:${MEMSTREAM_LLM_PORT:-8011}/v1 --recordings ...
#                                  e.g. "replay --recordings rec.jsonl --latency-p50 0.8 --latency-p99 6 --rpm 500"
#   MEMSTREAM_REPLAY_START_TIMEOUT seconds to wait for readiness (30)
set -euo pipefail

# shellcheck source=../lib/service.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/service.sh" replay_server

PY="${MEMSTREAM_PYTHON:-$REPO_ROOT/.venv/bin/python}"
# Absolute before anything changes directory: the pid file must be the same one from any directory.
DATA_DIR="$(absolute "${MEMSTREAM_DATA_DIR:-$REPO_ROOT/.data}")"
HOST="127.0.0.1"
PORT="${MEMSTREAM_REPLAY_PORT:-8012}"
START_TIMEOUT="${MEMSTREAM_REPLAY_START_TIMEOUT:-30}"
RUN_DIR="$DATA_DIR/llm-replay"
PID_FILE="$RUN_DIR/replay_server.pid"
LOG_FILE="$RUN_DIR/replay_server.log"
BASE_URL="http://$HOST:$PORT/v1"
DEFAULT_ARGS="record --upstream http://127.0.0.1:${MEMSTREAM_LLM_PORT:-8011}/v1 --recordings $RUN_DIR/recordings.jsonl"


# The pid from the pid file when that process is alive and is the replay server (not a reused pid).
running_pid() { pidfile_alive_as "$PID_FILE" replay_server; }

answers() {
    "$PY" - "$BASE_URL/models" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

start() {
    [[ -x $PY ]] || die "python not found: $PY (set MEMSTREAM_PYTHON)"
    local pid
    if pid="$(running_pid)"; then log "already running (pid $pid) at $BASE_URL"; echo "$BASE_URL"; return 0; fi
    rm -f "$PID_FILE"
    answers && die "port $PORT already serves something not started by this script; set MEMSTREAM_REPLAY_PORT"
    mkdir -p "$RUN_DIR"
    local -a args
    read -r -a args <<<"${MEMSTREAM_REPLAY_ARGS:-$DEFAULT_ARGS}"
    log "starting on $BASE_URL (${args[*]}), log $LOG_FILE"
    # By file path, from the caller's directory: relative paths in the arguments stay the caller's,
    # and nothing depends on how memstream is installed. setsid: its own session, so the caller's
    # Ctrl-C does not reach it; it execs in place (the subshell is no group leader), so $! is its pid.
    (exec setsid "$PY" "$SCRIPT_DIR/replay_server.py" "${args[@]}" --host "$HOST" --port "$PORT" \
        >>"$LOG_FILE" 2>&1 </dev/null) &
    pid=$!
    echo "$pid" >"$PID_FILE"
    pidfile_wait_answering "$PID_FILE" "$LOG_FILE" "$START_TIMEOUT" 0.2 "exited during start-up" stop answers
    log "ready (pid $pid) at $BASE_URL"
    echo "$BASE_URL"
}

stop() {
    local pid
    if running_pid >/dev/null && pid="$(pidfile_stop "$PID_FILE" 10)"; then
        log "stopped (pid $pid)"
    else
        rm -f "$PID_FILE"
        log "not running"
    fi
}

status() {
    local pid
    if pid="$(running_pid)" && answers; then log "running (pid $pid) at $BASE_URL"; echo "$BASE_URL"; return 0; fi
    log "not running"
    return 3
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 {start|stop|status}" >&2; exit 2 ;;
esac
