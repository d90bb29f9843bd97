#!/usr/bin/env bash
# The test command: install what is missing, start Kafka and the local LLM server, run every test
# (unit and integration against the real services) but the cluster ones, stop what this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/test_tools.sh

started=()
cleanup() {
    for svc in "${started[@]}"; do bash "infra/$svc" stop || true; done
}
trap cleanup EXIT
for svc in kafka/kafka.sh llm/llm_server.sh; do
    if ! bash "infra/$svc" status >/dev/null 2>&1; then
        bash "infra/$svc" start >/dev/null
        started+=("$svc")
    fi
done

# The store tests open many embedded Qdrant shards; on a memory-backed temp dir they run in half the time.
tmp_root=/tmp
if [ -d /dev/shm ] && [ -w /dev/shm ]; then tmp_root=/dev/shm; fi
basetemp=$(mktemp -d "$tmp_root/memstream-test.XXXXXX")
trap 'rm -rf "$basetemp"; cleanup' EXIT

# The cluster tests start a 3-broker cluster of their own: `make test-cluster` runs them.
.venv/bin/python -m pytest tests -m "not cluster" --durations=30 --basetemp="$basetemp" "$@"
