"""The benches' running system: the broker (and the local LLM server) and one all-stages worker."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Callable, Iterator, Mapping
from urllib.request import urlopen

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from memstream.bench.deployment import Deployment
from memstream.config import Settings
from memstream.streams import runtime


def worker_samples(port: int | str) -> Iterator[Sample]:
    """Every sample on a worker's Prometheus endpoint."""
    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        yield from family.samples


def llm_costs(port: int | str) -> tuple[dict[str, dict[str, int]], dict[str, float]]:
    """The worker's LLM cost per stage as the endpoint saw it, and its other counters (summed over
    labels). ``calls`` counts every request sent: answered ones (repairs included) and failed attempts
    (each retry is one), also the calls a redelivered message made again; ``failed_calls`` the latter;
    ``cached_prompt_tokens`` the prompt tokens the provider reported read from its prompt cache.
    ``bench ingest``, ``bench locomo`` and ``bench longmemeval`` count calls this way."""
    stages: dict[str, dict[str, int]] = {}
    other: dict[str, float] = {}

    def cost(stage: str) -> dict[str, int]:
        zero = {"calls": 0, "failed_calls": 0, "prompt_tokens": 0, "cached_prompt_tokens": 0, "completion_tokens": 0}
        return stages.setdefault(stage, zero)

    for s in worker_samples(port):
        if s.name == "memstream_llm_calls_total":
            cost(s.labels["stage"])["calls"] += int(s.value)
        elif s.name == "memstream_llm_errors_total":
            cost(s.labels["stage"])["calls"] += int(s.value)
            cost(s.labels["stage"])["failed_calls"] += int(s.value)
        elif s.name == "memstream_llm_tokens_total":
            cost(s.labels["stage"])[f"{s.labels['kind']}_tokens"] += int(s.value)
        elif s.name.endswith("_total"):
            key = s.name + "".join(f"|{v}" for _, v in sorted(s.labels.items()))
            other[key] = other.get(key, 0.0) + s.value
    return stages, other


def deploy_worker(
    running: contextlib.ExitStack,
    base: Settings,
    workdir: Path,
    env: Mapping[str, str],
    *,
    llm: bool = False,
    status: Callable[[str], None] = lambda s: None,
    reopen: Path | None = None,
    before_start: Callable[[Deployment], None] = lambda d: None,
) -> Deployment:
    """Start what is not running yet and a worker in a fresh, isolated deployment under ``workdir``
    (or in the earlier deployment folder ``reopen``; ``before_start`` may touch its store first).
    Everything is stopped, in reverse, when ``running`` unwinds (only what this call started)."""
    status("starting Kafka")
    running.enter_context(runtime.KAFKA.session(base))
    env = dict(env)
    if llm:
        status("starting the local LLM server")
        running.enter_context(runtime.LOCAL_LLM.session(base))
        env |= runtime.local_llm_env(base)
    if reopen is not None:
        deployment = Deployment.reopen(base, reopen, env)
    else:
        deployment = Deployment(base, workdir / time.strftime("%Y%m%d-%H%M%S"), env)
    running.callback(deployment.stop_workers)
    before_start(deployment)
    status("starting a worker (all stages)")
    deployment.start_worker("bench")
    return deployment
