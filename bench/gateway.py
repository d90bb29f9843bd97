"""``memstream bench gateway``: requests per second and latency of the HTTP gateway's two hot routes,
``POST /v1/turns`` and ``POST /v1/ask``, on this machine: one gateway process, one worker (extractive)
and the broker, with concurrent clients. Turns are posted while the worker ingests them (as in use);
questions are asked once the pipeline has drained (evidence only: no LLM answer in the figure)."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from memstream.bench.deployment import Deployment
from memstream.bench.plots import pyplot, save_figure
from memstream.bench.report import source_commit
from memstream.bench.scoring import percentile
from memstream.config import Settings
from memstream.datasets import demo_conversation_path, load_locomo
from memstream.streams import runtime

TENANT = "bench"
KEY = "bench-gateway-key"


@dataclass
class GatewayBenchOptions:
    requests: int = 400  # per route
    concurrency: int = 8  # requests in flight
    batch: int = 1  # turns per /v1/turns request (1: a webhook's message)
    conversations: int = 20
    workdir: Path = Path(".data/bench/gateway")


@dataclass
class RouteFigures:
    requests: int
    failed: int
    seconds: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    latencies_ms: list[float]


def turn_bodies(options: GatewayBenchOptions) -> list[dict[str, Any]]:
    """Request bodies of ``batch`` turns each: the packaged conversation's lines, spread over
    ``conversations`` conversations with unique turn ids (every request is new work)."""
    sample = load_locomo(demo_conversation_path())[0]
    lines = [(t["speaker"], t["text"]) for _, _, turns in sample.sessions for t in turns]
    bodies = []
    for r in range(options.requests):
        turns = []
        for b in range(options.batch):
            i = r * options.batch + b
            speaker, text = lines[i % len(lines)]
            turns.append(
                {
                    "conversation_id": f"c{i % options.conversations}",
                    "session_id": f"S{1 + i // 200}",
                    "turn_id": f"T{i}",
                    "speaker": speaker,
                    "text": text,
                    "event_time": f"2024-05-01T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z",
                }
            )
        bodies.append({"turns": turns})
    return bodies


def ask_bodies(options: GatewayBenchOptions) -> list[dict[str, Any]]:
    sample = load_locomo(demo_conversation_path())[0]
    questions = [qa.question for qa in sample.qa]
    return [
        {"conversation_id": f"c{r % options.conversations}", "question": questions[r % len(questions)], "answer": False}
        for r in range(options.requests)
    ]


async def load(
    url: str, route: str, bodies: list[dict[str, Any]], concurrency: int, on_done: Callable[[], None]
) -> RouteFigures:
    """POST every body to ``route`` with ``concurrency`` requests in flight."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    latencies: list[float] = []
    failed = 0

    async def client() -> None:
        nonlocal failed
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as http:
            while not queue.empty():
                body = queue.get_nowait()
                t0 = time.perf_counter()
                response = await http.post(route, json=body)
                latencies.append((time.perf_counter() - t0) * 1000)
                failed += response.status_code >= 300
                on_done()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    return RouteFigures(
        requests=len(bodies),
        failed=failed,
        seconds=round(seconds, 2),
        requests_per_s=round(len(bodies) / seconds, 1),
        p50_ms=round(percentile(latencies, 50), 1),
        p99_ms=round(percentile(latencies, 99), 1),
        latencies_ms=[round(x, 2) for x in latencies],
    )


def run_gateway_bench(
    options: GatewayBenchOptions,
    *,
    status: Callable[[str], None] = lambda s: None,
    on_request: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    base = Settings()
    with runtime.KAFKA.session(base):
        dep = Deployment(base, options.workdir / "deployment", {"MEMSTREAM_EXTRACT_MODE": "extractive"})
        try:
            status("starting a worker and a gateway")
            dep.start_worker("gateway-bench")
            gateway = dep.start_gateway({TENANT: KEY})
            status(f"POST /v1/turns ×{options.requests} ({options.batch} turn(s) each)")
            turns = asyncio.run(load(gateway.url, "/v1/turns", turn_bodies(options), options.concurrency, on_request))
            status("waiting for the worker to store them")
            t0 = time.perf_counter()
            dep.drain(timeout_s=1800)
            drain_s = time.perf_counter() - t0
            status(f"POST /v1/ask ×{options.requests}")
            ask = asyncio.run(load(gateway.url, "/v1/ask", ask_bodies(options), options.concurrency, on_request))
        finally:
            dep.stop_workers()
    return {
        "bench": "gateway",
        "commit": source_commit(),
        "machine": {"cpus": os.cpu_count()},
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
        "turns": {**asdict(turns), "turns_per_s": round(turns.requests * options.batch / turns.seconds, 1)},
        "drain_after_turns_s": round(drain_s, 1),
        "ask": asdict(ask),
    }


def plot_latencies(result: dict[str, Any], out: Path) -> None:
    """Latency CDF of both routes (PNG)."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    for route, label in (("turns", "POST /v1/turns"), ("ask", "POST /v1/ask (evidence only)")):
        values = sorted(result[route]["latencies_ms"])
        ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=label)
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log)")
    ax.set_ylabel("share of requests")
    options = result["options"]
    ax.set_title(f"memstream gateway: {options['concurrency']} in flight, {result['machine']['cpus']} CPUs")
    ax.grid(True, alpha=0.3)
    ax.legend()
    save_figure(plt, fig, out)
