#!/usr/bin/env bash
# The cluster tests (pytest -m cluster): memstream on a 3-broker Kafka cluster (and a Qdrant
# cluster). Their session fixtures start and stop what they need (tests/integration/conftest.py:
# kafka_cluster, on ports and in a data folder of their own), so this script starts nothing itself;
# `make test` leaves these tests out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/test_tools.sh
# Every broker the tests start, clusters' too, runs the C1 compiler only: small, short-lived brokers
# spend most of their CPU compiling with C2 (infra/kafka/kafka.sh, MEMSTREAM_KAFKA_JIT).
export MEMSTREAM_KAFKA_JIT="${MEMSTREAM_KAFKA_JIT:-c1}"
.venv/bin/python -m pytest tests -m cluster --durations=30 "$@"
