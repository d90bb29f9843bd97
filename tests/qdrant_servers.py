"""Qdrant servers for the tests: one node or a 3-node cluster, started by ``infra/qdrant/qdrant.sh``
in a temporary folder on ports of their own (the binary: MEMSTREAM_QDRANT_BIN, else
../shared/bin/qdrant beside the checkout, else qdrant on PATH). Only tests marked ``cluster`` use them
(``make test-cluster``): ``make test`` needs no Qdrant binary."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from memstream.bench import clusters
from memstream.streams import runtime

TESTED_VERSION = "1.18.3"  # the server the cluster tests run (../shared/bin/qdrant); compose's image too


@dataclass
class QdrantNodes:
    """A running Qdrant deployment: ``run`` any of the script's verbs on it (``kill-node 2``,
    ``start-node 2``, ``status``)."""

    data: Path
    base_port: int
    nodes: int = 1

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("MEMSTREAM_QDRANT_DATA", "MEMSTREAM_QDRANT_PORT")}
        return env | {"MEMSTREAM_QDRANT_DATA": str(self.data), "MEMSTREAM_QDRANT_PORT": str(self.base_port)}

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.base_port + 10 * i}" for i in range(self.nodes)]

    @property
    def url(self) -> str:
        """MEMSTREAM_QDRANT_URL: every node, so a client fails over when one is lost."""
        return ",".join(self.urls)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        script = runtime.INFRA / "qdrant" / "qdrant.sh"
        done = subprocess.run(
            ["bash", str(script), *args, "--nodes", str(self.nodes)], env=self.env, capture_output=True, text=True
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"qdrant.sh {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done

    def kill(self, node: int) -> None:
        self.run("kill-node", str(node))

    def start(self, node: int) -> None:
        self.run("start-node", str(node))


def started(data: Path, first_port: int, nodes: int) -> QdrantNodes:
    deployment = QdrantNodes(
        data, clusters.free_base_port(first_port, [10 * i + j for i in range(nodes) for j in range(3)]), nodes
    )
    deployment.run("start")
    return deployment
