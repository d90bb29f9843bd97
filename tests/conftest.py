"""Fixtures every test folder may use: Qdrant servers (tests marked ``cluster`` only); the order the
modules run in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from tests.qdrant_servers import QdrantNodes, running

# Each integration module's seconds in make test (its tests' durations summed, from ``--durations=0``).
# The longest modules go first: make test's two pytest workers (--dist loadfile) then end together,
# rather than one waiting while the other runs a long module it took last. A module not listed goes
# after the listed ones, in collection order; refresh the file when modules change much.
MODULE_SECONDS: dict[str, int] = json.loads((Path(__file__).parent / "integration_seconds.json").read_text())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest modules first; a module's tests stay together, in their order."""
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], i)
    items.sort(key=lambda item: (-MODULE_SECONDS.get(m := item.nodeid.split("::")[0], 0), first[m]))


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
