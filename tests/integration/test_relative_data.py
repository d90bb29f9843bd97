"""The infra scripts started with a relative data folder, as a user or a bench with its default
``--workdir`` (.data/bench/...) gives them: the folder is the caller's, even where the script cds
into a node's folder before starting it. qdrant.sh used to write its log to the relative path from
inside the node folder and fail at once ("No such file or directory")."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from memstream.bench import clusters
from memstream.streams import runtime

pytestmark = pytest.mark.integration


def script(name: str, cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    path = runtime.INFRA / name
    return subprocess.run(
        ["bash", str(path), *args], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=180
    )


def test_kafka_keeps_a_relative_data_folder_under_the_callers_folder(tmp_path: Path):
    port = clusters.free_base_port(24092, [0, 1], step=10)
    env = {"MEMSTREAM_KAFKA_DATA": "rel/kafka", "MEMSTREAM_KAFKA_PORT": str(port)}
    started = script("kafka/kafka.sh", tmp_path, env, "start")
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        assert (tmp_path / "rel" / "kafka" / "kafka.pid").exists()
        assert script("kafka/kafka.sh", tmp_path, env, "status").returncode == 0
    finally:
        stopped = script("kafka/kafka.sh", tmp_path, env, "stop")
    assert stopped.returncode == 0 and not (tmp_path / "rel" / "kafka" / "kafka.pid").exists()


@pytest.mark.cluster  # a Qdrant server binary (make test-cluster)
@pytest.mark.parametrize("nodes", [1, 3])
def test_qdrant_nodes_start_in_a_relative_data_folder(tmp_path: Path, nodes: int):
    port = clusters.free_base_port(27333, [10 * i + j for i in range(nodes) for j in range(3)])
    env = {"MEMSTREAM_QDRANT_DATA": "rel/qdrant", "MEMSTREAM_QDRANT_PORT": str(port)}
    started = script("qdrant/qdrant.sh", tmp_path, env, "start", "--nodes", str(nodes))
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        for i in range(1, nodes + 1):
            assert (tmp_path / "rel" / "qdrant" / f"node-{i}" / "qdrant.log").stat().st_size > 0
    finally:
        stopped = script("qdrant/qdrant.sh", tmp_path, env, "stop")
    assert stopped.returncode == 0, stopped.stderr[-2000:]
