"""Fixtures every test folder may use: Qdrant servers (tests marked ``cluster`` only)."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.qdrant_servers import QdrantNodes, started


@pytest.fixture(scope="session")
def qdrant_server(tmp_path_factory) -> Iterator[QdrantNodes]:
    """One Qdrant server node."""
    server = started(tmp_path_factory.mktemp("qdrant-server"), 26333, 1)
    try:
        yield server
    finally:
        server.run("stop", check=False)


@pytest.fixture(scope="session")
def qdrant_cluster(tmp_path_factory) -> Iterator[QdrantNodes]:
    """A 3-node Qdrant cluster in distributed mode (tests may kill and restart nodes; they leave all three running)."""
    cluster = started(tmp_path_factory.mktemp("qdrant-cluster"), 27333, 3)
    try:
        yield cluster
    finally:
        cluster.run("stop", check=False)
