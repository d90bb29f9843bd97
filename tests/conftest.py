"""Fixtures every test folder may use: Qdrant servers (tests marked ``cluster`` only)."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.qdrant_servers import QdrantNodes, running


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
