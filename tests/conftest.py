"""Fixtures every test folder may use: Qdrant servers (tests marked ``cluster`` only); the order the
modules run in."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
from xdist.scheduler import LoadFileScheduling

from tests.qdrant_servers import QdrantNodes, running

ROOT = Path(__file__).parent.parent
# Each integration module's seconds in make test (its tests' durations summed, from ``--durations=0``);
# a module not listed counts as 0. Refresh the file when modules change much.
MODULE_SECONDS: dict[str, int] = json.loads((Path(__file__).parent / "integration_seconds.json").read_text())
LLM_LANE = "llm-lane"
CALLS_THE_LLM_SERVER = re.compile(r"\b(local_llm|LOCAL_LLM)\b")  # its fixture, or the server's session


@functools.cache
def in_llm_lane(module: str) -> bool:
    """A test module that calls the local LLM server. The server answers one call at a time, so two
    such modules side by side only wait on each other: make test runs them one after another."""
    path = ROOT / module
    return path.suffix == ".py" and path.exists() and bool(CALLS_THE_LLM_SERVER.search(path.read_text()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The LLM lane's modules first, then the other modules longest first: make test's two pytest
    workers then end together. A module's tests stay together, in their order."""

    def rank(module: str) -> tuple[bool, int]:
        return (not in_llm_lane(module), -MODULE_SECONDS.get(module, 0))

    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], i)
    items.sort(key=lambda item: (*rank(m := item.nodeid.split("::")[0]), first[m]))


class LlmLaneScheduling(LoadFileScheduling):
    """``--dist loadfile`` with every LLM-lane module in one unit of work: one pytest worker runs them
    in turn while the other runs the rest (then both share what is left)."""

    def _split_scope(self, nodeid: str) -> str:
        module = super()._split_scope(nodeid)
        return LLM_LANE if in_llm_lane(module) else module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    return LlmLaneScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


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
