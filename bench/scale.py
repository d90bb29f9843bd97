"""Horizontal scaling of the CPU-bound stages: ingest throughput of the same turns through 1 and
through 2 worker processes of the stage group compress, segment, stm, extract. These stages keep no
store, so the workers share one consumer group's partitions freely.

Each run is a fresh deployment on the same broker. Its workers are started and ready (models
loaded, partitions assigned) before the turns are produced. The clock runs from the first turn
produced until the group has committed everything it reads. Each LoCoMo session is streamed as
its own conversation, so the work spreads over the partitions."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from memstream.bench import clusters
from memstream.bench.cpu import (
    CpuMeter,
    disk_bytes,
    file_bytes,
    lowest_rates,
    net_of_idle,
    per_unit_ms,
    rss_bytes,
)
from memstream.bench.cpu import sample as cpu_sample
from memstream.bench.deployment import Deployment
from memstream.bench.plots import pyplot, save_figure
from memstream.bench.retrieval import grow_store
from memstream.bench.scoring import spread
from memstream.config import Settings, absolute_path
from memstream.datasets import load_locomo, locomo_turns
from memstream.schemas import Turn
from memstream.schemas.topics import FRONT_TOPICS
from memstream.streams import runtime

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


# --- on a cluster: 3 Kafka brokers, 3 Qdrant nodes, the store group against the server ---------------

STORE_STAGES = "index,consolidate,query"
IDLE_GROUPS = ("ingest", "store", "brokers", "qdrant")  # the roles' idle CPU, less the client's
KAFKA_BASE_PORT = 21092  # away from the single broker's 9092 and the cluster tests' 19092+
QDRANT_BASE_PORT = 31333  # away from 6333 and the cluster tests' 26333+


@dataclass
class ClusterScaleOptions(ScaleOptions):
    """``bench scale --cluster``: part A ingests with each count of ``workers`` ingest workers (and one
    store worker on the Qdrant cluster); part B grows the store to ``cards`` and asks ``questions``
    with ``askers`` concurrent askers, with each count of ``store_workers`` on the server and one on
    the embedded store."""

    workers: Sequence[int] = (1, 2, 4)
    store_workers: Sequence[int] = (1, 2)
    cards: int = 100_000
    questions: int = 200
    askers: int = 4
    embedded: bool = True  # part B on the embedded store too
    workdir: Path = Path(".data/bench/scale-cluster")
    kafka_bootstrap: str | None = None  # a running cluster to use (its brokers' CPU and disk unknown)
    kafka_port: int | None = None  # base port of the cluster the bench starts (default: free from 21092)
    qdrant_url: str | None = None  # a running Qdrant to use (its nodes' CPU, RAM and disk unknown)
    qdrant_port: int | None = None
    brokers: int = 3
    qdrant_nodes: int = 3
    keep_services: bool = False  # leave the cluster the bench started running
    idle_s: float = 10.0  # part A: CPU of every process measured this long with the workers ready and idle
    rounds: int = 3  # part A this many times: the model's check over repeated runs, with its spread


def recorded_base_port(data: Path) -> int | None:
    """The base port the cluster in ``data`` was first started on (kafka.sh's ``cluster.layout``): it
    keeps it, so a later run, or one after an interrupted run, starts it there again."""
    try:
        lines = (data / "cluster.layout").read_text().splitlines()
    except OSError:
        return None
    ports = [line.partition("=")[2] for line in lines if line.startswith("base_port=")]
    return int(ports[0]) if ports and ports[0].isdigit() else None


def kafka_cluster(options: ClusterScaleOptions) -> clusters.LocalCluster:
    data = absolute_path(options.workdir / "kafka")
    port = (
        options.kafka_port
        or recorded_base_port(data)
        or clusters.free_base_port(KAFKA_BASE_PORT, range(2 * options.brokers), step=10)
    )
    return clusters.LocalCluster("kafka", data, port, options.brokers)


def qdrant_cluster(options: ClusterScaleOptions) -> clusters.LocalCluster:
    nodes = options.qdrant_nodes
    port = options.qdrant_port or clusters.free_base_port(
        QDRANT_BASE_PORT, [10 * i + j for i in range(nodes) for j in range(3)]
    )
    return clusters.LocalCluster("qdrant", absolute_path(options.workdir / "qdrant"), port, nodes)


def scale_questions(options: ClusterScaleOptions, turns: Sequence[Turn]) -> list[Any]:
    """``options.questions`` LoCoMo questions (categories 1–4) of the samples whose turns were ingested,
    each asked in one of its sample's streamed conversations (sessions), in turn, so the questions'
    keys spread over the partitions. Cycled when the samples have fewer."""
    from dataclasses import replace

    from memstream.bench.retrieval import load_questions

    streamed: dict[str, list[str]] = {}
    for t in turns:
        sample = t.conversation_id.rsplit("-", 1)[0]
        if t.conversation_id not in streamed.setdefault(sample, []):
            streamed[sample].append(t.conversation_id)
    samples = [s for s in load_locomo(options.data) if s.sample_id in streamed]
    pool = spread(load_questions(samples, (1, 2, 3, 4)), options.questions)
    out = []
    for i in range(options.questions):
        q = pool[i % len(pool)]
        conversations = streamed[q.conversation_id]
        out.append(replace(q, conversation_id=conversations[i % len(conversations)]))
    return out


async def ask_concurrently(
    settings: Settings,
    questions: Sequence[Any],
    askers: int,
    *,
    on_reply: Callable[[], None] = lambda: None,
    on_timed: Callable[[], object] = lambda: None,
) -> dict[str, Any]:
    """``questions`` asked by ``askers`` concurrent askers over Kafka (evidence only, no LLM), after a
    warm-up of one question per asker: replies/s, request-to-reply p50/p99, the worker's own p50."""
    import asyncio

    from memstream.bench.queries import ask_for_evidence
    from memstream.bench.scoring import percentile
    from memstream.client import AsyncMemoryClient

    latencies: list[float] = []
    worker: list[float] = []
    errors = 0
    async with AsyncMemoryClient(settings) as client:

        async def one(q: Any, timeout_s: float) -> Any:
            return await ask_for_evidence(client, q, timeout_s, raise_on_error=False)

        await asyncio.gather(*(one(q, 180) for q in questions[: max(askers, 1)]))  # warm-up
        todo = list(questions)
        on_timed()  # the warm-up is over: the timed questions start

        async def asker() -> None:
            nonlocal errors
            while todo:
                q = todo.pop(0)
                t0 = time.perf_counter()
                reply = await one(q, 120)
                latencies.append((time.perf_counter() - t0) * 1000.0)
                worker.append(reply.latency_ms.get("total_ms", 0.0))
                errors += 0 if reply.ok else 1
                on_reply()

        started = time.perf_counter()
        await asyncio.gather(*(asker() for _ in range(max(askers, 1))))
        seconds = time.perf_counter() - started
    return {
        "questions": len(questions),
        "askers": askers,
        "seconds": round(seconds, 2),
        "replies_per_s": round(len(questions) / seconds, 2),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "worker_p50_ms": round(percentile(worker, 50), 2),
        "errors": errors,
    }


def wait_green(urls: str, prefix: str, timeout_s: float = 1800.0) -> float:
    """Wait until every collection of ``prefix`` on the server is optimised (status green); seconds."""
    from qdrant_client import QdrantClient

    client = QdrantClient(url=urls.split(",")[0], timeout=60, check_compatibility=False)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout_s:
            names = [c.name for c in client.get_collections().collections if c.name.startswith(prefix)]
            if all(str(client.get_collection(n).status).lower().endswith("green") for n in names):
                break
            time.sleep(1.0)
    finally:
        client.close()
    return round(time.monotonic() - t0, 1)


def _stop_quietly(started: Sequence[clusters.LocalCluster]) -> None:
    """The clusters the run started, stopped side by side; a failed stop is the scripts' to log."""
    with contextlib.suppress(RuntimeError):
        clusters.stop_together(started)


def _sum(values: Iterable[float]) -> float:
    return float(sum(values))


def _deployment_env(options: ClusterScaleOptions, qdrant_url: str | None, prefix: str) -> dict[str, str]:
    env = {
        "MEMSTREAM_STAGES": SCALE_STAGES,
        "MEMSTREAM_TORCH_THREADS": str(options.torch_threads),
        "MEMSTREAM_COMPRESSOR_MODEL": "",
        "MEMSTREAM_LLM_BASE_URL": "",
        "MEMSTREAM_EXTRACT_MODE": "extractive",
        "MEMSTREAM_TOPIC_REPLICATION_FACTOR": str(min(3, options.brokers)),
        "MEMSTREAM_TOPIC_MIN_INSYNC_REPLICAS": str(min(2, options.brokers)),
        "MEMSTREAM_QDRANT_COLLECTION_PREFIX": f"{prefix}_",
        **options.env,
    }
    if qdrant_url:
        env["MEMSTREAM_QDRANT_URL"] = qdrant_url
    return env


class _Roles:
    """The processes whose CPU a run measures: role -> pid."""

    def __init__(self, infra: dict[str, int]):
        self.infra = infra

    def of(self, workers: dict[str, runtime.WorkerProcess]) -> dict[str, int]:
        return {**{name: w.process.pid for name, w in workers.items()}, **self.infra, "client": os.getpid()}

    @staticmethod
    def groups(pids: dict[str, int]) -> dict[str, list[str]]:
        return {
            "ingest": [r for r in pids if r.startswith("ingest-")],
            "store": [r for r in pids if r.startswith("store-")],
            "brokers": [r for r in pids if r.startswith("broker-")],
            "qdrant": [r for r in pids if r.startswith("qdrant-")],
        }


def _kafka_bytes(kafka: clusters.LocalCluster | None, prefix: str) -> int | None:
    """Bytes of the deployment's topics (every partition replica's log segments) on the brokers' disks:
    what its records take in Kafka, replication included (indexes excluded)."""
    if kafka is None:
        return None
    return sum(file_bytes(d, prefix=prefix, suffix=".log") for d in kafka.data_dirs())


def _qdrant_usage(qdrant: clusters.LocalCluster | None, prefix: str) -> tuple[int, int] | None:
    """(bytes on disk of the deployment's collections over every node, RSS of every node)."""
    if qdrant is None:
        return None
    disk = sum(disk_bytes(d, prefix=prefix) for d in qdrant.data_dirs())
    return disk, sum(rss_bytes(p) for p in qdrant.pids())


def _cpu_figures(meter: CpuMeter, pids: dict[str, int], units: int) -> tuple[dict[str, float], dict[str, float]]:
    seconds = meter.stop()
    groups = _Roles.groups(pids)
    per_unit = per_unit_ms(seconds, units, {k: v for k, v in groups.items()})
    workers = groups["ingest"]
    if workers:
        per_unit["ingest_per_worker"] = round(per_unit["ingest"] / len(workers), 3)
    return {k: round(v, 3) for k, v in seconds.items()}, per_unit


def _start_part_a_workers(
    deployment: Deployment, n: int, status: Callable[[str], None]
) -> dict[str, runtime.WorkerProcess]:
    workers: dict[str, runtime.WorkerProcess] = {}
    status(f"starting {n} ingest worker(s) and the store worker")
    for i in range(n):
        workers[f"ingest-{i + 1}"] = deployment.start_worker(f"ingest-{i + 1}", wait=False)
    workers["store-1"] = deployment.start_worker("store-1", stages=STORE_STAGES, wait=False)
    deployment.wait_ready()  # side by side: part A measures from here on
    return workers


def stage_busy_s(worker: runtime.WorkerProcess) -> dict[str, float]:
    """Seconds each of a worker's stages has spent handling messages (its own Prometheus endpoint)."""
    from memstream.bench.deploy import worker_samples

    assert worker.metrics_port is not None, "a worker started with a metrics port"
    return {
        sample.labels["stage"]: sample.value
        for sample in worker_samples(worker.metrics_port)
        if sample.name == "memstream_stage_latency_seconds_sum"
    }


def idle_cores(pids: dict[str, int], seconds: float, parts: int = 2) -> dict[str, float]:
    """Each role's CPU-seconds per second with the workers ready and nothing asked of them, its
    quietest of ``parts`` stretches of ``seconds`` (a new cluster's warm-up lands in the first)."""
    samples = [(time.monotonic(), cpu_sample(pids))]
    for _ in range(parts):
        time.sleep(seconds / parts)
        samples.append((time.monotonic(), cpu_sample(pids)))
    return lowest_rates(samples)


def _ingest_run(
    options: ClusterScaleOptions,
    deployment: Deployment,
    workers: dict[str, runtime.WorkerProcess],
    roles: _Roles,
    turns: Sequence[Turn],
    kafka: clusters.LocalCluster | None,
    label: str,
    status: Callable[[str], None],
    on_lag: Callable[[int, int], None],
) -> dict[str, Any]:
    """One part-A run: idle CPU, then every turn produced, to the front topics drained and to stored."""
    from memstream.adapters import open_store
    from memstream.processors.write.index import CARDS
    from memstream.schemas.topics import DRAIN_TOPICS

    n = sum(1 for name in workers if name.startswith("ingest-"))
    pids = roles.of(workers)
    produced = 0

    def progress(lag: dict[str, int]) -> None:
        on_lag(max(0, produced - lag.get(deployment.settings.topic("turns"), 0)), len(turns))

    status(f"{label}: {options.idle_s:g} s idle (the processes' fixed CPU)")
    idle = idle_cores(pids, options.idle_s)
    status(f"{label}: ingesting {len(turns)} turns")
    busy_before = stage_busy_s(workers["store-1"])
    meter = CpuMeter(pids).start()
    started = time.monotonic()
    produced = deployment.produce(turns)
    front = deployment.drain(timeout_s=3600, topics=FRONT_TOPICS, progress=progress)
    status(f"{label}: waiting for the store worker")
    stored = deployment.drain(timeout_s=3600, topics=DRAIN_TOPICS, flush=False)
    window = time.monotonic() - started
    cpu_s, per_turn = _cpu_figures(meter, pids, len(turns))  # stops the meter before the scrape below
    busy = {k: v - busy_before.get(k, 0.0) for k, v in stage_busy_s(workers["store-1"]).items()}
    groups = _Roles.groups(pids)
    per_turn_net = per_unit_ms(net_of_idle(meter.seconds(), idle, window), len(turns), groups)
    per_turn_net["ingest_per_worker"] = round(per_turn_net["ingest"] / n, 3)
    kafka_bytes = _kafka_bytes(kafka, deployment.settings.topic_prefix)
    with contextlib.closing(open_store(deployment.settings)) as store:
        cards = store.count(CARDS, TENANT)
    return {
        "workers": n,
        "prefix": deployment.settings.topic_prefix,
        "seconds": round(front - started, 2),
        "turns_per_s": round(len(turns) / (front - started), 2),
        "stored_s": round(stored - started, 2),
        "stored_turns_per_s": round(len(turns) / (stored - started), 2),
        "cards": cards,
        "cpu_s": cpu_s,
        "cpu_ms_per_turn": per_turn,
        "idle_cpu_cores": {
            **{r: round(c, 4) for r, c in idle.items()},
            **{g: round(sum(idle.get(r, 0.0) for r in rs), 4) for g, rs in groups.items()},
        },
        "cpu_ms_per_turn_net": per_turn_net,
        # wall time the store worker's stages spent per turn; each takes one message at a time
        "store_busy_ms_per_turn": {k: round(1000 * v / len(turns), 3) for k, v in sorted(busy.items())},
        "store_lane_ms_per_turn": round(1000 * max(busy.values(), default=0.0) / len(turns), 3),
        "kafka_bytes": kafka_bytes,
        "kafka_bytes_per_turn": round(kafka_bytes / len(turns), 1) if kafka_bytes is not None else None,
    }


def run_cluster_bench(
    options: ClusterScaleOptions,
    *,
    status: Callable[[str], None] = lambda s: None,
    on_lag: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, Any]:
    """Part A (ingest with each count of ingest workers) and part B (questions at ``cards`` cards on the
    Qdrant cluster with each count of store workers, and on the embedded store), with the CPU-seconds
    of every process (workers, brokers, Qdrant nodes, this client) per turn and per question."""
    from memstream.processors.operations.capacity import measured_costs

    turns = load_turns(options)
    result: dict[str, Any] = {
        "mode": "cluster",
        "stages": {"ingest": SCALE_STAGES.split(","), "store": STORE_STAGES.split(",")},
        "turns": len(turns),
        "conversations": len({t.conversation_id for t in turns}),
        "torch_threads_per_worker": options.torch_threads,
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "cores": os.cpu_count(),
        "ingest": [],
        "queries": [],
        "store_growth": {},
    }
    with contextlib.ExitStack() as running:
        run = _ClusterRun(options, status, on_lag, running, turns, scale_questions(options, turns), result)
        run.start_services()
        server, kept = run.part_a()
        run.grow_server(server)
        run.ask_on_the_server(server, kept)
        if options.embedded:
            run.embedded_store()
    try:
        costs = measured_costs(result)
    except (KeyError, ZeroDivisionError) as e:  # an external cluster: its brokers' or nodes' figures unknown
        result["costs_missing"] = str(e)
        return result
    result["costs"] = dataclasses.asdict(costs)
    result["check"] = model_check(result, costs, float(os.cpu_count() or 1))
    result["check_summary"] = check_summary(result["check"])
    return result


@dataclass
class _ClusterRun:
    """One ``bench scale --cluster`` run, phase by phase, filling ``result``."""

    options: ClusterScaleOptions
    status: Callable[[str], None]
    on_lag: Callable[[int, int], None]
    running: contextlib.ExitStack  # what to stop at the end, whatever happens
    turns: list[Turn]
    questions: list[Any]
    result: dict[str, Any]
    stamp: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S"))
    kafka: clusters.LocalCluster | None = None
    qdrant: clusters.LocalCluster | None = None
    base: Settings = field(init=False)  # set by start_services, from the brokers it starts or is given
    qdrant_url: str = field(init=False)
    infra: dict[str, int] = field(default_factory=dict)  # broker-I, qdrant-I -> pid

    @property
    def roles(self) -> _Roles:
        return _Roles(self.infra)

    def start_services(self) -> None:
        """The brokers and Qdrant nodes the run starts (unless given running ones)."""
        options = self.options
        self.kafka = None if options.kafka_bootstrap else kafka_cluster(options)
        self.qdrant = None if options.qdrant_url else qdrant_cluster(options)
        starting = [cluster for cluster in (self.kafka, self.qdrant) if cluster is not None]
        for cluster in starting:
            self.status(f"starting {cluster.size} {cluster.kind} nodes on {cluster.address}")
        if not options.keep_services:
            self.running.callback(_stop_quietly, starting)
        # Side by side: neither needs the other, and each start waits on its nodes' readiness.
        with ThreadPoolExecutor(2, "scale-cluster-start") as pool:
            for started in [pool.submit(cluster.run, "start") for cluster in starting]:
                started.result()
        bootstrap = options.kafka_bootstrap or self.kafka.address  # type: ignore[union-attr]
        self.qdrant_url = options.qdrant_url or self.qdrant.address  # type: ignore[union-attr]
        self.infra = {f"broker-{i + 1}": p for i, p in enumerate(self.kafka.pids() if self.kafka else [])}
        self.infra |= {f"qdrant-{i + 1}": p for i, p in enumerate(self.qdrant.pids() if self.qdrant else [])}
        self.base = Settings(kafka_bootstrap=bootstrap)
        self.result["kafka"] = {
            "bootstrap": bootstrap,
            "brokers": options.brokers if self.kafka else None,
            "replication_factor": min(3, options.brokers),
            "min_insync_replicas": min(2, options.brokers),
            "partitions": self.base.topic_partitions,
        }
        self.result["qdrant"] = {
            "url": self.qdrant_url,
            "nodes": options.qdrant_nodes if self.qdrant else None,
            "replication_factor": self.base.qdrant_replication_factor,
            "shards": self.base.qdrant_shards or (options.qdrant_nodes if self.qdrant else None),
        }

    def deployment(self, name: str, prefix: str, qdrant_url: str | None) -> Deployment:
        prefix = f"s{self.stamp.replace('-', '')}{prefix}"
        env = _deployment_env(self.options, qdrant_url, prefix)
        deployment = Deployment(self.base, self.options.workdir / f"{self.stamp}-{name}", env, prefix=prefix)
        self.running.callback(deployment.stop_workers)
        return deployment

    def part_a(self) -> tuple[Deployment, runtime.WorkerProcess]:
        """Ingest with 1, 2, 4 ingest workers and one store worker on the Qdrant cluster, each round
        again; the last deployment and its store worker stay for part B (a server store has no lock)."""
        deployment: Deployment | None = None
        workers: dict[str, runtime.WorkerProcess] = {}
        for round_ in range(1, self.options.rounds + 1):
            for n in self.options.workers:
                if deployment is not None:
                    deployment.stop_workers()
                deployment = self.deployment(f"round-{round_}-ingest-{n}w", f"r{round_}i{n}", self.qdrant_url)
                label = f"A{round_}/{self.options.rounds}, {n} ingest worker(s)"
                workers = _start_part_a_workers(deployment, n, lambda text: self.status(f"{label}: {text}"))
                run = _ingest_run(
                    self.options,
                    deployment,
                    workers,
                    self.roles,
                    self.turns,
                    self.kafka,
                    label,
                    self.status,
                    self.on_lag,
                )
                self.result["ingest"].append(run | {"round": round_})
        assert deployment is not None, "at least one round and one worker count"
        for name, w in workers.items():
            if name.startswith("ingest-"):
                w.stop()
        deployment.workers = [workers["store-1"]]
        return deployment, workers["store-1"]

    def growing(self) -> Callable[[int], None]:
        """A progress callback for cards added, out of ``options.cards``."""
        grown = 0
        self.on_lag(0, self.options.cards)

        def on_grow(k: int) -> None:
            nonlocal grown
            grown += k
            self.on_lag(grown, self.options.cards)

        return on_grow

    def grow_server(self, server: Deployment) -> None:
        """The last ingest deployment's cards, grown to ``options.cards`` on the server, indexed."""
        from memstream.adapters import open_store
        from memstream.processors.write.index import CARDS

        prefix = server.settings.qdrant_collection_prefix
        self.status(f"B: growing the server store to {self.options.cards} cards")
        before = _qdrant_usage(self.qdrant, prefix)
        t0 = time.monotonic()
        with contextlib.closing(open_store(server.settings)) as store:
            real = store.count(CARDS, TENANT)
            added = grow_store(store, self.options.cards, progress=self.growing())
            upsert_s = time.monotonic() - t0
            self.status("B: waiting for the server to index (collections green)")
            optimise_s = wait_green(self.qdrant_url, prefix)
            total_cards = store.count(CARDS, TENANT)
        after = _qdrant_usage(self.qdrant, prefix)
        rf = self.base.qdrant_replication_factor
        growth: dict[str, Any] = {
            "real_cards": real,
            "added": added,
            "cards": total_cards,
            "upsert_s": round(upsert_s, 1),
            "optimise_s": optimise_s,
            "replication_factor": rf,
        }
        if before and after and added:
            growth |= {
                "disk_bytes": after[0],
                "rss_bytes": after[1],
                "disk_bytes_per_card": round((after[0] - before[0]) / added, 1),
                "ram_bytes_per_card": round((after[1] - before[1]) / added, 1),
                "disk_bytes_per_card_per_copy": round((after[0] - before[0]) / added / rf, 1),
                "ram_bytes_per_card_per_copy": round((after[1] - before[1]) / added / rf, 1),
            }
        self.result["store_growth"]["server"] = growth

    def measure(self, setup: str, dep: Deployment, workers: dict[str, runtime.WorkerProcess]) -> None:
        """``questions`` asked by ``askers`` at once, with the CPU of every process per question."""
        import asyncio

        server = setup.startswith("server")
        pids = (
            self.roles.of(workers)
            if server
            else {
                **{k: w.process.pid for k, w in workers.items()},
                **{k: v for k, v in self.infra.items() if k.startswith("broker-")},
                "client": os.getpid(),
            }
        )
        self.status(f"B, {setup}: {len(self.questions)} questions, {self.options.askers} askers")
        self.on_lag(0, len(self.questions))
        done = 0

        def on_reply() -> None:
            nonlocal done
            done += 1
            self.on_lag(done, len(self.questions))

        meter = CpuMeter(pids)
        figures = asyncio.run(
            ask_concurrently(dep.settings, self.questions, self.options.askers, on_reply=on_reply, on_timed=meter.start)
        )
        cpu_s, per_query = _cpu_figures(meter, pids, len(self.questions))
        self.result["queries"].append(
            {
                "setup": setup,
                "store": "server" if server else "embedded",
                "store_workers": sum(1 for k in workers if k.startswith("store-")),
                "cards": self.result["store_growth"]["server" if server else "embedded"]["cards"],
                **figures,
                "cpu_s": cpu_s,
                "cpu_ms_per_query": per_query,
            }
        )

    def ask_on_the_server(self, server: Deployment, kept: runtime.WorkerProcess) -> None:
        """The questions with each count of store workers on the server."""
        store_workers: dict[str, runtime.WorkerProcess] = {"store-1": kept}
        for n in sorted(self.options.store_workers):
            while len(store_workers) < n:
                i = len(store_workers) + 1
                self.status(f"B: starting store worker {i} on the server")
                store_workers[f"store-{i}"] = server.start_worker(f"query-{i}", stages=STORE_STAGES)
            self.measure(f"server-{n}", server, store_workers)
        server.stop_workers()

    def embedded_store(self) -> None:
        """The same turns into an embedded store (1 ingest + 1 store worker), grown the same way, asked
        the same questions with one store worker."""
        from memstream.processors.write.index import CARDS
        from memstream.schemas.topics import DRAIN_TOPICS

        embedded = self.deployment("embedded", "e", None)
        self.status("B, embedded: starting an ingest and a store worker")
        embedded.start_worker("ingest-1", wait=False)
        embedded.start_worker("store-1", stages=STORE_STAGES, wait=False)
        embedded.wait_ready()
        self.status(f"B, embedded: ingesting {len(self.turns)} turns")
        self.on_lag(0, len(self.turns))
        embedded.produce(self.turns, on_sent=lambda _t: None)
        embedded.drain(timeout_s=3600, topics=FRONT_TOPICS)
        embedded.drain(timeout_s=3600, topics=DRAIN_TOPICS, flush=False)
        embedded.stop_workers()
        self.status(f"B, embedded: growing the store to {self.options.cards} cards")
        path = embedded.settings.store_path
        before_disk = disk_bytes(path)
        t0 = time.monotonic()
        with embedded.store() as store:
            real = store.count(CARDS, TENANT)
            added = grow_store(store, self.options.cards, progress=self.growing())
            upsert_s = time.monotonic() - t0
            optimize = getattr(store, "optimize", None)
            t1 = time.monotonic()
            if optimize is not None:
                self.status("B, embedded: building the HNSW index (optimize)")
                optimize()
            total_cards = store.count(CARDS, TENANT)
        self.result["store_growth"]["embedded"] = {
            "real_cards": real,
            "added": added,
            "cards": total_cards,
            "upsert_s": round(upsert_s, 1),
            "optimise_s": round(time.monotonic() - t1, 1),
            "disk_bytes": disk_bytes(path),
            "disk_bytes_per_card": round((disk_bytes(path) - before_disk) / max(added, 1), 1),
        }
        self.status("B, embedded: starting the store worker")
        w = embedded.start_worker("query-1", stages=STORE_STAGES)
        self.measure("embedded-1", embedded, {"store-1": w})
        embedded.stop_workers()


def model_check(result: Mapping[str, Any], costs: Any, cores: float) -> list[dict[str, Any]]:
    """For every part-A run, its turns/s to stored (every stage done) against the model's prediction
    from ``costs`` (the first round's one-worker run) for that many workers on ``cores``, less the
    idle CPU and with the bench client's CPU that run measured; the resource that binds; the ratio."""
    from memstream.processors.operations.capacity import turn_bounds

    rows = []
    for run in result["ingest"]:
        free = cores - sum(run["idle_cpu_cores"].get(g, 0.0) for g in IDLE_GROUPS)
        bounds = turn_bounds(costs, run["workers"], free, run["cpu_ms_per_turn_net"].get("client", 0.0))
        binding = min(bounds, key=lambda k: bounds[k])
        measured = run.get("stored_turns_per_s") or round(result["turns"] / run["stored_s"], 2)
        rows.append(
            {
                "round": run.get("round", 1),
                "workers": run["workers"],
                "measured_turns_per_s": measured,
                "predicted_turns_per_s": round(bounds[binding], 2),
                "bound": binding,
                "ratio": round(measured / bounds[binding], 3),
            }
        )
    return rows


def check_summary(rows: Sequence[Mapping[str, Any]], tolerance: float = 0.15) -> dict[str, Any]:
    """Per worker count over the rounds: the median, lowest and highest measured / predicted ratio;
    ``within`` says whether every run is within ``tolerance`` of the model."""
    by_workers: dict[int, list[float]] = {}
    for row in rows:
        by_workers.setdefault(row["workers"], []).append(row["ratio"])
    return {
        "tolerance": tolerance,
        "within": all(abs(row["ratio"] - 1) <= tolerance for row in rows),
        "ratios": {
            str(n): {"median": round(statistics.median(r), 3), "min": min(r), "max": max(r), "runs": len(r)}
            for n, r in sorted(by_workers.items())
        },
    }


def _plot_ingest(ax: Any, result: Mapping[str, Any]) -> None:
    """Turns/s to stored by ingest workers, one bar per round, with the model's prediction dashed."""
    runs = result["ingest"]
    counts = sorted({r["workers"] for r in runs})
    rounds = sorted({r.get("round", 1) for r in runs})
    width = 0.8 / len(rounds)
    for k, round_ in enumerate(rounds):
        mine = [r for r in runs if r.get("round", 1) == round_]
        xs = [counts.index(r["workers"]) - 0.4 + width * (k + 0.5) for r in mine]
        rates = [r.get("stored_turns_per_s") or result["turns"] / r["stored_s"] for r in mine]
        ax.bar(xs, rates, width * 0.9, label=f"round {round_}", color=f"C{k}")
    for row in result.get("check", []):
        x = counts.index(row["workers"])
        ax.hlines(row["predicted_turns_per_s"], x - 0.45, x + 0.45, colors="black", linestyles="dashed")
    ax.set_xticks(range(len(counts)), [str(c) for c in counts])
    ax.set_xlabel("ingest workers")
    ax.set_ylabel("turns/s to stored (dashed: the model)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"ingest, {result['turns']} turns, {result['kafka']['replication_factor']} replicas", fontsize=10)


def plot_cluster(result: dict[str, Any], out: Path) -> Path:
    """Turns/s by ingest workers, and replies/s (p50 and p99 on the bars) by store setup."""
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    _plot_ingest(left, result)
    queries = result["queries"]
    right.bar([q["setup"] for q in queries], [q["replies_per_s"] for q in queries], color="tab:green")
    for q in queries:
        right.annotate(
            f"p50 {q['p50_ms']:.0f} / p99 {q['p99_ms']:.0f} ms",
            (q["setup"], q["replies_per_s"]),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    right.set_xlabel("store setup (store workers)")
    right.set_ylabel("replies/s")
    cards = queries[0]["cards"] if queries else 0
    right.set_title(f"questions at {cards} cards, {queries[0]['askers'] if queries else 0} askers", fontsize=10)
    fig.suptitle(result["machine"], fontsize=9)
    return save_figure(plt, fig, out)
