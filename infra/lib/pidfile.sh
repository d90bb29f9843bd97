# Sourced by the service scripts of infra/: a background process known by its pid file.

# pidfile_alive FILE: print the pid in FILE when that process is alive; fail otherwise.
pidfile_alive() {
    [[ -f $1 ]] || return 1
    local pid; pid="$(cat "$1" 2>/dev/null || true)"
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

# pidfile_stop FILE [GRACE_S]: TERM the process, KILL it after GRACE_S seconds (default 10), remove
# FILE. Prints the pid it stopped; fails (FILE removed) when nothing was running.
pidfile_stop() {
    local file="$1" grace="${2:-10}" pid i
    if ! pid="$(pidfile_alive "$file")"; then rm -f "$file"; return 1; fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 4; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$file"
    echo "$pid"
}
