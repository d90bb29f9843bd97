"""``memstream bench chaos``: delivery under failure, checked point by point against a run without it.

A deployment of three worker processes in two stage groups (two ``ingest`` workers, one ``store``
worker) takes conversations of several tenants from a producer while a client asks questions the
whole time, and a seeded schedule of failures runs: ``kill -9`` of a random worker (restarted after a
pause), ``SIGSTOP`` of a worker past its session timeout then ``SIGCONT`` (a forced rebalance with a
zombie), one broker restart (stop, start, same data folder) and, with ``--llm``, one kill and restart
of the LLM server. A reference deployment ingests the same turns without failures. Point ids are
deterministic (tenant, conversation, provenance, content), so the two stores must hold the same
ids: a turn missing is lost, a point the reference lacks is extra, and a turn extracted in two
different memory writes is duplicated.

With ``--cluster`` the failures reach every layer: the run's deployment streams through a 3-broker
Kafka cluster (replication 3, min.insync.replicas 2) into a 3-node Qdrant cluster (3 shards x 2
replicas) with two store workers beside the two ingest workers, and the schedule adds ``kill -9`` of a
broker and of a Qdrant node (each restarted on its own storage after a pause, alternating through the
run) and, once, of both workers of one group at the same moment. The reference stays the plain
deployment (one broker, the embedded store): the same point ids are expected from both.

With ``--network-faults`` the run's traffic to Kafka (its own broker, advertised at a Toxiproxy proxy
so that clients stay on the proxy after bootstrapping), to the LLM server (``--llm``) and to the
Qdrant nodes (``--cluster``; the embedded store has no network) goes through Toxiproxy, and the
schedule adds, each for a while on one of them: added latency with jitter, a connection reset
mid-call, a hang that ends in a close (Toxiproxy's ``timeout``), and a bandwidth limit. With
``--cluster`` Kafka stays direct: its three brokers replicate over the listeners they advertise, so a
proxy per broker would put replication behind the toxics too.

Both deployments keep windows and buffers until the end (a long idle time, so no failure's pause
drains a window early), then drain and flush every conversation's tail (``Deployment.drain``).
Sleep-time consolidation is off: it rewrites payloads, not ids, and is tested elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, cast

import httpx

from memstream.bench import clusters
from memstream.bench.deployment import Deployment, free_port
from memstream.bench.dev_data import locomo_dev_if_present
from memstream.bench.plots import pyplot, save_figure
from memstream.client import AsyncMemoryClient, QueryTimeout
from memstream.config import Settings
from memstream.datasets import LocomoSample, demo_conversation_path, load_locomo, locomo_turns
from memstream.ports import VectorStore
from memstream.processors.write.index import CARDS, SCENES, TRIGGERS, TURNS, is_fresh, turn_point_id
from memstream.schemas import MemoryWrite, Reply, Turn, memory_writes
from memstream.schemas.topics import DRAIN_TOPICS, Topic
from memstream.streams import runtime
from memstream.topology import STAGES

from .toxiproxy import Proxy, Toxic, ToxicKind, Toxiproxy, ToxiproxyError, ToxiproxyServer, start_toxiproxy

INGEST = "compress,segment,stm,extract"
STORE = "index,consolidate,query"
WORKERS = {"ingest-1": INGEST, "ingest-2": INGEST, "store-1": STORE}
CLUSTER_WORKERS = {**WORKERS, "store-2": STORE}  # --cluster: the store group scales out too
# The run without failures: one worker of every stage. Memory is the same however the stages are
# spread (each conversation's turns go in order through one partition of each topic), so it is also a
# check that the run's layout changes nothing, and it costs one worker's start instead of three.
REFERENCE_WORKERS = {"reference": ",".join(STAGES)}
COLLECTIONS = (TURNS, CARDS, SCENES, TRIGGERS)
SESSION_TIMEOUT_S = 10.0  # the workers' broker_session_timeout: a SIGSTOP longer than this forces a rebalance
# --network-faults: the toxics of the schedule, and how long each stays (s). A reset or a hang of Kafka
# past the session timeout expels workers from their group, so those stay short of it or near it.
NETWORK_FAULTS: dict[ToxicKind, tuple[float, float]] = {
    "latency": (10.0, 20.0),
    "reset_peer": (3.0, 8.0),
    "timeout": (5.0, 10.0),
    "bandwidth": (10.0, 20.0),
}


@dataclass(frozen=True)
class ChaosOptions:
    minutes: float = 2.0
    seed: int = 0
    data: Path | None = None  # LoCoMo JSON; default: ../shared dev data when present, else the packaged conversation
    conversations: int = 2  # LoCoMo conversations, each under its own tenant
    sessions: int | None = 2  # of each LoCoMo conversation (None: all)
    packaged_tenants: int = 3  # the packaged conversation, once per tenant
    produce_share: float = 0.6  # turns are streamed over this share of the run; failures go on (but calm_s)
    kill_every_s: tuple[float, float] = (6.0, 14.0)  # between two failures
    # The run's last seconds without failures: every failure is over this long before the end (a
    # worker's kill or stop that would not be is left out), so the deployment recovers under load and
    # the drain waits on delivery, not on the last failure's recovery. 0: failures until the end.
    calm_s: float = 0.0
    restart_after_s: tuple[float, float] = (1.0, 5.0)  # a killed worker's pause before its restart
    stop_s: float = SESSION_TIMEOUT_S + 5.0  # SIGSTOP to SIGCONT
    stop_share: float = 0.3  # of the worker failures, the SIGSTOPs (the rest are kill -9)
    ask_every_s: float = 1.0
    # Longer than the longest outage the schedule causes: in a 20-minute run the one store worker
    # (embedded store, no failover), killed just before the broker restart, crashed at start-up and
    # was ready again ~59 s after the kill, and one question asked with 60 s went unanswered.
    ask_timeout_s: float = 120.0
    llm: bool = False
    cluster: bool = False  # a Kafka cluster and a Qdrant cluster, with broker and node kills
    node_every_s: float = 150.0  # --cluster: between two node kills (broker and Qdrant node alternate)
    node_down_s: tuple[float, float] = (5.0, 20.0)  # --cluster: a killed node's pause before its restart
    network_faults: bool = False  # Toxiproxy in front of Kafka, the LLM server (--llm) and Qdrant (--cluster)
    # The reference run's broker (a running one; default: the run's, MEMSTREAM_KAFKA_BOOTSTRAP): on
    # another broker than the one the schedule restarts, the reference runs beside the failures.
    reference_bootstrap: str | None = None
    net_every_s: float = 30.0  # --network-faults: one toxic in each slot this long (at least one of each kind)
    workdir: Path = Path(".data/bench/chaos")

    @property
    def workers(self) -> dict[str, str]:
        return CLUSTER_WORKERS if self.cluster else WORKERS


@dataclass(frozen=True)
class Event:
    at_s: float
    # kill | stop | broker_restart | llm_restart | broker_kill | qdrant_kill | group_kill, or with
    # --network-faults a toxic: latency | reset_peer | timeout | bandwidth
    action: str
    # the worker (kill, stop), the node number (broker_kill, qdrant_kill), the group (group_kill), the
    # proxy (a toxic: kafka, llm, qdrant-N)
    target: str = ""
    pause_s: float = 0.0  # kill: until the restart; stop: until SIGCONT; a toxic: until it is removed
    attributes: dict[str, int] = field(default_factory=dict)  # a toxic's, as Toxiproxy's API names them


def plan_events(options: ChaosOptions, workers: Sequence[str]) -> list[Event]:
    """The seeded failure schedule over the run (but its last ``calm_s``): worker failures every few
    seconds, one broker restart at half time and, with an LLM, one LLM server restart at a third.
    With ``cluster``, instead of the broker restart: kill -9 of a broker and of a Qdrant node,
    alternating (at least one of each), and once both workers of one group at the same moment. With
    ``network_faults``, toxics on the proxied services (``network_events``)."""
    rng = random.Random(options.seed)
    duration = options.minutes * 60 - options.calm_s  # the span with failures
    events: list[Event] = []
    t = rng.uniform(*options.kill_every_s)
    while t < duration:
        target = rng.choice(list(workers))
        if rng.random() < options.stop_share:
            event = Event(round(t, 2), "stop", target, options.stop_s)
        else:
            event = Event(round(t, 2), "kill", target, round(rng.uniform(*options.restart_after_s), 2))
        if not options.calm_s or event.at_s + event.pause_s <= duration:
            events.append(event)
        t += rng.uniform(*options.kill_every_s)
    if options.cluster:
        events += cluster_events(options, rng, duration)
    else:
        events.append(Event(round(duration / 2, 2), "broker_restart"))
    if options.llm:
        events.append(Event(round(duration / 3, 2), "llm_restart"))
    if options.network_faults:  # drawn last: the rest of the schedule is the same with or without them
        events += network_events(options, rng, duration)
    return sorted(events, key=lambda e: e.at_s)


def proxied_services(options: ChaosOptions) -> list[str]:
    """What --network-faults puts behind Toxiproxy: Kafka (one broker: see the module's docstring for
    why not a cluster's), the LLM server with ``llm``, the Qdrant nodes with ``cluster``."""
    return [s for s, on in (("kafka", not options.cluster), ("llm", options.llm), ("qdrant", options.cluster)) if on]


def network_events(options: ChaosOptions, rng: random.Random, duration: float) -> list[Event]:
    """One toxic early in each ``net_every_s`` slot of the run (at least one of each kind), kinds and
    services each in a seeded order, cycled, so a short run has every kind and spreads them over the
    services; a Qdrant fault hits one node's proxy."""
    services = proxied_services(options)
    n = max(len(NETWORK_FAULTS), round(duration / options.net_every_s))
    kinds = rng.sample(list(NETWORK_FAULTS), len(NETWORK_FAULTS))
    order = rng.sample(services, len(services))
    events = []
    for k in range(n):
        kind, service = kinds[k % len(kinds)], order[k % len(order)]
        target = f"qdrant-{rng.randint(1, Nodes.SIZE)}" if service == "qdrant" else service
        at = duration * (k + rng.uniform(0.05, 0.3)) / n  # early in the slot: it ends before the next one
        events.append(
            Event(round(at, 2), kind, target, round(rng.uniform(*NETWORK_FAULTS[kind]), 2), toxic_attributes(kind, rng))
        )
    return events


def toxic_attributes(kind: ToxicKind, rng: random.Random) -> dict[str, int]:
    """A toxic's attributes: latency 200-1000 ms (jitter a fifth of it), a reset 0-500 ms after the
    reply starts (which never arrives), a hang closed after 1-5 s, 8-64 KB/s."""
    if kind == "latency":
        ms = rng.randint(200, 1000)
        return {"latency": ms, "jitter": ms // 5}
    if kind == "reset_peer":
        return {"timeout": rng.randint(0, 500)}
    if kind == "timeout":
        return {"timeout": rng.randint(1000, 5000)}
    if kind == "bandwidth":
        return {"rate": rng.randint(8, 64)}
    raise ValueError(f"no network fault {kind!r} in the schedule")


def cluster_events(options: ChaosOptions, rng: random.Random, duration: float) -> list[Event]:
    """Node kills spread evenly over the run, a broker first, then alternating with a Qdrant node (3
    nodes each); the two workers of one group killed together between the first two."""
    n = max(2, round(duration / options.node_every_s))
    events = [
        Event(
            round(duration * (k + 1) / (n + 1), 2),
            "broker_kill" if k % 2 == 0 else "qdrant_kill",
            str(rng.randint(1, 3)),
            round(rng.uniform(*options.node_down_s), 2),
        )
        for k in range(n)
    ]
    group = rng.choice(["ingest", "store"])
    events.append(
        Event(round(duration * 1.5 / (n + 1), 2), "group_kill", group, round(rng.uniform(*options.restart_after_s), 2))
    )
    return events


# --- scoring -------------------------------------------------------------------------------------


@dataclass
class Delivery:
    turns: int
    lost: int
    duplicated: int
    extra_points: int
    missing_points: int
    extra_by_collection: dict[str, int]
    missing_by_collection: dict[str, int]


def score_delivery(
    produced: Iterable[Turn],
    chaos_ids: dict[str, set[str]],
    reference_ids: dict[str, set[str]],
    writes: Iterable[MemoryWrite],
    collections: Sequence[str] = COLLECTIONS,
) -> Delivery:
    """Lost: produced turns whose raw-turn point is missing. Duplicated: turns extracted in more than
    one distinct memory write (a redelivered write has the same id and does not count). Extra and
    missing: point ids of the chaos store the reference lacks, and the reverse (over ``collections``)."""
    turns = {turn_point_id(t.tenant_id, t.conversation_id, t.turn_id) for t in produced}
    lost = len(turns - chaos_ids.get(TURNS, set()))
    writes_of: dict[str, set[str]] = {}
    for w in writes:
        for st in w.source_turns:
            writes_of.setdefault(turn_point_id(w.tenant_id, w.conversation_id, st.turn_id), set()).add(w.write_id)
    duplicated = sum(1 for ids in writes_of.values() if len(ids) > 1)
    extra = {c: len(chaos_ids.get(c, set()) - reference_ids.get(c, set())) for c in collections}
    missing = {c: len(reference_ids.get(c, set()) - chaos_ids.get(c, set())) for c in collections}
    return Delivery(len(turns), lost, duplicated, sum(extra.values()), sum(missing.values()), extra, missing)


def changed_payloads(
    points: dict[str, dict[str, dict[str, Any]]],
    reference: dict[str, dict[str, dict[str, Any]]],
    ignore: Iterable[str] = (),
) -> dict[str, dict[str, list[str]]]:
    """Points both stores hold (``store_points``) whose payloads differ: collection -> point id -> the
    fields that differ, ``ignore``'s left out (collections without a difference are not listed)."""
    skip = set(ignore)
    out: dict[str, dict[str, list[str]]] = {}
    for collection, ours in points.items():
        theirs = reference.get(collection, {})
        for point_id in ours.keys() & theirs.keys():
            a, b = ours[point_id], theirs[point_id]
            fields = sorted(k for k in (a.keys() | b.keys()) - skip if a.get(k, _ABSENT) != b.get(k, _ABSENT))
            if fields:
                out.setdefault(collection, {})[point_id] = fields
    return out


_ABSENT = object()  # a field one payload lacks differs from any value, None included


@dataclass
class Asked:
    """What the askers saw: a reply (ok or error), a failure to send, or nothing before the timeout."""

    ok: int = 0
    error_replies: int = 0
    send_errors: int = 0
    unanswered: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    timeline: list[tuple[float, float, str]] = field(default_factory=list)  # (seconds into the run, ms, outcome)

    def record(self, at_s: float, ms: float, outcome: str) -> None:
        self.timeline.append((round(at_s, 2), round(ms, 1), outcome))

    @property
    def queries(self) -> int:
        return self.ok + self.error_replies + self.send_errors + self.unanswered

    def p99_ms(self) -> float | None:
        if len(self.latencies_ms) < 2:
            return self.latencies_ms[0] if self.latencies_ms else None
        return round(statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[98], 1)


# --- the run -------------------------------------------------------------------------------------


def chaos_turns(options: ChaosOptions) -> tuple[list[Turn], list[tuple[str, str, str]]]:
    """The turns to stream (conversations interleaved, each in order) and the questions to ask
    (tenant, conversation, question)."""
    path = options.data or locomo_dev_if_present()
    sources: list[tuple[str, LocomoSample, int | None]] = []
    if path is not None:
        for i, sample in enumerate(load_locomo(path)[: options.conversations]):
            sources.append((f"chaos-l{i}", sample, options.sessions))
    packaged = load_locomo(demo_conversation_path())[0]
    sources += [(f"chaos-p{i}", packaged, None) for i in range(options.packaged_tenants)]
    per_conversation: list[list[Turn]] = []
    questions: list[tuple[str, str, str]] = []
    for tenant, sample, sessions in sources:
        turns = list(locomo_turns(sample, tenant_id=tenant, max_sessions=sessions))
        per_conversation.append(turns)
        ids = {t.turn_id for t in turns}
        questions += [
            (tenant, sample.sample_id, q.question) for q in sample.qa if q.evidence and set(q.evidence) <= ids
        ]
    interleaved = [t for group in _round_robin(per_conversation) for t in group]
    return interleaved, questions


def _round_robin(groups: list[list[Turn]]) -> Iterable[list[Turn]]:
    for i in range(max(len(g) for g in groups)):
        yield [g[i] for g in groups if i < len(g)]


class Fleet:
    """The worker processes of one deployment, by name; restarts what died."""

    def __init__(
        self,
        deployment: Deployment,
        env: dict[str, str],
        log: Callable[[str], None],
        workers: dict[str, str] = WORKERS,
    ):
        self.workers = workers
        self.deployment = deployment
        self.env = env
        self.log = log
        self.procs: dict[str, runtime.WorkerProcess] = {}
        self.stopped: dict[str, float] = {}  # name -> when to SIGCONT
        self.down_until: dict[str, float] = {}  # killed: name -> when to restart
        self.crashes = 0  # exits nobody asked for
        deployment.stage_sets = [tuple(s.split(",")) for s in dict.fromkeys(workers.values())]

    def start(self, name: str, extra: dict[str, str] | None = None) -> runtime.WorkerProcess:
        port = free_port()
        env = {**self.deployment.env, **self.env, **(extra or {}), "MEMSTREAM_METRICS_PORT": str(port)}
        w = runtime.spawn_worker(
            env,
            self.deployment.settings.data_dir / "logs" / f"{name}.log",
            stages=self.workers[name],
            metrics_port=port,
        )
        self.procs[name] = w
        return w

    def start_all(self, extra: dict[str, str] | None = None) -> None:
        for name in self.workers:
            self.start(name, extra)
        for w in self.procs.values():
            runtime.wait_worker_ready(w)

    def kill(self, name: str, pause_s: float) -> None:
        w = self.procs.get(name)
        if w is not None and w.alive():
            self.cont(name)
            w.kill()
        self.down_until[name] = time.monotonic() + pause_s

    def stop(self, name: str, pause_s: float) -> bool:
        w = self.procs.get(name)
        if w is None or not w.alive() or name in self.stopped:
            return False
        os.killpg(w.process.pid, signal.SIGSTOP)
        self.stopped[name] = time.monotonic() + pause_s
        return True

    def cont(self, name: str) -> None:
        if self.stopped.pop(name, None) is not None:
            w = self.procs[name]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.process.pid, signal.SIGCONT)

    def tend(self) -> None:
        """SIGCONT what is due, restart what was killed and is due, and what died by itself."""
        now = time.monotonic()
        for name, due in list(self.stopped.items()):
            if now >= due:
                self.cont(name)
        for name in self.workers:
            if name in self.down_until:
                if now >= self.down_until[name]:
                    del self.down_until[name]
                    self.start(name)
                continue
            w = self.procs.get(name)
            if w is not None and not w.alive():
                self.crashes += 1
                self.log(f"{name} exited by itself (code {w.process.returncode}): restarting it")
                self.start(name)

    def settle(self) -> None:
        """Everything running again: stopped workers continued, killed ones restarted, all ready."""
        for name in list(self.stopped):
            self.cont(name)
        for name in list(self.down_until):
            del self.down_until[name]
            self.start(name)
        self.tend()
        for w in self.procs.values():
            runtime.wait_worker_ready(w, timeout_s=300)

    def stop_all(self) -> None:
        for name in list(self.stopped):
            self.cont(name)
        for w in self.procs.values():
            w.stop()
        self.procs = {}

    def rebalances(self) -> int:
        logs = self.deployment.settings.data_dir / "logs"
        return sum(p.read_text(errors="replace").count("rebalance: ") for p in logs.glob("*.log"))


class Nodes:
    """``--cluster``: the run's Kafka cluster and Qdrant cluster (3 nodes each, in the run's folder, on
    free ports), the nodes killed and when each is due back."""

    SIZE = 3

    def __init__(self, workdir: Path, log: Callable[[str], None]):
        kafka_base = clusters.free_base_port(23092, range(2 * self.SIZE))
        qdrant_base = clusters.free_base_port(33333, [10 * i + j for i in range(self.SIZE) for j in range(3)])
        self.kafka = clusters.LocalCluster("kafka", workdir / "kafka-cluster", kafka_base, self.SIZE)
        self.qdrant = clusters.LocalCluster("qdrant", workdir / "qdrant-cluster", qdrant_base, self.SIZE)
        self.bootstrap, self.qdrant_url = self.kafka.address, self.qdrant.address
        self.log = log
        self.down: dict[tuple[str, int], float] = {}  # (broker_kill | qdrant_kill, node) -> when to restart
        # Restarts under way, each on a thread: a broker catching up takes up to a minute on a busy
        # machine, and the events due meanwhile happen on time.
        self.restarting: dict[tuple[str, int], threading.Thread] = {}
        self.failed: list[BaseException] = []  # what a restart raised, raised again by settle

    def start(self) -> None:
        """Both clusters, side by side (neither needs the other); returns once every node answers."""
        with ThreadPoolExecutor(1, "chaos-qdrant-start") as pool:
            qdrant = pool.submit(self.qdrant.start)
            self.kafka.start()
            qdrant.result()

    def qdrant_ports(self) -> list[int]:
        """Each Qdrant node's HTTP port, node 1 first."""
        return [int(url.rpartition(":")[2]) for url in self.qdrant_url.split(",")]

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            clusters.stop_together([self.qdrant, self.kafka])

    def settings(self) -> Settings:
        return Settings(kafka_bootstrap=self.bootstrap, topic_replication_factor=3, topic_min_insync_replicas=2)

    def env(self) -> dict[str, str]:
        """The run's store: every Qdrant node (the client fails over), 3 shards x 2 replicas."""
        return {
            "MEMSTREAM_QDRANT_URL": self.qdrant_url,
            "MEMSTREAM_QDRANT_SHARDS": str(self.SIZE),
            "MEMSTREAM_QDRANT_REPLICATION_FACTOR": "2",
            "MEMSTREAM_QDRANT_COLLECTION_PREFIX": "chaos_",
        }

    def kill(self, action: str, node: int, pause_s: float) -> bool:
        restarting = self.restarting.get((action, node))
        if (action, node) in self.down or (restarting is not None and restarting.is_alive()):
            return False
        (self.kafka if action == "broker_kill" else self.qdrant).kill(node)
        self.down[(action, node)] = time.monotonic() + pause_s
        return True

    def tend(self, *, now: float | None = None) -> None:
        """Start restarting the nodes that are due (each on its own storage, on a thread of its own)."""
        now = time.monotonic() if now is None else now
        for (action, node), due in list(self.down.items()):
            if now >= due:
                del self.down[(action, node)]
                self.restarting[(action, node)] = thread = threading.Thread(
                    target=self._restart, args=(action, node), name=f"chaos-{action}-{node}"
                )
                thread.start()

    def _restart(self, action: str, node: int) -> None:
        kind = "broker" if action == "broker_kill" else "Qdrant node"
        self.log(f"chaos: restarting {kind} {node}")
        try:
            (self.kafka if action == "broker_kill" else self.qdrant).start_node(node)  # returns once it answers
        except BaseException as exc:
            self.failed.append(exc)
        else:
            self.log(f"chaos: {kind} {node} is back")

    def settle(self) -> None:
        """Every node back: the due ones restarted now, and every restart done."""
        self.tend(now=float("inf"))
        for thread in self.restarting.values():
            thread.join()
        self.restarting = {}
        if self.failed:
            raise self.failed[0]


class NetworkFaults:
    """``--network-faults``: a Toxiproxy server of the run's own (API and proxies on loopback, free
    ports), its proxies by service, the toxics on them and when each is due off, and the run's broker
    advertised at the Kafka proxy (started once that proxy forwards to its port)."""

    def __init__(self, workdir: Path, log: Callable[[str], None]):
        self.workdir = workdir.resolve()
        self.log = log
        self.server: ToxiproxyServer | None = None
        self.api: Toxiproxy | None = None
        self.proxies: dict[str, Proxy] = {}
        self.broker: clusters.LocalCluster | None = None
        self.active: dict[str, tuple[str, float]] = {}  # toxic name -> (proxy, when to remove it)
        self.applied: Counter[str] = Counter()  # toxics applied, by kind

    def start(self) -> None:
        port, data = free_port(), self.workdir / "toxiproxy"
        # One an interrupted run left in this folder listens elsewhere, and the script would take it for this one.
        ToxiproxyServer(port, data).stop()
        self.server = start_toxiproxy(port, data)
        self.api = self.server.client()

    def proxy(self, name: str, upstream_port: int) -> Proxy:
        """A proxy on a free loopback port to 127.0.0.1:``upstream_port``; an earlier run's of that name goes first."""
        assert self.api is not None, "start() first"
        if name in self.api.proxies():
            self.api.delete_proxy(name)
        self.proxies[name] = self.api.create_proxy(name, f"127.0.0.1:{upstream_port}")
        return self.proxies[name]

    def start_broker(self) -> str:
        """The run's own single broker (in the run's folder, fresh each run) behind the ``kafka`` proxy,
        advertising the proxy's address: a client bootstrapping there gets the proxy back as the
        broker's address, so every Kafka connection of the run goes through it. Returns the bootstrap."""
        port = clusters.free_base_port(29092, [0, 1])  # client port, controller port + 1
        proxy = self.proxy("kafka", port)
        self.broker = clusters.LocalCluster(
            "kafka", self.workdir / "kafka-proxied", port, 1, {"MEMSTREAM_KAFKA_ADVERTISED_PORT": str(proxy.port)}
        )
        with contextlib.suppress(RuntimeError):  # one an interrupted run left running
            self.broker.stop()
        shutil.rmtree(self.workdir / "kafka-proxied", ignore_errors=True)
        self.broker.start()
        return proxy.address

    def restart_broker(self) -> None:
        """Kafka's toxics go first: the broker's readiness probe goes through the proxy, and this loop,
        blocked in the restart, could not remove them when due."""
        assert self.broker is not None
        self.clear("kafka")
        self.broker.stop()
        self.broker.start()

    def apply(self, event: Event) -> bool:
        """The event's toxic on its proxy, until ``pause_s`` from now; False when the API refused it."""
        assert self.api is not None
        toxic = Toxic(f"{event.action}-{event.at_s:g}", cast(ToxicKind, event.action), event.attributes)
        try:
            self.api.add_toxic(event.target, toxic)
        except (ToxiproxyError, httpx.HTTPError) as exc:
            self.log(f"chaos: {event.action} on {event.target} not applied: {exc}")
            return False
        self.active[toxic.name] = (event.target, time.monotonic() + event.pause_s)
        self.applied[event.action] += 1
        return True

    def tend(self, *, now: float | None = None, proxy: str | None = None) -> None:
        """Remove the toxics that are due (of ``proxy`` only, when named)."""
        assert self.api is not None
        now = time.monotonic() if now is None else now
        for name, (on, due) in list(self.active.items()):
            if now >= due and proxy in (None, on):
                with contextlib.suppress(ToxiproxyError):  # already gone: the aim is the same
                    self.api.remove_toxic(on, name)
                del self.active[name]

    def clear(self, proxy: str) -> None:
        self.tend(now=float("inf"), proxy=proxy)

    def settle(self) -> None:
        """Every toxic off (the final drain and the comparison run on a clean network)."""
        if self.api is not None:
            self.tend(now=float("inf"))
            self.api.reset()

    def worker_env(self) -> dict[str, str]:
        """The workers' LLM endpoint through its proxy (with ``--llm``)."""
        llm = self.proxies.get("llm")
        return {"MEMSTREAM_LLM_BASE_URL": f"http://{llm.address}/v1"} if llm is not None else {}

    def stop(self) -> None:
        if self.broker is not None:
            with contextlib.suppress(RuntimeError):
                self.broker.stop()
        if self.api is not None:
            self.api.close()
        if self.server is not None:
            self.server.stop()


def worker_env(options: ChaosOptions, base: Settings) -> dict[str, str]:
    env = {
        "MEMSTREAM_STM_IDLE_S": "600",  # windows and buffers wait for the final flush: no failure drains one early
        "MEMSTREAM_STM_TICK_S": "1",
        "MEMSTREAM_SLEEP_IDLE_S": "86400",
        "MEMSTREAM_LOG_LEVEL": "info",
    }
    if options.llm:
        env |= runtime.local_llm_env(base)
    return env


def produce(
    settings: Settings, turns: Sequence[Turn], seconds: float, stop: threading.Event, on_sent: Callable[[int], None]
) -> int:
    """Stream ``turns`` in order over ``seconds``; a send that fails (the broker is down) is retried
    until it succeeds, so a turn can reach the topic twice: the pipeline must not care."""

    async def go() -> int:
        sent = retries = 0
        started = time.monotonic()
        producer: AsyncMemoryClient | None = None
        while sent < len(turns) and not stop.is_set():
            due = started + seconds * sent / max(1, len(turns))
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(min(wait, 0.5))
                continue
            try:
                if producer is None:
                    producer = AsyncMemoryClient(settings)
                    await asyncio.wait_for(producer.__aenter__(), 20)
                await asyncio.wait_for(producer.remember([turns[sent]]), 20)
                sent += 1
                on_sent(sent)
            except Exception:  # broker restarting: a new producer, the same turn again
                retries += 1
                if producer is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(producer.__aexit__(None, None, None), 10)
                producer = None
                await asyncio.sleep(1.0)
        if producer is not None:
            await producer.__aexit__(None, None, None)
        return retries

    return asyncio.run(go())


def ask_continuously(
    settings: Settings,
    questions: Sequence[tuple[str, str, str]],
    options: ChaosOptions,
    stop: threading.Event,
    asked: Asked,
    answer: bool,
    started: float,
) -> None:
    """Ask a random question every ``ask_every_s`` until ``stop``; every outcome into ``asked``
    (``started``: the run's start on the monotonic clock, for the timeline)."""
    rng = random.Random(options.seed + 1)

    async def go() -> None:
        client: AsyncMemoryClient | None = None
        while not stop.is_set():
            tenant, conversation, question = rng.choice(list(questions))
            t0 = time.monotonic()
            try:
                if client is None:
                    client = AsyncMemoryClient(settings)
                    await asyncio.wait_for(client.__aenter__(), 30)
                reply: Reply = await client.ask(
                    question,
                    tenant_id=tenant,
                    conversation_id=conversation,
                    answer=answer,
                    timeout_s=options.ask_timeout_s,
                    raise_on_error=False,
                )
            except QueryTimeout:
                asked.unanswered += 1
                asked.record(t0 - started, (time.monotonic() - t0) * 1000, "unanswered")
            except Exception as exc:  # the broker is down: a clear error at once
                asked.send_errors += 1
                asked.errors[type(exc).__name__] += 1
                asked.record(t0 - started, (time.monotonic() - t0) * 1000, "send_error")
                if client is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(client.__aexit__(None, None, None), 10)
                client = None
                await asyncio.sleep(1.0)
            else:
                asked.latencies_ms.append((time.monotonic() - t0) * 1000)
                asked.record(t0 - started, asked.latencies_ms[-1], "ok" if reply.ok else "error_reply")
                if reply.ok:
                    asked.ok += 1
                else:
                    asked.error_replies += 1
                    asked.errors[(reply.error or "").split(":", 1)[0][:40]] += 1
            await asyncio.sleep(max(0.0, options.ask_every_s - (time.monotonic() - t0)))
        if client is not None:
            await client.__aexit__(None, None, None)

    asyncio.run(go())


def store_points(
    store: VectorStore, tenants: Iterable[str], collections: Sequence[str] = COLLECTIONS
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every point of ``tenants`` in ``collections``: collection -> point id -> payload. Any store: the
    embedded one once its workers stopped, a Qdrant server while they run."""
    out: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in collections}
    for tenant in tenants:
        for collection in collections:
            out[collection] |= {h.id: dict(h.payload) for h in store.scroll(collection, tenant, limit=1_000_000)}
    return out


def store_ids(deployment: Deployment, tenants: Iterable[str]) -> dict[str, set[str]]:
    """The ids of every point of ``tenants``, but raw turns still fresh: a turn whose flush never
    reached the store is lost, even though its early point is there."""
    with deployment.store() as store:
        return {
            c: {pid for pid, payload in points.items() if not (c == TURNS and is_fresh(payload))}
            for c, points in store_points(store, tenants).items()
        }


def finish(fleet: Fleet, deployment: Deployment, status: Callable[[str], None]) -> float:
    """Drain, flush what every conversation still holds in its window and buffer (the workers' idle
    time is long, so nothing drained early) and drain again: a condition, the same in both runs.
    Returns the seconds it took."""
    t0 = time.monotonic()
    status("draining, then flushing windows and buffers")
    deployment.drain(timeout_s=1800, topics=DRAIN_TOPICS)
    fleet.stop_all()
    return time.monotonic() - t0


def run_reference(
    base: Settings, options: ChaosOptions, turns: Sequence[Turn], status: Callable[[str], None]
) -> tuple[dict[str, set[str]], float]:
    deployment = Deployment(base, options.workdir / "reference")
    fleet = Fleet(deployment, worker_env(options, base), status, REFERENCE_WORKERS)
    t0 = time.monotonic()
    try:
        status("reference: starting its worker")
        fleet.start_all()
        status(f"reference: producing {len(turns)} turns")
        deployment.produce(turns)
        finish(fleet, deployment, status)
    finally:
        fleet.stop_all()
    return store_ids(deployment, {t.tenant_id for t in turns}), time.monotonic() - t0


@dataclass
class ChaosServices:
    """What the run's deployment streams through: the shared broker, or with ``--cluster`` its own
    Kafka and Qdrant clusters; with ``--network-faults``, Toxiproxy in front of them."""

    base: Settings  # the deployment's base: its brokers
    env: dict[str, str] = field(default_factory=dict)  # the deployment's store
    nodes: Nodes | None = None
    faults: NetworkFaults | None = None

    @classmethod
    def start(
        cls, running: contextlib.ExitStack, base: Settings, options: ChaosOptions, status: Callable[[str], None]
    ) -> ChaosServices:
        services = cls(base)
        if options.network_faults:
            services.faults = faults = NetworkFaults(options.workdir, status)
            running.callback(faults.stop)
            status("chaos: starting Toxiproxy")
            faults.start()
            if options.llm:
                faults.proxy("llm", base.llm_port)
        if options.cluster:
            services.nodes = nodes = Nodes(options.workdir, status)
            status("chaos: starting a 3-broker Kafka cluster and a 3-node Qdrant cluster")
            running.callback(nodes.stop)
            nodes.start()
            services.base, services.env = nodes.settings(), nodes.env()
            if services.faults is not None:
                services.env["MEMSTREAM_QDRANT_URL"] = ",".join(
                    f"http://{services.faults.proxy(f'qdrant-{i}', port).address}"
                    for i, port in enumerate(nodes.qdrant_ports(), 1)
                )
        elif services.faults is not None:
            status("chaos: starting the run's broker behind its proxy")
            services.base = Settings(kafka_bootstrap=services.faults.start_broker())
        return services

    def worker_env(self) -> dict[str, str]:
        return self.faults.worker_env() if self.faults is not None else {}


class Failures:
    """The schedule carried out on the workers, the broker, the LLM server, the nodes and the proxies;
    what each kind of failure did, counted. ``base``: the shared services' settings (the broker and
    the LLM server restarted)."""

    def __init__(self, base: Settings, fleet: Fleet, services: ChaosServices):
        self.base, self.fleet, self.nodes, self.faults = base, fleet, services.nodes, services.faults
        self.counts: Counter[str] = Counter()
        self.restarting: threading.Thread | None = None  # the broker restart under way

    def _restart_broker(self) -> None:
        runtime.KAFKA.stop(self.base)
        runtime.KAFKA.start(self.base)

    def apply(self, event: Event) -> None:
        if event.action == "kill":
            self.fleet.kill(event.target, event.pause_s)
            self.counts["kills"] += 1
        elif event.action == "stop":
            self.counts["stops"] += self.fleet.stop(event.target, event.pause_s)
        elif event.action == "broker_restart":
            if self.faults is not None and self.faults.broker is not None:  # the run's own, behind the proxy
                self.faults.restart_broker()
            else:
                # On a thread: the restart takes tens of seconds, and the events due meanwhile happen on time.
                self.restarting = threading.Thread(target=self._restart_broker, name="chaos-broker-restart")
                self.restarting.start()
            self.counts["broker_restarts"] += 1
        elif event.action == "llm_restart":
            runtime.LOCAL_LLM.stop(self.base)
            runtime.LOCAL_LLM.start(self.base)
            self.counts["llm_restarts"] += 1
        elif event.action in ("broker_kill", "qdrant_kill") and self.nodes is not None:
            self.counts[event.action + "s"] += self.nodes.kill(event.action, int(event.target), event.pause_s)
        elif event.action == "group_kill":
            group = INGEST if event.target == "ingest" else STORE
            for name in [n for n, stages in self.fleet.workers.items() if stages == group]:
                self.fleet.kill(name, event.pause_s)
            self.counts["group_kills"] += 1
        elif event.action in NETWORK_FAULTS and self.faults is not None:
            self.faults.apply(event)

    def tend(self) -> None:
        """Toxics off, nodes and workers back, as each is due."""
        for part in (self.faults, self.nodes, self.fleet):
            if part is not None:
                part.tend()

    def settle(self) -> None:
        """The broker back, every toxic off, every node and worker back now."""
        if self.restarting is not None:
            self.restarting.join()
        for part in (self.faults, self.nodes, self.fleet):
            if part is not None:
                part.settle()


class Load:
    """The run's traffic, each on a thread of its own: the producer streams the turns over the first
    ``produce_share`` of the run, the asker asks until the run ends."""

    def __init__(
        self,
        settings: Settings,
        turns: Sequence[Turn],
        questions: Sequence[tuple[str, str, str]],
        options: ChaosOptions,
    ):
        self.settings, self.turns, self.questions, self.options = settings, turns, questions, options
        self.stopping = threading.Event()
        self.asked = Asked()
        self.sent = 0  # turns produced so far
        self.retries = 0  # sends the producer repeated (the broker was down)
        self.threads: list[threading.Thread] = []

    def start(self) -> float:
        """Both threads started; returns when (the run's start on the monotonic clock)."""
        started = time.monotonic()
        self.threads = [
            threading.Thread(target=self._produce, name="chaos-producer"),
            threading.Thread(
                target=ask_continuously,
                name="chaos-asker",
                args=(
                    self.settings,
                    self.questions,
                    self.options,
                    self.stopping,
                    self.asked,
                    self.options.llm,
                    started,
                ),
            ),
        ]
        for th in self.threads:
            th.start()
        return started

    def _produce(self) -> None:
        seconds = self.options.minutes * 60 * self.options.produce_share
        self.retries = produce(self.settings, self.turns, seconds, self.stopping, self._on_sent)

    def _on_sent(self, sent: int) -> None:
        self.sent = sent

    @property
    def producing(self) -> bool:
        return self.threads[0].is_alive()

    def stop(self) -> None:
        self.stopping.set()
        for th in self.threads:
            th.join(timeout=self.options.ask_timeout_s + 30)


def run_schedule(
    events: Sequence[Event],
    failures: Failures,
    load: Load,
    duration: float,
    status: Callable[[str], None],
    on_progress: Callable[[float, int], None],
) -> None:
    """The run with failures: the load from the start until the producer is done and ``duration`` is
    over, each event at its time, then everything back."""
    started = load.start()
    pending = list(events)
    try:
        while (elapsed := time.monotonic() - started) < duration or load.producing:
            on_progress(min(elapsed, duration), load.sent)
            while pending and pending[0].at_s <= elapsed:
                event = pending.pop(0)
                status(f"chaos: {event.action} {event.target}".strip())
                failures.apply(event)
            failures.tend()
            time.sleep(0.2)
        status("chaos over: every toxic off, every node and worker back")
        failures.settle()
    finally:
        load.stop()


def shares_restarted_services(options: ChaosOptions) -> bool:
    """Whether the schedule restarts a service the reference run uses: the broker (no ``cluster``, no
    ``network_faults``: those runs restart a broker of their own; nor a ``reference_bootstrap``) or
    the LLM server."""
    return options.llm or not (options.cluster or options.network_faults or options.reference_bootstrap)


def run_chaos_bench(
    options: ChaosOptions,
    *,
    status: Callable[[str], None] = lambda s: None,
    on_progress: Callable[[float, int], None] = lambda elapsed, sent: None,
) -> dict[str, Any]:
    base = Settings()
    turns, questions = chaos_turns(options)
    events = plan_events(options, list(options.workers))
    with contextlib.ExitStack() as running:
        running.enter_context(runtime.KAFKA.session(base))
        if options.llm:
            running.enter_context(runtime.LOCAL_LLM.session(base))
        # The reference runs while the run's services and workers start (its own workers, topics and
        # store). No failure may reach it: when the schedule restarts a service the reference uses (the
        # shared broker, the LLM server) the failures begin once it is done; on the run's own clusters
        # or proxied broker they begin at once.
        reference_run = running.enter_context(ThreadPoolExecutor(1, "chaos-reference"))
        reference_base = base
        if options.reference_bootstrap:
            reference_base = base.model_copy(update={"kafka_bootstrap": options.reference_bootstrap})
        reference = reference_run.submit(run_reference, reference_base, options, turns, status)
        services = ChaosServices.start(running, base, options, status)
        deployment = Deployment(services.base, options.workdir / "chaos", services.env)
        fleet = Fleet(deployment, worker_env(options, base) | services.worker_env(), status, options.workers)
        running.callback(fleet.stop_all)
        status("chaos: starting workers")
        fleet.start_all()
        if shares_restarted_services(options):
            reference.result()
        failures = Failures(base, fleet, services)
        load = Load(deployment.settings, turns, questions, options)
        run_schedule(events, failures, load, options.minutes * 60, status, on_progress)
        finish_s = finish(fleet, deployment, status)
        reference_ids, reference_s = reference.result()
        writes = memory_writes(v for _, v in deployment.read_topic(Topic.CARDS, timeout_s=60))
        dead = deployment.dead_letters()
        chaos_ids = store_ids(deployment, {t.tenant_id for t in turns})
        delivery = score_delivery(turns[: load.sent], chaos_ids, reference_ids, writes)
    counts, faults, asked = failures.counts, services.faults, load.asked
    return {
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
        "events": [asdict(e) for e in events],
        "kills": counts["kills"],
        "stops": counts["stops"],
        "rebalances": fleet.rebalances(),
        "broker_restarts": counts["broker_restarts"],
        "llm_restarts": counts["llm_restarts"],
        "cluster": options.cluster,
        "broker_kills": counts["broker_kills"],
        "qdrant_kills": counts["qdrant_kills"],
        "group_kills": counts["group_kills"],
        "network_faults": options.network_faults,
        "proxied": sorted(faults.proxies) if faults is not None else [],
        # toxics applied, by kind (an API refusal is logged, not counted)
        "toxics": {kind: (faults.applied[kind] if faults is not None else 0) for kind in NETWORK_FAULTS},
        "crashes": fleet.crashes,
        "turns": delivery.turns,
        "turns_planned": len(turns),
        "producer_retries": load.retries,
        "lost": delivery.lost,
        "duplicated": delivery.duplicated,
        "extra_points": delivery.extra_points,
        "missing_points": delivery.missing_points,
        "extra_by_collection": delivery.extra_by_collection,
        "missing_by_collection": delivery.missing_by_collection,
        "reference_points": {c: len(ids) for c, ids in reference_ids.items()},
        "dead_letters": len(dead),
        "dead_letter_reasons": dict(Counter(d.reason.split(":", 1)[0][:60] for d in dead)),
        "memory_writes": len(writes),
        "distinct_memory_writes": len({w.write_id for w in writes}),
        "queries": asked.queries,
        "answered": asked.ok,
        "error_replies": asked.error_replies,
        "send_errors": asked.send_errors,
        "unanswered": asked.unanswered,
        "errors": dict(asked.errors),
        "reply_p99_ms": asked.p99_ms(),
        "timeline": asked.timeline,
        "reference_s": round(reference_s, 1),
        "finish_s": round(finish_s, 1),
    }


def plot_timeline(result: dict[str, Any], out: Path) -> Path:
    """Reply latency of every question over the run, by outcome, with the failures marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    styles = {
        "ok": ("tab:green", "o"),
        "error_reply": ("tab:orange", "s"),
        "send_error": ("tab:red", "x"),
        "unanswered": ("black", "v"),
    }
    for outcome, (color, marker) in styles.items():
        points = [(t, ms) for t, ms, o in result["timeline"] if o == outcome]
        if points:
            ax.scatter(*zip(*points), s=10, color=color, marker=marker, label=f"{outcome} ({len(points)})")
    marks = {
        "kill": ("tab:red", ":"),
        "stop": ("tab:purple", "--"),
        "broker_restart": ("black", "-"),
        "llm_restart": ("tab:blue", "-."),
        "broker_kill": ("black", "-."),
        "qdrant_kill": ("tab:brown", "-."),
        "group_kill": ("tab:red", "-"),
        "latency": ("tab:olive", ":"),
        "reset_peer": ("tab:pink", ":"),
        "timeout": ("tab:gray", ":"),
        "bandwidth": ("tab:cyan", ":"),
    }
    for event in result["events"]:
        color, line = marks[event["action"]]
        ax.axvline(event["at_s"], color=color, linestyle=line, linewidth=0.8, alpha=0.6)
        if event["action"] in NETWORK_FAULTS:  # a toxic stays on for a while: its span, shaded
            ax.axvspan(event["at_s"], event["at_s"] + event["pause_s"], color=color, alpha=0.08)
    for action, (color, line) in marks.items():
        if any(e["action"] == action for e in result["events"]):
            ax.plot([], [], color=color, linestyle=line, label=action.replace("_", " "))
    ax.set_yscale("log")
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("reply latency (ms)")
    nodes = (
        f"{result.get('broker_kills', 0)} broker, {result.get('qdrant_kills', 0)} Qdrant node kill(s)"
        if result.get("cluster")
        else f"{result['broker_restarts']} broker restart(s)"
    )
    toxics = sum(result.get("toxics", {}).values())
    nodes += f", {toxics} network toxic(s)" if toxics else ""
    ax.set_title(
        f"chaos: {result['kills']} kills, {result['stops']} stops, {nodes}; lost {result['lost']}, "
        f"duplicated {result['duplicated']}, unanswered {result['unanswered']}"
    )
    ax.legend(loc="upper right", fontsize=7, ncol=2)
    return save_figure(plt, fig, out)
