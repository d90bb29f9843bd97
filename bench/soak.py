"""``memstream bench soak``: state that stays bounded (issue 46, part 5). One worker (all stages,
extractive) on a broker of the run's own takes turns at a steady rate for ``minutes``: many short
conversations of a few turns each (each goes quiet after its last turn; once the pool is used up,
conversations come back as a new session) and a few long ones that never stop. Per-conversation table
entries are evicted after ``evict_idle_s`` (set short through the worker's environment, so eviction
happens many times within the run), and the topics keep records ``retention_s`` (so the changelogs
are compacted within the run too, as they are within a week in production).

Sampled every ``sample_s``: the worker's RSS (its process tree), its table folder on disk, the
changelog topics' bytes in the broker's data folder, the consumer lag, the live and evicted table
entries (the worker's metrics). Timed throughout: fresh turns (a probe turn in a conversation of its
own every ``probe_s``, from produce until an evidence-only ask with its text returns it) and replies
(an evidence-only question every ``question_s``). Each figure is compared between the first and the
last sixth of the run (10 minutes of 60): flat when the last is within ``flat_ratio`` of the first,
or within a small absolute tolerance."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from memstream.bench import clusters
from memstream.bench.deploy import worker_samples
from memstream.bench.deployment import Deployment
from memstream.bench.report import source_commit
from memstream.bench.scoring import percentile
from memstream.client import AsyncMemoryClient
from memstream.config import Settings, absolute_path
from memstream.schemas import Reply, Turn
from memstream.schemas.topics import DRAIN_TOPICS
from memstream.streams.lag import topics_lag

TENANT = "soak"
TABLE_STAGES = ("segment", "stm", "consolidate")
KAFKA_BASE_PORT = 39092
QDRANT_BASE_PORT = 36333
# What counts as flat besides the ratio: differences this small are noise, whatever the ratio.
TOLERANCE = {
    "rss_mb": 64.0,
    "table_dir_mb": 1.0,
    "changelog_mb": 4.0,
    "lag": 200.0,
    "live_entries": 200.0,
    "fresh_turn_p99_s": 0.5,
    "reply_p99_s": 0.5,
}
NAMES = ["Ana", "Ben", "Caro", "Dev", "Eli", "Faye", "Gus", "Hana", "Ivo", "June", "Kai", "Lena", "Milo", "Nora"]
THINGS = ["a bike", "the cello", "a puppy", "tomatoes", "a kayak", "chess", "pottery", "a telescope", "bees", "tea"]
PLACES = ["Porto", "Oslo", "the library", "the market", "Lisbon", "the lake", "Kyoto", "the park", "Lima", "Bern"]
VERBS = ["bought", "started", "found", "lost", "painted", "fixed", "sold", "borrowed", "saw", "planted"]


@dataclass
class SoakOptions:
    minutes: float = 60.0
    rate: float = 8.0  # turns per second, every conversation together (probes aside): 2/3 of what 2 cores kept up with
    conversations: int = 20_000  # short ones in the pool; used up: they come back, a new session each
    turns_min: int = 3  # turns of a short conversation
    turns_max: int = 5
    active: int = 40  # short conversations speaking at once (each turn goes to one of them)
    long_conversations: int = 4  # speaking throughout
    long_share: float = 0.1  # of the turns
    evict_idle_s: float = 180.0
    stm_idle_s: float = 15.0
    sleep_idle_s: float = 60.0
    retention_s: float = 600.0  # the topics' retention: changelogs compacted at least this often
    sample_s: float = 15.0
    probe_s: float = 10.0
    question_s: float = 5.0
    probe_timeout_s: float = 120.0
    flat_ratio: float = 1.25
    store: str = "server"  # a Qdrant node of the run's own (the worker's RSS without the memories), or "embedded"
    seed: int = 0
    workdir: Path = Path(".data/bench/soak")


def sentence(rng: random.Random, n: int) -> str:
    name, thing, place, verb = rng.choice(NAMES), rng.choice(THINGS), rng.choice(PLACES), rng.choice(VERBS)
    return f"{name} {verb} {thing} in {place} on day {n % 365}, and it cost {rng.randint(2, 900)} euros."


@dataclass
class Workload:
    """The turns of the run in order: each goes to one of the ``active`` short conversations (one that
    said all its turns is replaced by the next of the pool) or, ``long_share`` of them, to a long one."""

    o: SoakOptions
    rng: random.Random = field(init=False)
    started: int = 0  # short conversations started (past the pool: returns)
    turns: int = 0
    speaking: list[list[Any]] = field(default_factory=list)  # [conversation id, session, turns left, said]
    long_said: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.o.seed)

    def _start(self) -> list[Any]:
        index = self.started % self.o.conversations
        session = self.started // self.o.conversations + 1
        self.started += 1
        return [f"c{index:06d}", session, self.rng.randint(self.o.turns_min, self.o.turns_max), 0]

    def next_turn(self) -> Turn:
        self.turns += 1
        if self.o.long_conversations and self.rng.random() < self.o.long_share:
            conversation = f"long{self.rng.randrange(self.o.long_conversations)}"
            said = self.long_said.get(conversation, 0)
            self.long_said[conversation] = said + 1
            return self._turn(conversation, 1, said)
        while len(self.speaking) < self.o.active:
            self.speaking.append(self._start())
        slot = self.rng.randrange(len(self.speaking))
        conversation, session, left, said = self.speaking[slot]
        turn = self._turn(conversation, session, said, last=left == 1)
        if left == 1:
            self.speaking[slot] = self._start()
        else:
            self.speaking[slot] = [conversation, session, left - 1, said + 1]
        return turn

    def _turn(self, conversation: str, session: int, said: int, *, last: bool = False) -> Turn:
        return Turn(
            tenant_id=TENANT,
            conversation_id=conversation,
            session_id=f"S{session}",
            turn_id=f"s{session}-t{said}",
            speaker=NAMES[(said + len(conversation)) % 2],
            text=sentence(self.rng, self.turns),
            event_time=datetime.now(timezone.utc),
            last_in_session=last,
        )


def folder_bytes(path: Path, *, name_has: str = "", suffix: str = "") -> int:
    """Bytes of the files under ``path`` (only in its entries whose name holds ``name_has``, only files
    ending in ``suffix``): their length, not the space the broker preallocates for its indexes."""
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(path):
            if name_has and name_has not in entry.name:
                continue
            if entry.is_dir(follow_symlinks=False):
                total += folder_bytes(Path(entry.path), suffix=suffix)
            elif entry.is_file(follow_symlinks=False) and entry.name.endswith(suffix):
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
    return total


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and its children (the supervisor and its worker)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total


def table_metrics(port: int | None) -> dict[str, dict[str, float]]:
    """The worker's live and evicted table entries per stage (zeros while its endpoint does not answer)."""
    live = dict.fromkeys(TABLE_STAGES, 0.0)
    evicted = dict.fromkeys(TABLE_STAGES, 0.0)
    with contextlib.suppress(OSError):
        for s in worker_samples(port):  # type: ignore[arg-type]
            stage = s.labels.get("stage", "")
            if s.name == "memstream_state_entries" and stage in live:
                live[stage] = s.value
            elif s.name == "memstream_state_evicted_total" and stage in evicted:
                evicted[stage] = s.value
    return {"live": live, "evicted": evicted}


