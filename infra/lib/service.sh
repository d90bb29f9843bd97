# Sourced first by each service script of infra/, with what the script's messages start with:
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib/service.sh" NAME
# It sets SCRIPT_DIR (the script's folder) and REPO_ROOT (the checkout's), defines log, die and
# absolute, and loads the pid-file helpers.

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[1]}")" && pwd)"
REPO_ROOT="$(cd -- "$SCRIPT_DIR/../.." && pwd)"
LOG_NAME="$1"

log() { echo "$LOG_NAME: $*" >&2; }
die() { log "error: $*"; exit 1; }

# absolute PATH: PATH made absolute, a relative one read against the caller's folder (whatever the
# script cds into later).
absolute() { if [[ $1 == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }

# shellcheck source=pidfile.sh
source "$SCRIPT_DIR/../lib/pidfile.sh"

# pidfile_stop_saying FILE: pidfile_stop (10 s before KILL), and say what it did.
pidfile_stop_saying() {
    local pid
    if pid="$(pidfile_stop "$1" 10)"; then log "stopped (pid $pid)"; else log "not running"; fi
}
