"""Horizontal scaling of the CPU-bound stages: ingest throughput of the same turns through 1 and
through 2 worker processes of the stage group compress, segment, stm, extract. These stages keep no
store, so the workers share one consumer group's partitions freely.

Each run is a fresh deployment on the same broker. Its workers are started and ready (models
loaded, partitions assigned) before the turns are produced. The clock runs from the first turn
produced until the group has committed everything it reads. Each LoCoMo session is streamed as
its own conversation, so the work spreads over the partitions."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from memstream.config import Settings
from memstream.datasets import load_locomo, locomo_turns
from memstream.schemas import Turn
from memstream.schemas.topics import FRONT_TOPICS
from memstream.streams import runtime
from memstream.streams.deployment import Deployment

TENANT = "bench"
SCALE_STAGES = "compress,segment,stm,extract"


@dataclass
class ScaleOptions:
    data: Path
    max_turns: int = 1200
    workers: Sequence[int] = (1, 2)
    torch_threads: int = 1  # one core per worker process: the comparison is processes, not threads
    workdir: Path = Path(".data/bench/scale")
    env: dict[str, str] = field(default_factory=dict)


def load_turns(options: ScaleOptions) -> list[Turn]:
    """The first ``max_turns`` turns, each LoCoMo session its own conversation (sessions stay whole)."""
    turns: list[Turn] = []
    for sample in load_locomo(options.data):
        for turn in locomo_turns(sample, tenant_id=TENANT):
            if len(turns) >= options.max_turns and turn.session_id != turns[-1].session_id:
                return turns
            turns.append(turn.model_copy(update={"conversation_id": f"{sample.sample_id}-{turn.session_id}"}))
    return turns


def run_scale_bench(
    options: ScaleOptions,
    *,
    status: Callable[[str], None] = lambda s: None,
    on_lag: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, Any]:
    base = Settings()
    turns = load_turns(options)
    env = {
        "MEMSTREAM_STAGES": SCALE_STAGES,
        "MEMSTREAM_TORCH_THREADS": str(options.torch_threads),
        "MEMSTREAM_COMPRESSOR_MODEL": "",
        "MEMSTREAM_LLM_BASE_URL": "",
        **options.env,
    }
    runs: dict[int, dict[str, Any]] = {}
    with contextlib.ExitStack() as running:
        status("starting Kafka")
        running.enter_context(runtime.KAFKA.session(base))
        for n in options.workers:
            deployment = Deployment(base, options.workdir / f"{time.strftime('%Y%m%d-%H%M%S')}-{n}w", env)
            running.callback(deployment.stop_workers)
            for i in range(n):
                status(f"{n} worker(s): starting worker {i + 1}")
                deployment.start_worker(f"worker-{i + 1}")
            status(f"{n} worker(s): ingesting {len(turns)} turns")
            produced = 0

            def progress(lag: dict[str, int]) -> None:
                on_lag(max(0, produced - lag.get(deployment.settings.topic("turns"), 0)), len(turns))

            started = time.monotonic()
            produced = deployment.produce(turns)
            finished = deployment.drain(timeout_s=3600, topics=FRONT_TOPICS, progress=progress)
            seconds = finished - started
            runs[n] = {
                "workers": n,
                "seconds": round(seconds, 2),
                "turns_per_s": round(len(turns) / seconds, 2),
                "flushes": deployment.message_count("stm.flush"),
                "segments": deployment.message_count("segments"),
            }
            deployment.stop_workers()
    one, two = runs.get(1), runs.get(2)
    result: dict[str, Any] = {
        "stages": SCALE_STAGES.split(","),
        "turns": len(turns),
        "conversations": len({t.conversation_id for t in turns}),
        "partitions": base.topic_partitions,
        "torch_threads_per_worker": options.torch_threads,
        "runs": list(runs.values()),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
    }
    if one and two:
        result |= {
            "turns_per_s_1": one["turns_per_s"],
            "turns_per_s_2": two["turns_per_s"],
            "speedup": round(two["turns_per_s"] / one["turns_per_s"], 2),
        }
    return result