@dataclass
class Timed:
    at_s: float  # since the start of the run, when it was sent
    seconds: float | None  # None: no answer in time (or an error reply)


def cites_turn(reply: Reply, turn_id: str) -> bool:
    return any(turn_id in e.turn_ids for e in reply.evidence)


class Soak:
    """The run's tasks over one deployment: turns at the rate, probes, questions, samples."""

    def __init__(
        self,
        o: SoakOptions,
        dep: Deployment,
        broker_data: Path,
        status: Callable[[str], None],
        store_pid: int | None = None,
    ):
        self.o, self.dep, self.broker_data, self.status = o, dep, broker_data, status
        self.store_pid = store_pid  # the Qdrant node's: its memory grows with the memories, by design
        self.workload = Workload(o)
        self.samples: list[dict[str, Any]] = []
        self.fresh: list[Timed] = []
        self.replies: list[Timed] = []
        self.reply_errors = 0
        self.t0 = 0.0
        self.end = 0.0
        self.recent: list[Turn] = []  # the last turns sent: what questions ask about

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    async def produce(self, client: AsyncMemoryClient) -> None:
        """Turns at ``rate``, sent in a batch every 0.2 s (those due by then)."""
        sent = 0
        while time.monotonic() < self.end:
            due = int(self.elapsed() * self.o.rate) - sent
            if due > 0:
                batch = [self.workload.next_turn() for _ in range(due)]
                await client.remember(batch)
                sent += due
                self.recent = (self.recent + batch)[-200:]
            await asyncio.sleep(0.2)

    async def probe(self, client: AsyncMemoryClient, n: int) -> None:
        """A turn in a conversation of its own; the time until an ask with its text returns it."""
        rng = random.Random(n)
        turn = Turn(
            tenant_id=TENANT,
            conversation_id=f"probe{n:05d}",
            session_id="S1",
            turn_id="p0",
            speaker="Probe",
            text=f"Probe {n}: {sentence(rng, n)}",
            event_time=datetime.now(timezone.utc),
        )
        at = self.elapsed()
        sent = time.monotonic()
        await client.remember([turn])
        while time.monotonic() - sent < self.o.probe_timeout_s:
            reply = await client.ask(
                turn.text, tenant_id=TENANT, conversation_id=turn.conversation_id, answer=False, raise_on_error=False
            )
            if cites_turn(reply, turn.turn_id):
                self.fresh.append(Timed(at, time.monotonic() - sent))
                return
            await asyncio.sleep(0.25)
        self.fresh.append(Timed(at, None))

    async def probes(self, client: AsyncMemoryClient) -> None:
        tasks, n = [], 0
        while time.monotonic() < self.end:
            tasks.append(asyncio.create_task(self.probe(client, n)))
            n += 1
            await asyncio.sleep(self.o.probe_s)
        await asyncio.gather(*tasks)

    async def questions(self, client: AsyncMemoryClient) -> None:
        rng = random.Random(self.o.seed + 1)
        while time.monotonic() < self.end:
            if self.recent:
                turn = rng.choice(self.recent)
                question = f"What did {turn.speaker} say about {turn.text.split(' in ')[0].split()[-1]}?"
                at, sent = self.elapsed(), time.monotonic()
                reply = await client.ask(
                    question, tenant_id=TENANT, conversation_id=turn.conversation_id, answer=False, raise_on_error=False
                )
                ok = reply.error is None
                self.reply_errors += not ok
                self.replies.append(Timed(at, time.monotonic() - sent if ok else None))
            await asyncio.sleep(self.o.question_s)

    async def sample(self) -> dict[str, Any]:
        worker = self.dep.workers[0]
        settings = self.dep.settings
        rss = await asyncio.to_thread(tree_rss_bytes, worker.process.pid)
        table_dir = await asyncio.to_thread(folder_bytes, settings.data_dir / "workers")
        changelog = await asyncio.to_thread(folder_bytes, self.broker_data, name_has="-changelog-", suffix=".log")
        lag = await topics_lag(settings, self.dep.reading(DRAIN_TOPICS))
        tables = await asyncio.to_thread(table_metrics, worker.metrics_port)
        store_rss = await asyncio.to_thread(tree_rss_bytes, self.store_pid) if self.store_pid else 0
        return {
            "t_s": round(self.elapsed(), 1),
            "turns_sent": self.workload.turns,
            "conversations_started": self.workload.started,
            "rss_mb": round(rss / 2**20, 1),
            "store_rss_mb": round(store_rss / 2**20, 1),
            "table_dir_mb": round(table_dir / 2**20, 3),
            "changelog_mb": round(changelog / 2**20, 3),
            "lag": sum(lag.values()),
            "live_entries": sum(tables["live"].values()),
            "live_by_stage": tables["live"],
            "evicted_by_stage": tables["evicted"],
        }

    async def sampler(self) -> None:
        while time.monotonic() < self.end:
            s = await self.sample()
            self.samples.append(s)
            self.status(
                f"{s['t_s'] / 60:.1f} min: {s['turns_sent']} turns, RSS {s['rss_mb']:.0f} MB, changelog "
                f"{s['changelog_mb']:.1f} MB, lag {s['lag']}, live {s['live_entries']:.0f}, evicted "
                f"{sum(s['evicted_by_stage'].values()):.0f}"
            )
            await asyncio.sleep(self.o.sample_s)

    async def run(self) -> None:
        self.t0 = time.monotonic()
        self.end = self.t0 + self.o.minutes * 60
        async with AsyncMemoryClient(self.dep.settings) as client:
            await asyncio.gather(self.produce(client), self.probes(client), self.questions(client), self.sampler())
        self.samples.append(await self.sample())  # the end


