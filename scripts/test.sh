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

# The cluster tests start a 3-broker cluster of their own: `make test-cluster` runs them. (Their temp
# folders stay on disk: wheels, virtual environments and stores fill a memory-backed /dev/shm, and a
# full tmpfs ends the run with a bus error.)
# Two pytest workers (pytest-xdist): much of an integration test's time is waits (workers starting,
# group joins, drains, the one-thread LLM server), which the other worker fills. A module runs on one
# worker, in order (--dist loadfile): its tests share module fixtures and may build on what an earlier
# one stored. Each test has its own topic prefix and data folder, and the tests that stop or restart a
# broker have one of their own (tests/integration/conftest.py: own_broker). (xdist_group cannot pin
# the LLM tests to one worker: pytest 9.2's node ids ignore the group suffix xdist gives them.)
.venv/bin/python -m pytest tests -m "not cluster" -n 2 --dist loadfile --durations=30 "$@"
