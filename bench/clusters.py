"""Development clusters for the benches and the tests: N Kafka brokers or N Qdrant nodes on loopback,
started by the infra/ scripts (``kafka.sh --brokers N``, ``qdrant.sh --nodes N``) in a data folder
and from a base port of their own, and the free ports to put them on."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from memstream.streams.runtime import processes


@dataclass(frozen=True)
class LocalCluster:
    """N nodes on loopback started by an infra/ script that takes a size option (``kafka.sh --brokers
    N``, ``qdrant.sh --nodes N``), in a data folder and from a base port of its own: the benches'
    clusters (the tests use the same scripts). Node numbers run from 1."""

    script: str
    size_option: str
    size: int
    env: Mapping[str, str]  # the script's data folder and base port variables

    def run(self, *args: str) -> str:
        result = processes.run_script(self.script, self.size_option, str(self.size), *args, env=dict(self.env))
        if result.returncode != 0:
            raise RuntimeError(f"{self.script} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr[-3000:]}")
        return result.stdout.strip()

    def start(self) -> None:
        self.run("start")

    def stop(self) -> None:
        self.run("stop")

    def kill(self, node: int) -> None:
        """kill -9 of node ``node``'s process."""
        self.run("kill-node", str(node))

    def start_node(self, node: int) -> None:
        """Node ``node`` again, on its own storage; returns once it answers."""
        self.run("start-node", str(node))


def free_base_port(first: int, offsets: Sequence[int], step: int = 100) -> int:
    """The first base port from ``first`` (by ``step``) whose ``base + offset`` ports are all free on 127.0.0.1."""
    for base in range(first, 60000, step):
        socks: list[socket.socket] = []
        try:
            for offset in offsets:
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no free ports from {first}")


def kafka_cluster(data: Path, base_port: int, brokers: int = 3) -> LocalCluster:
    """Broker I (1..N) on client port base + 2 (I - 1), its controller one above (kafka.sh)."""
    return LocalCluster(
        "kafka/kafka.sh",
        "--brokers",
        brokers,
        {"MEMSTREAM_KAFKA_DATA": str(data), "MEMSTREAM_KAFKA_PORT": str(base_port)},
    )


def qdrant_cluster(data: Path, base_port: int, nodes: int = 3) -> LocalCluster:
    """Node I (1..N) on HTTP port base + 10 (I - 1), gRPC and p2p one and two above (qdrant.sh)."""
    return LocalCluster(
        "qdrant/qdrant.sh",
        "--nodes",
        nodes,
        {"MEMSTREAM_QDRANT_DATA": str(data), "MEMSTREAM_QDRANT_PORT": str(base_port)},
    )
