"""Development clusters for the benches and the tests: N Kafka brokers or N Qdrant nodes on loopback,
started by the infra/ scripts (``kafka.sh --brokers N``, ``qdrant.sh --nodes N``) in a data folder
and from a base port of their own, and the free ports to put them on."""

from __future__ import annotations

import os
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping, Sequence

from memstream.streams.runtime import processes


def inherited_env(service: str) -> dict[str, str]:
    """This process's environment without ``MEMSTREAM_<SERVICE>_*`` (a user's broker or store settings
    are not a harness cluster's), but with MEMSTREAM_KAFKA_JIT: how the JVM compiles is the
    machine's choice, not a broker's setting."""
    prefix = f"MEMSTREAM_{service}_"
    return {k: v for k, v in os.environ.items() if not k.startswith(prefix) or k == "MEMSTREAM_KAFKA_JIT"}


@dataclass(frozen=True)
class LocalCluster:
    """N nodes on loopback started by ``infra/kafka/kafka.sh --brokers N`` or ``infra/qdrant/qdrant.sh
    --nodes N``, in a data folder and from a base port of their own: the benches' clusters (the tests
    use the same scripts). Node numbers run from 1."""

    kind: Literal["kafka", "qdrant"]
    data: Path
    base_port: int
    size: int = 3
    extra_env: Mapping[str, str] = field(default_factory=dict)  # e.g. the port a proxied broker advertises
    # How long a start waits for its nodes: a broker killed under load catches up on every partition
    # before it is ready, which on a busy 2-core machine can take minutes (the scripts' default is 90 s).
    start_timeout_s: int = 300

    @property
    def env(self) -> dict[str, str]:
        """The environment without the service's own MEMSTREAM_ variables (a user's broker or store
        settings are not this cluster's: ``inherited_env``), plus its data folder and base port."""
        name = self.kind.upper()
        inherited = inherited_env(name)
        own = {
            f"MEMSTREAM_{name}_DATA": str(self.data),
            f"MEMSTREAM_{name}_PORT": str(self.base_port),
            f"MEMSTREAM_{name}_TIMEOUT": str(self.start_timeout_s),
        }
        return inherited | own | dict(self.extra_env)

    def run(self, *args: str, check: bool = True) -> str:
        size_option = "--brokers" if self.kind == "kafka" else "--nodes"
        script = processes.INFRA / self.kind / f"{self.kind}.sh"
        done = subprocess.run(
            ["bash", str(script), size_option, str(self.size), *args], env=self.env, capture_output=True, text=True
        )
        if check and done.returncode != 0:
            # the script's own lines (what failed, after how long), then the tail of the node's log it printed
            own = "\n".join(line for line in done.stderr.splitlines() if line.startswith(f"{script.name}:"))
            raise RuntimeError(
                f"{script.name} {' '.join(args)} failed ({done.returncode}):\n{own[-1500:]}\n{done.stderr[-3000:]}"
            )
        return done.stdout.strip()

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

    @property
    def address(self) -> str:
        """The Kafka bootstrap string, or MEMSTREAM_QDRANT_URL (every node): broker I on client port
        base + 2 (I - 1), its controller one above (kafka.sh); Qdrant node I on HTTP port base + 10 (I - 1),
        gRPC and p2p one and two above (qdrant.sh)."""
        if self.kind == "kafka":
            return ",".join(f"127.0.0.1:{self.base_port + 2 * i}" for i in range(self.size))
        return ",".join(f"http://127.0.0.1:{self.base_port + 10 * i}" for i in range(self.size))

    def pids(self) -> list[int]:
        return [int(self.run("node-pid", str(i + 1))) for i in range(self.size)]

    def node_dir(self, i: int) -> Path:
        return self.data / f"node-{i + 1}"

    def data_dirs(self) -> list[Path]:
        """Kafka: each broker's log.dirs; Qdrant: each node's collections folder."""
        sub = "data" if self.kind == "kafka" else "storage/collections"
        return [self.node_dir(i) / sub for i in range(self.size)]


def stop_together(clusters: Sequence[LocalCluster]) -> None:
    """Every cluster stopped side by side (neither needs the other to stop; a 3-broker cluster takes
    ~7 s, a 3-node Qdrant cluster ~2 s); what a stop raised, raised after all of them ended."""
    with ThreadPoolExecutor(max(1, len(clusters)), "cluster-stop") as pool:
        stops = [pool.submit(cluster.stop) for cluster in clusters]
    for stopped in stops:
        stopped.result()


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
