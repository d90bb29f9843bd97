"""Fixtures every test folder may use: Qdrant servers (tests marked ``cluster`` only); and how tests
share the machine when run side by side (``make test`` runs two pytest workers, pytest-xdist)."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.qdrant_servers import QdrantNodes, running

# Tests that use the shared local LLM server run one after the other on one worker: it answers one
# request at a time, and a test that floods it (calls in flight, provider limits) would stretch the
# waits of an LLM test beside it past their deadlines. The other tests spread over both workers.
SERIAL_GROUPS = {"local_llm": "llm", "llm_url": "llm"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, group in SERIAL_GROUPS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(group))


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
