"""Qdrant servers for the tests: one node or a 3-node cluster, started by ``infra/qdrant/qdrant.sh``
in a temporary folder on ports of their own (the binary: MEMSTREAM_QDRANT_BIN, else
../shared/bin/qdrant beside the checkout, else qdrant on PATH). Only tests marked ``cluster`` use them
(``make test-cluster``): ``make test`` needs no Qdrant binary."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from memstream.bench import clusters
from memstream.streams import runtime
from tests.node_scripts import NodeScript

TESTED_VERSION = "1.18.3"  # the server the cluster tests run (../shared/bin/qdrant); compose's image too


@dataclass
class QdrantNodes(NodeScript):
    """A running Qdrant deployment: ``run`` any of the script's verbs on it (``kill-node 2``,
    ``start-node 2``, ``status``)."""

    script = runtime.INFRA / "qdrant" / "qdrant.sh"
    nodes: int = 1

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("MEMSTREAM_QDRANT_DATA", "MEMSTREAM_QDRANT_PORT")}
        return env | {"MEMSTREAM_QDRANT_DATA": str(self.data), "MEMSTREAM_QDRANT_PORT": str(self.base_port)}

    def argv(self, args: tuple[str, ...]) -> list[str]:
        return [*args, "--nodes", str(self.nodes)]

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.base_port + 10 * i}" for i in range(self.nodes)]

    @property
    def url(self) -> str:
        """MEMSTREAM_QDRANT_URL: every node, so a client fails over when one is lost."""
        return ",".join(self.urls)


def started(data: Path, first_port: int, nodes: int) -> QdrantNodes:
    deployment = QdrantNodes(
        data, clusters.free_base_port(first_port, [10 * i + j for i in range(nodes) for j in range(3)]), nodes
    )
    deployment.run("start")
    return deployment


@contextmanager
def running(data: Path, first_port: int, nodes: int) -> Iterator[QdrantNodes]:
    """``started``, and stopped on the way out."""
    deployment = started(data, first_port, nodes)
    try:
        yield deployment
    finally:
        deployment.run("stop", check=False)
