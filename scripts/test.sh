#!/usr/bin/env bash
# The test command: install what is missing, start Kafka and the local LLM server, run every test
# (unit and integration against the real services) but the cluster ones, stop what this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/test_tools.sh
# Every broker the tests start, clusters' too, runs the C1 compiler only: small, short-lived brokers
# spend most of their CPU compiling with C2 (infra/kafka/kafka.sh, MEMSTREAM_KAFKA_JIT).
export MEMSTREAM_KAFKA_JIT="${MEMSTREAM_KAFKA_JIT:-c1}"

started=()
starting=()  # pid of each start under way
cleanup() {
    for pid in "${starting[@]}"; do wait "$pid" 2>/dev/null || true; done
    for svc in "${started[@]}"; do bash "infra/$svc" stop || true; done
}
trap cleanup EXIT
# The services start while the unit tests run (they use neither); the integration tests wait for them.
service_logs=$(mktemp -d)
for svc in kafka/kafka.sh llm/llm_server.sh; do
    if ! bash "infra/$svc" status >/dev/null 2>&1; then
        started+=("$svc")
        bash "infra/$svc" start >"$service_logs/${svc%%/*}.log" 2>&1 &
        starting+=($!)
    fi
done
services_ready() {
    local i
    for i in "${!starting[@]}"; do
        wait "${starting[$i]}" || { cat "$service_logs/${started[$i]%%/*}.log" >&2; echo "test: ${started[$i]} did not start" >&2; return 1; }
    done
    starting=()
}

# The cluster tests start a 3-broker cluster of their own: `make test-cluster` runs them. (Their temp
# folders stay on disk: wheels, virtual environments and stores fill a memory-backed /dev/shm, and a
# full tmpfs ends the run with a bus error.)
# Two pytest workers (pytest-xdist): much of an integration test's time is waits (workers starting,
# group joins, drains, the one-thread LLM server), which the other worker fills. A module runs on one
# worker, in order (--dist loadfile): its tests share module fixtures and may build on what an earlier
# one stored. Each test has its own topic prefix and data folder, and the tests that stop or restart a
# broker have one of their own (tests/integration/conftest.py: own_broker). The modules that call the
# one-thread LLM server run one after another on one worker, the rest longest first on both
# (tests/conftest.py: LlmLaneScheduling, tests/integration_seconds.json).
# The unit tests first, their temp folders on a memory-backed /dev/shm where there is one: they open
# many embedded Qdrant shards, whose creation waits on the disk (2.4 s a store on disk, 0.4 s there).
# The integration tests' temp folders stay on disk (see above).
tmp_root=/tmp
if [ -d /dev/shm ] && [ -w /dev/shm ]; then tmp_root=/dev/shm; fi
basetemp=$(mktemp -d "$tmp_root/memstream-unit.XXXXXX")
trap 'rm -rf "$basetemp" "$service_logs"; cleanup' EXIT
passed_or_none() { "$@" || { rc=$?; (( rc == 5 )) || return "$rc"; }; }  # 5: no test selected ("$@" narrowed it)
units=0
passed_or_none .venv/bin/python -m pytest tests -m "not integration and not cluster" -n 2 --durations=30 \
    --basetemp="$basetemp" "$@" || units=$?
services_ready
# The integration tests (and the workers and brokers they start) at nice 5: the services started
# above, the broker and the one-thread LLM server that every test waits on, go first.
passed_or_none nice -n 5 .venv/bin/python -m pytest tests -m "integration and not cluster" -n 2 --dist loadfile \
    --durations=30 "$@"
exit "$units"
