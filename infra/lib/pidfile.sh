# Sourced by the service scripts of infra/: a background process known by its pid file.

# pidfile_alive FILE: print the pid in FILE when that process is alive; fail otherwise.
pidfile_alive() {
    [[ -f $1 ]] || return 1
    local pid; pid="$(cat "$1" 2>/dev/null || true)"
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

# pidfile_alive_as FILE PATTERN: pidfile_alive, and the process's command line matches PATTERN (grep):
# the service's own process, not another one that was given the pid since.
pidfile_alive_as() {
    local pid; pid="$(pidfile_alive "$1")" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2" || return 1
    echo "$pid"
}

# pid_wait_exit PID TRIES PAUSE: wait until PID has exited, looking TRIES times PAUSE seconds apart;
# fails when it still runs.
pid_wait_exit() {
    local i
    for ((i = 0; i < $2; i++)); do kill -0 "$1" 2>/dev/null || break; sleep "$3"; done
    ! kill -0 "$1" 2>/dev/null
}

# pidfile_stop FILE [GRACE_S]: TERM the process, KILL it after GRACE_S seconds (default 10), remove
# FILE. Prints the pid it stopped; fails (FILE removed) when nothing was running.
pidfile_stop() {
    local file="$1" grace="${2:-10}" pid
    if ! pid="$(pidfile_alive "$file")"; then rm -f "$file"; return 1; fi
    kill -TERM "$pid" 2>/dev/null || true
    pid_wait_exit "$pid" $((grace * 4)) 0.25 || true
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$file"
    echo "$pid"
}

# pidfile_wait_ready FILE TRIES PAUSE PROBE...: after a start, run PROBE until it succeeds, at most
# TRIES times PAUSE seconds apart, while the process in FILE lives. Returns 0 once it succeeded, 1
# when the process exited first, 2 when the tries ran out.
pidfile_wait_ready() {
    local file="$1" tries="$2" pause="$3" i
    shift 3
    for ((i = 0; i < tries; i++)); do
        "$@" && return 0
        kill -0 "$(cat "$file")" 2>/dev/null || return 1
        sleep "$pause"
    done
    return 2
}

# pidfile_wait_answering FILE LOG TIMEOUT_S PAUSE EXITED STOP PROBE...: after a start, run PROBE every
# PAUSE seconds, for at most TIMEOUT_S, until it succeeds (what it prints goes to stdout). When the
# process in FILE exits first: FILE removed, the end of LOG shown, die "EXITED (log: LOG)". When the
# time runs out: the end of LOG shown, STOP run, die. Uses the script's die.
pidfile_wait_answering() {
    local file="$1" log_file="$2" timeout="$3" pause="$4" exited="$5" stop="$6" pid
    shift 6
    pid="$(cat "$file")"
    local deadline=$((SECONDS + timeout))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$file"
            tail -n 30 "$log_file" >&2 || true
            die "$exited (log: $log_file)"
        fi
        "$@" && return 0
        sleep "$pause"
    done
    tail -n 30 "$log_file" >&2 || true
    "$stop" || true
    die "not ready after ${timeout}s (log: $log_file)"
}
