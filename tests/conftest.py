"""Fixtures every test folder may use: Qdrant servers (tests marked ``cluster`` only); the order in
which make test's two workers take the modules."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.qdrant_servers import QdrantNodes, running

# The longest modules of make test's integration run (docs/results/ci/, 2026-12-07: 370-390 s, then
# 60-150 s each) go first, and the short ones fill in after them: taken last, one of them held a worker
# while the other had nothing left (scripts/test.sh passes --no-loadscope-reorder, which would sort by
# the number of tests instead). Those that wait on the one-thread local LLM server alternate with those
# that do not, so that the two workers do not both wait on it.
LONGEST_FIRST = (
    "tests/integration/test_bench_e2e.py",  # LLM
    "tests/integration/test_record_rebuild.py",
    "tests/integration/test_llm_in_flight.py",  # LLM
    "tests/integration/test_chaos.py",
    "tests/integration/test_consolidation.py",  # LLM
    "tests/integration/test_bulk_import.py",
    "tests/integration/test_pipeline.py",  # LLM (one test)
    "tests/bench/test_fairness.py",
    "tests/integration/test_llm_budget.py",  # LLM
    "tests/bench/test_soak_run.py",
    "tests/bench/test_erasure_bench.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules above first, in that order; every module's tests stay together and in order."""
    rank = {module: i for i, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
def qdrant_server(tmp_path_factory) -> Iterator[QdrantNodes]:
    """One Qdrant server node."""
    with running(tmp_path_factory.mktemp("qdrant-server"), 26333, 1) as server:
        yield server


@pytest.fixture(scope="session")
def qdrant_cluster(tmp_path_factory) -> Iterator[QdrantNodes]:
    """A 3-node Qdrant cluster in distributed mode (tests may kill and restart nodes; they leave all three running)."""
    with running(tmp_path_factory.mktemp("qdrant-cluster"), 27333, 3) as cluster:
        yield cluster
