"""Fixtures every test folder may use: Qdrant servers (tests marked ``cluster`` only); and how tests
share the machine when run side by side (``make test`` runs two pytest workers, pytest-xdist)."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.qdrant_servers import QdrantNodes, running

# make test runs two pytest workers (pytest-xdist, --dist loadgroup), and each group of tests runs
# on one worker, in order: a module's tests share its module fixtures and may build on what an
# earlier test of the module stored, so a module is one group. Modules with a test that uses the
# shared local LLM server form one group together: the server answers one request at a time, and a
# test flooding it (calls in flight, provider limits) would stretch the waits of an LLM test beside
# it past their deadlines.
LLM_FIXTURES = frozenset({"local_llm", "llm_url"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    uses_llm = {module(item) for item in items if LLM_FIXTURES & set(getattr(item, "fixturenames", ()))}
    for item in items:
        item.add_marker(pytest.mark.xdist_group("llm" if module(item) in uses_llm else module(item)))


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
