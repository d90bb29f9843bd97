"""``memstream bench startup``: how long a worker takes from its process's start to the first turn it
handled, and where the seconds go. Each run starts ``memstream worker`` (its supervisor, then the
worker) in a fresh deployment on the running broker; the phases are the worker's own start-up marks
(``startup phase NAME at t=...`` in its log, streams/runtime/startup.py), the first turn is one the
bench sends once the worker is ready, handled when the worker's first stage counted it."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from memstream.bench.deploy import worker_samples
from memstream.bench.deployment import Deployment
from memstream.client import AsyncMemoryClient
from memstream.config import Settings
from memstream.schemas import Turn
from memstream.streams import runtime
from memstream.streams.runtime.processes import broker_answers
from memstream.streams.runtime.startup import phase_epochs
from memstream.streams.topics import ensure_topics
from memstream.topology import STAGES, STORE_STAGES

# A stage set's name -> MEMSTREAM_STAGES: every stage, and the ingest side of a split deployment
# (README's stage groups, infra/compose.yaml's ingest workers).
STAGE_SETS: dict[str, str] = {"all": ",".join(STAGES), "ingest": "compress,segment,stm,extract"}

# The worker's marks, in the order they come; each phase ends at its mark and starts at the mark before
# it (whichever came last: a model loads when the first stage that uses it registers).
MARK_PHASES: dict[str, str] = {
    "spawn": "supervisor",  # the supervisor's interpreter and imports, until it starts the worker
    "imports": "worker_imports",  # the worker's interpreter and imports
    "topics": "topics",  # topic and changelog declarations
    "embedder": "embedder",
    "attention": "attention",
    "compressor": "compressor",
    "store": "store",
    "app": "app",  # the stages' registration, besides the models and store above
    "assigned": "join",  # faust's start, the group join and the partitions' assignment
    "ready": "recovery",  # the tables recovered from their changelogs
    "handled": "first_turn",  # the first turn sent after ready, until the worker's first stage handled it
}
PHASES: tuple[str, ...] = (*MARK_PHASES.values(), "total")
TARGET_P50_S = 5.0


@dataclass
class StartupOptions:
    runs: int = 5
    stage_sets: tuple[str, ...] = tuple(STAGE_SETS)
    workdir: Path = Path(".data/bench/startup")
    timeout_s: float = 180.0  # a worker not ready and serving by then fails the run
    extra_env: dict[str, str] = field(default_factory=dict)


def phase_durations(t0: float, marks: dict[str, float]) -> dict[str, float]:
    """Each phase's seconds from the marks (name -> epoch) of one start, ``t0`` the supervisor's spawn:
    the phases present, in the order the marks came, each from the mark before it; ``total`` from t0
    to the last mark. A phase without a mark (no store in an ingest worker) is 0."""
    present = sorted((epoch, name) for name, epoch in marks.items() if name in MARK_PHASES)
    out = dict.fromkeys(PHASES, 0.0)
    previous = t0
    for epoch, name in present:
        out[MARK_PHASES[name]] = round(max(0.0, epoch - previous), 3)
        previous = max(previous, epoch)
    out["total"] = round(previous - t0, 3)
    return out


def summarize(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """p50 and max of each phase over the runs."""
    return {
        "p50_s": {p: round(statistics.median(r[p] for r in runs), 3) for p in PHASES},
        "max_s": {p: round(max(r[p] for r in runs), 3) for p in PHASES},
    }


def probe_turn(n: int) -> Turn:
    return Turn(
        tenant_id="startup",
        conversation_id=f"probe-{n}",
        session_id="s1",
        turn_id="t1",
        speaker="bench",
        text="A turn the worker handles first after its start.",
        event_time=datetime.now(timezone.utc),
    )


def handled_count(port: int, stage: str) -> float:
    """Messages ``stage`` finished (its latency histogram's count: observed once handled and sent on)."""
    try:
        samples = list(worker_samples(port))
    except OSError:  # the metrics endpoint is not up yet
        return 0.0
    return sum(
        s.value for s in samples if s.name == "memstream_stage_latency_seconds_count" and s.labels["stage"] == stage
    )


def first_start(settings: Settings) -> dict[str, float]:
    """Create what a deployment's first worker of these stages creates, and outlives it: the stage
    set's changelog topics and (stages that keep the vector store) the store's collections with their
    payload indexes. A restart, or a worker added by a scale-up, finds them: these seconds are the
    first start's alone, measured here and kept out of the runs."""
    from memstream.streams.services import Services

    started = time.perf_counter()
    asyncio.run(ensure_topics(settings, stages=settings.stage_list()))
    out = {"changelogs_create_s": round(time.perf_counter() - started, 3), "store_create_s": 0.0}
    if set(settings.stage_list()) & STORE_STAGES:
        started = time.perf_counter()
        services = Services(settings)
        try:
            services.store  # opening it creates the collections and their payload indexes
        finally:
            services.close()
        out["store_create_s"] = round(time.perf_counter() - started, 3)
    return out


async def _one_start(deployment: Deployment, stages: str, n: int, timeout_s: float) -> dict[str, float]:
    """Start the worker, send one turn once it is ready, and time the turn's handling."""
    first_stage = stages.split(",")[0]
    async with AsyncMemoryClient(deployment.settings) as client:  # connected before the clock starts
        t0 = time.time()
        # As Deployment.start_worker does, without its wait: this one watches the log more closely.
        worker = runtime.spawn_worker(
            deployment.env,
            deployment.settings.data_dir / "logs" / "startup.log",
            stages=stages,
            metrics_port=int(deployment.env["MEMSTREAM_METRICS_PORT"]),
        )
        deployment.workers.append(worker)  # stopped with the deployment's
        deadline = time.monotonic() + timeout_s
        while "memstream worker ready" not in worker.log_text():
            if not worker.alive():
                raise RuntimeError(f"worker exited with {worker.process.returncode}:\n{worker.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker not ready after {timeout_s:.0f}s:\n{worker.log_tail()}")
            await asyncio.sleep(0.02)
        await client.remember([probe_turn(n)])
        assert worker.metrics_port is not None
        while await asyncio.to_thread(handled_count, worker.metrics_port, first_stage) < 1:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the first turn was not handled within {timeout_s:.0f}s:\n{worker.log_tail()}")
            await asyncio.sleep(0.02)
        handled = time.time()
    marks = phase_epochs(worker.log_text()) | {"handled": handled}
    missing = [m for m in ("spawn", "imports", "topics", "app", "assigned", "ready") if m not in marks]
    if missing:
        raise RuntimeError(f"the worker's log has no start-up mark for {missing}:\n{worker.log_tail()}")
    return phase_durations(t0, marks)


def run_startup(options: StartupOptions, status: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    base = Settings()
    if not broker_answers(base):
        raise RuntimeError(f"no broker answers at {base.kafka_bootstrap}: start one (memstream up, or infra/kafka)")
    folder = options.workdir / time.strftime("%Y%m%d-%H%M%S")
    result: dict[str, Any] = {
        "what": "a `memstream worker` (supervisor and worker) from its process's start to the first turn handled, "
        "per phase (the worker's start-up marks), each in a fresh deployment on the running broker whose "
        "changelogs and store a first worker made (a restart's or a scale-up's start; first_start_extra_s: "
        "what that first worker spent creating them)",
        "runs": options.runs,
        "cores": os.cpu_count(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
        "target_p50_s": TARGET_P50_S,
        "stage_sets": {},
    }
    for name in options.stage_sets:
        stages = STAGE_SETS[name]
        runs: list[dict[str, float]] = []
        firsts: list[dict[str, float]] = []
        for n in range(options.runs):
            status(f"{name}: start {n + 1} of {options.runs}")
            deployment = Deployment(base, folder / f"{name}-{n}", {"MEMSTREAM_STAGES": stages, **options.extra_env})
            try:
                firsts.append(first_start(deployment.settings))
                runs.append(asyncio.run(_one_start(deployment, stages, n, options.timeout_s)))
            finally:
                deployment.stop_workers()
        summary = summarize(runs)
        result["stage_sets"][name] = {
            "stages": stages.split(","),
            **summary,
            "meets_target": summary["p50_s"]["total"] <= TARGET_P50_S,
            # Once per deployment, before its first worker serves (p50; not in the runs above).
            "first_start_extra_s": {k: round(statistics.median(f[k] for f in firsts), 3) for k in firsts[0]},
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2),  # a shared machine's load inflates every phase
            "runs_s": runs,
        }
    return result


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for name, r in result["stage_sets"].items():
        p50, mx = r["p50_s"], r["max_s"]
        phases = ", ".join(f"{p} {p50[p]:.2f}/{mx[p]:.2f}" for p in PHASES if mx[p] > 0 and p != "total")
        extra = ", ".join(f"{k} {v:.2f}" for k, v in r["first_start_extra_s"].items())
        total = f"total p50 {p50['total']:.2f} s, max {mx['total']:.2f} s"
        lines.append(f"{name}: {total} (p50/max per phase: {phases}); first start: {extra}")
    return lines


def plot_startup(result: dict[str, Any], out: Path) -> Path:
    """Each stage set's p50 phases stacked (one bar), its runs' totals as dots, the target as a line."""
    from memstream.bench.plots import pyplot, save_figure

    plt = pyplot()
    sets = list(result["stage_sets"])
    fig, ax = plt.subplots(figsize=(9, 1.6 + 1.1 * len(sets)))
    colors = plt.get_cmap("tab20").colors
    for i, name in enumerate(sets):
        r = result["stage_sets"][name]
        left = 0.0
        for j, phase in enumerate(p for p in PHASES if p != "total"):
            width = r["p50_s"][phase]
            if width <= 0:
                continue
            ax.barh(
                i, width, left=left, color=colors[j % len(colors)], label=phase if i == 0 or phase == "store" else None
            )
            left += width
        totals = [run["total"] for run in r["runs_s"]]
        ax.plot(totals, [i + 0.3] * len(totals), "k.", markersize=5, label="each run's total" if i == 0 else None)
    ax.axvline(result["target_p50_s"], color="red", linestyle="--", label=f"target p50 {result['target_p50_s']:.0f} s")
    ax.set_yticks(range(len(sets)), [f"{n}\n({len(result['stage_sets'][n]['stages'])} stages)" for n in sets])
    ax.set_xlabel("seconds from `memstream worker`'s start (p50 of each phase, stacked)")
    ax.set_title(f"worker start-up to the first turn handled, {result['runs']} runs each")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=6)
    return save_figure(plt, fig, out)