def p99(values: list[float]) -> float | None:
    return round(percentile(values, 99), 3) if values else None


def windows(total_s: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """The first and the last sixth of the run (10 minutes of 60), at most 10 minutes each."""
    width = min(600.0, total_s / 6)
    return (0.0, width), (total_s - width, total_s)


def flat(first: float | None, last: float | None, name: str, ratio: float) -> bool | None:
    if first is None or last is None:
        return None
    return last <= first * ratio or last - first <= TOLERANCE[name]


def compare(samples: list[dict[str, Any]], fresh: list[Timed], replies: list[Timed], total_s: float, ratio: float):
    """Each figure in the first and the last window (gauges: their highest sample; latencies: p99 of
    what was sent in the window), and whether it stayed flat."""
    (a0, a1), (b0, b1) = windows(total_s)
    figures: dict[str, Any] = {}
    for name in ("rss_mb", "table_dir_mb", "changelog_mb", "lag", "live_entries"):
        first = max((s[name] for s in samples if a0 <= s["t_s"] <= a1), default=None)
        last = max((s[name] for s in samples if b0 <= s["t_s"] <= b1), default=None)
        figures[name] = {"first": first, "last": last, "flat": flat(first, last, name, ratio)}
    for name, timed in (("fresh_turn_p99_s", fresh), ("reply_p99_s", replies)):
        first_values = [t.seconds for t in timed if a0 <= t.at_s < a1 and t.seconds is not None]
        last_values = [t.seconds for t in timed if b0 <= t.at_s <= b1 and t.seconds is not None]
        first, last = p99(first_values), p99(last_values)
        figures[name] = {
            "first": first,
            "last": last,
            "n_first": len(first_values),
            "n_last": len(last_values),
            "missed_first": sum(1 for t in timed if a0 <= t.at_s < a1 and t.seconds is None),
            "missed_last": sum(1 for t in timed if b0 <= t.at_s <= b1 and t.seconds is None),
            "flat": flat(first, last, name, ratio),
        }
    return {"first_window_s": [a0, round(a1, 1)], "last_window_s": [round(b0, 1), round(b1, 1)], **figures}


def worker_env(o: SoakOptions) -> dict[str, str]:
    return {
        "MEMSTREAM_EXTRACT_MODE": "extractive",
        "MEMSTREAM_STM_IDLE_S": str(o.stm_idle_s),
        "MEMSTREAM_SLEEP_IDLE_S": str(o.sleep_idle_s),
        "MEMSTREAM_STATE_EVICT_IDLE_S": str(o.evict_idle_s),
        "MEMSTREAM_TOPIC_RETENTION_S": str(o.retention_s),
    }


@contextlib.contextmanager
def own_node(kind: str, workdir: Path) -> Iterator[clusters.LocalCluster]:
    """A single Kafka broker or Qdrant node of the run's own, fresh, on free ports: the changelog
    bytes are the run's only, and the store's memory is not the worker's."""
    data = absolute_path(workdir / kind)
    if kind == "kafka":
        port = clusters.free_base_port(KAFKA_BASE_PORT, [0, 1], step=10)
    else:
        port = clusters.free_base_port(QDRANT_BASE_PORT, [0, 1, 2])
    node = clusters.LocalCluster(kind, data, port, 1)  # type: ignore[arg-type]
    with contextlib.suppress(RuntimeError):  # one an interrupted run left running
        node.stop()
    shutil.rmtree(data, ignore_errors=True)
    node.start()
    try:
        yield node
    finally:
        node.stop()


def broker_log_dir(broker: clusters.LocalCluster) -> Path:
    """The broker's log.dirs: kafka.sh keeps a single broker's in ``data`` (several: ``node-N/data``)."""
    single = broker.data / "data"
    return single if broker.size == 1 and single.is_dir() else broker.data_dirs()[0]


def run_soak(o: SoakOptions, *, status: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    if o.store not in ("server", "embedded"):
        raise ValueError(f"store is server or embedded, not {o.store!r}")
    if o.evict_idle_s < max(o.stm_idle_s, o.sleep_idle_s):
        raise ValueError("the eviction idle time must be at least the STM and sleep idle times")
    commit = source_commit()  # the code the worker runs: taken at the start (commits may land meanwhile)
    workdir = absolute_path(o.workdir)
    folder = workdir / "deployment"
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.ExitStack() as running:
        status("starting the run's own broker" + (" and Qdrant node" if o.store == "server" else ""))
        broker = running.enter_context(own_node("kafka", workdir))
        env, store_pid = worker_env(o), None
        if o.store == "server":
            node = running.enter_context(own_node("qdrant", workdir))
            env["MEMSTREAM_QDRANT_URL"] = node.address
            store_pid = node.pids()[0]
        dep = Deployment(Settings(kafka_bootstrap=broker.address), folder, env)
        running.callback(dep.stop_workers)
        status("starting a worker (all stages, extractive)")
        dep.start_worker("soak")
        soak = Soak(o, dep, broker_log_dir(broker), status, store_pid)
        asyncio.run(soak.run())
    total_s = o.minutes * 60
    last = soak.samples[-1]
    evicted = last["evicted_by_stage"]
    return {
        "bench": "soak",
        "commit": commit,
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(o).items()},
        "turns": soak.workload.turns,
        "conversations_started": soak.workload.started,
        "conversations_returned": max(0, soak.workload.started - o.conversations),
        "probes": len(soak.fresh),
        "questions": len(soak.replies),
        "reply_errors": soak.reply_errors,
        "evicted_entries": evicted,
        "evicted_total": sum(evicted.values()),
        "live_entries_max": max(s["live_entries"] for s in soak.samples),
        "live_entries_end": last["live_entries"],
        "flatness": compare(soak.samples, soak.fresh, soak.replies, total_s, o.flat_ratio),
        "samples": soak.samples,
        "fresh_turn_s": [[round(t.at_s, 1), None if t.seconds is None else round(t.seconds, 3)] for t in soak.fresh],
        "reply_s": [[round(t.at_s, 1), None if t.seconds is None else round(t.seconds, 3)] for t in soak.replies],
    }


def plot_soak(result: dict[str, Any], out: Path) -> Path:
    """The sampled series and the latencies over the run, the compared windows shaded."""
    from memstream.bench.plots import pyplot, save_figure

    plt = pyplot()
    panels = [
        ("rss_mb", "worker RSS (MB)"),
        ("store_rss_mb", "Qdrant RSS (MB)"),
        ("changelog_mb", "changelog bytes (MB)"),
        ("table_dir_mb", "table folder (MB)"),
        ("live_entries", "live table entries"),
        ("lag", "consumer lag (messages)"),
    ]
    fig, axes = plt.subplots(len(panels) + 1, 1, figsize=(9, 2.2 * (len(panels) + 1)), sharex=True)
    minutes = [s["t_s"] / 60 for s in result["samples"]]
    first, last = result["flatness"]["first_window_s"], result["flatness"]["last_window_s"]
    for ax, (key, label) in zip(axes, panels):
        ax.plot(minutes, [s[key] for s in result["samples"]])
        ax.set_ylabel(label, fontsize=8)
    ax = axes[-1]
    for key, label in (("fresh_turn_s", "fresh turn"), ("reply_s", "reply")):
        points = [(at / 60, s) for at, s in result[key] if s is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], ".", markersize=3, label=label)
    ax.set_ylabel("latency (s)", fontsize=8)
    ax.legend(fontsize=8)
    ax.set_xlabel("minutes")
    for ax in axes:
        ax.axvspan(first[0] / 60, first[1] / 60, color="grey", alpha=0.12)
        ax.axvspan(last[0] / 60, last[1] / 60, color="grey", alpha=0.12)
    fig.suptitle(f"soak: {result['turns']} turns, {result['evicted_total']:.0f} entries evicted", fontsize=10)
    return save_figure(plt, fig, out)
