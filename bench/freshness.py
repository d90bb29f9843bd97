"""``memstream bench freshness``: how long from producing a turn until it is retrievable, as a raw
turn (the fresh-turn path) and as a card (after its STM flush), on one worker and the broker.

Two runs on one deployment (extractive memories, evidence-only asks, the worker's STM settings):

- **packaged**: the packaged conversation streamed turn by turn, ``pace_s`` apart; every turn is a probe;
- **backlog**: a whole LoCoMo conversation but its last session produced at once, then the last
  session streamed turn by turn behind it; those turns are the probes (the same partition, so each
  waits behind the backlog).

A probe's clock starts just before its turn is produced. Its raw turn counts as retrievable when an
evidence-only ask with the turn's own text, scoped to the conversation, returns it as a ``turn``
(asked again every ``poll_s`` until it does; the figure is when that reply arrived, so it includes
one ask and up to one poll interval). Its card counts once a card citing it comes back in an
evidence-only ask with that card's own text, asked every ``card_poll_s`` once the bench has seen
the memory write with the card on ``memory.cards`` (a probe whose write has no card citing it is
counted as ``no_card``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.bench.deployment import Deployment
from memstream.bench.report import source_commit
from memstream.bench.scoring import percentile
from memstream.client import AsyncMemoryClient
from memstream.config import Settings
from memstream.datasets import LocomoSample, demo_conversation_path, load_locomo, locomo_turns
from memstream.schemas import MemoryWrite, Reply, Turn, decode_cards_message
from memstream.schemas.topics import Topic
from memstream.streams import runtime
from memstream.streams.kafka_options import client_options
from memstream.streams.lag import partitions_of

TENANT = "bench-fresh"
MAX_QUESTION = 4000  # a Query's longest question


@dataclass
class FreshnessOptions:
    data: Path | None = None  # LoCoMo JSON for the backlog run (None: no backlog run)
    sample: str | None = None  # its conversation (default: the first)
    pace_s: float = 1.0  # between streamed turns
    poll_s: float = 0.2  # between raw-turn asks for one probe
    card_poll_s: float = 1.0  # between rounds of card asks
    stm_idle_s: float | None = None  # None: the worker's default (MEMSTREAM_STM_IDLE_S)
    fresh_turns: bool = True  # False: the path before fresh turns (a baseline)
    raw_timeout_s: float = 120.0
    card_timeout_s: float = 300.0  # from produce
    indexed_timeout_s: float = 60.0  # from its card's write seen on the topic
    workdir: Path = Path(".data/bench/freshness")


@dataclass
class Probe:
    turn: Turn
    sent: float | None = None  # time.monotonic() just before it was produced
    raw_s: float | None = None  # produce -> the reply that showed it as a raw turn
    card_s: float | None = None  # produce -> the reply that showed a card citing it
    card_text: str | None = None  # a card citing it, on memory.cards: what its card check asks
    card_seen_at: float | None = None  # time.monotonic() when the bench saw that card's write
    no_card: bool = False  # its memory write has no card citing it
    flushed_first: bool = False  # its cards came back before it was seen as a raw turn
    raw_done: bool = False
    card_done: bool = False


@dataclass
class Figures:
    n: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None
    missed: int  # not seen within the timeout
    values_s: list[float] = field(default_factory=list)


def figures(values: Sequence[float | None], missed: int) -> Figures:
    seen = [v for v in values if v is not None]
    if not seen:
        return Figures(0, None, None, None, missed)
    return Figures(
        n=len(seen),
        p50_s=round(percentile(seen, 50), 2),
        p99_s=round(percentile(seen, 99), 2),
        max_s=round(max(seen), 2),
        missed=missed,
        values_s=[round(v, 3) for v in seen],
    )


def cites(reply: Reply, turn_id: str, kind: str) -> bool:
    return any(e.kind == kind and turn_id in e.turn_ids for e in reply.evidence)


class Watch:
    """The probes of one run and the asks that time them, over one client."""

    def __init__(
        self,
        client: AsyncMemoryClient,
        probes: list[Probe],
        options: FreshnessOptions,
        on_resolved: Callable[[], None],
    ):
        self.client, self.probes, self.o, self.on_resolved = client, probes, options, on_resolved

    async def ask(self, probe: Probe, question: str) -> Reply:
        return await self.client.ask(
            question[:MAX_QUESTION],
            tenant_id=probe.turn.tenant_id,
            conversation_id=probe.turn.conversation_id,
            answer=False,
            timeout_s=30,
            raise_on_error=False,
        )

    def resolve(self, probe: Probe, what: str) -> None:
        setattr(probe, f"{what}_done", True)
        self.on_resolved()

    async def raw_turns(self) -> None:
        """The probes in order (a later turn of the partition is never indexed before an earlier one):
        ask for the first one not yet seen until it comes back as a raw turn, or its time is up."""
        for probe in self.probes:
            if not self.o.fresh_turns:
                self.resolve(probe, "raw")
                continue
            while probe.sent is None:
                await asyncio.sleep(self.o.poll_s)
            while not probe.raw_done:
                reply = await self.ask(probe, probe.turn.text)
                age = time.monotonic() - probe.sent
                if cites(reply, probe.turn.turn_id, "turn"):
                    probe.raw_s = age
                    self.resolve(probe, "raw")
                elif cites(reply, probe.turn.turn_id, "card"):  # flushed before this ask came to it
                    probe.flushed_first = True
                    self.resolve(probe, "raw")
                elif age > self.o.raw_timeout_s:
                    self.resolve(probe, "raw")
                else:
                    await asyncio.sleep(self.o.poll_s)

    async def cards(self) -> None:
        """Every ``card_poll_s``: ask for each probe whose card is on the topic and not yet seen; a
        probe's time is up ``card_timeout_s`` after it was produced, or ``indexed_timeout_s`` after
        its card was seen on the topic."""
        while not all(p.card_done for p in self.probes):
            for probe in self.probes:
                if probe.card_done or probe.sent is None:
                    continue
                now = time.monotonic()
                late = now - probe.sent > self.o.card_timeout_s or (
                    probe.card_seen_at is not None and now - probe.card_seen_at > self.o.indexed_timeout_s
                )
                if probe.no_card or late:
                    self.resolve(probe, "card")
                elif probe.card_text and cites(await self.ask(probe, probe.card_text), probe.turn.turn_id, "card"):
                    probe.card_s = time.monotonic() - probe.sent
                    self.resolve(probe, "card")
            await asyncio.sleep(self.o.card_poll_s)

    def saw(self, write: MemoryWrite) -> None:
        """A memory write on the topic: its probes now have a card to look for, or none."""
        text_citing: dict[str, str] = {}
        for card in write.cards:
            for turn_id in card.provenance.turn_ids:
                text_citing.setdefault(turn_id, card.content)
        by_id = {(p.turn.conversation_id, p.turn.turn_id): p for p in self.probes}
        for source in write.source_turns:
            probe = by_id.get((write.conversation_id, source.turn_id))
            if probe is not None and probe.card_text is None:
                probe.card_text = text_citing.get(source.turn_id)
                probe.card_seen_at = time.monotonic()
                probe.no_card = probe.card_text is None


async def tail_writes(settings: Settings, on_write: Callable[[MemoryWrite], None], stop: asyncio.Event) -> None:
    """Every memory write on ``memory.cards`` from its beginning, until ``stop``."""
    name = settings.topic(Topic.CARDS)
    consumer = AIOKafkaConsumer(
        **client_options(settings), enable_auto_commit=False, fetch_max_bytes=settings.max_message_bytes
    )
    await consumer.start()
    try:
        tps = [TopicPartition(name, p) for p in (await partitions_of(settings, name))[name]]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=300)
            for records in batch.values():
                for record in records:
                    message = decode_cards_message(record.value)
                    if isinstance(message, MemoryWrite):
                        on_write(message)
    finally:
        await consumer.stop()


async def stream(client: AsyncMemoryClient, probes: list[Probe], pace_s: float) -> None:
    for probe in probes:
        started = time.monotonic()
        probe.sent = started
        await client.remember([probe.turn])
        await asyncio.sleep(max(0.0, pace_s - (time.monotonic() - started)))


async def measure(
    settings: Settings,
    backlog: list[Turn],
    probes: list[Probe],
    options: FreshnessOptions,
    *,
    status: Callable[[str], None],
    on_resolved: Callable[[], None],
) -> dict[str, Any]:
    """Produce the backlog at once, stream the probes behind it, and time each probe."""
    stop = asyncio.Event()
    async with AsyncMemoryClient(settings) as client:
        watch = Watch(client, probes, options, on_resolved)
        writes = asyncio.create_task(tail_writes(settings, watch.saw, stop))
        t0 = time.monotonic()
        if backlog:
            status(f"producing a backlog of {len(backlog)} turns at once")
            await client.remember(backlog)
        produced_backlog_s = time.monotonic() - t0
        status(f"streaming {len(probes)} turns, {options.pace_s:g}s apart, and asking for each")
        try:
            await asyncio.gather(stream(client, probes, options.pace_s), watch.raw_turns(), watch.cards())
        finally:
            stop.set()
            await writes
    raw = [p.raw_s for p in probes]
    cards = [p.card_s for p in probes if not p.no_card]
    first = [min((v for v in (p.raw_s, p.card_s) if v is not None), default=None) for p in probes]
    return {
        "backlog_turns": len(backlog),
        "backlog_produced_s": round(produced_backlog_s, 2),
        "probes": len(probes),
        "raw_turn": {
            **asdict(figures(raw, sum(1 for p in probes if p.raw_s is None and not p.flushed_first))),
            "flushed_first": sum(p.flushed_first for p in probes),
        }
        if options.fresh_turns
        else None,
        "card": {
            **asdict(figures(cards, sum(1 for p in probes if p.card_s is None and not p.no_card))),
            "no_card": sum(p.no_card for p in probes),
        },
        "first_retrievable": asdict(figures(first, sum(v is None for v in first))),
        "turns": [
            {"turn_id": p.turn.turn_id, "raw_s": _round(p.raw_s), "card_s": _round(p.card_s), "no_card": p.no_card}
            for p in probes
        ],
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def packaged_run() -> tuple[list[Turn], list[Turn]]:
    """The packaged conversation, every turn streamed (no backlog)."""
    sample = load_locomo(demo_conversation_path())[0]
    return [], list(locomo_turns(sample, tenant_id=TENANT, conversation_id="packaged"))


def backlog_run(data: Path, sample_id: str | None) -> tuple[list[Turn], list[Turn], LocomoSample]:
    """A LoCoMo conversation: every session but the last as the backlog, the last streamed behind it."""
    samples = load_locomo(data)
    sample = next((s for s in samples if s.sample_id == sample_id), None) if sample_id else samples[0]
    if sample is None:
        raise ValueError(f"no conversation {sample_id!r} in {data}")
    turns = list(locomo_turns(sample, tenant_id=TENANT, conversation_id=f"backlog-{sample.sample_id}"))
    last = turns[-1].session_id
    return [t for t in turns if t.session_id != last], [t for t in turns if t.session_id == last], sample


def probe_count(options: FreshnessOptions) -> int:
    """Probes over both runs (for a progress bar: each resolves twice, raw turn and card)."""
    n = len(packaged_run()[1])
    if options.data is not None:
        n += len(backlog_run(options.data, options.sample)[1])
    return n


def run_freshness_bench(
    options: FreshnessOptions,
    *,
    status: Callable[[str], None] = lambda s: None,
    on_resolved: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    base = Settings()
    env = {"MEMSTREAM_EXTRACT_MODE": "extractive", "MEMSTREAM_FRESH_TURNS": str(options.fresh_turns).lower()}
    if options.stm_idle_s is not None:
        env["MEMSTREAM_STM_IDLE_S"] = str(options.stm_idle_s)
    runs: dict[str, Any] = {}
    folder = options.workdir / "deployment"
    shutil.rmtree(folder, ignore_errors=True)  # an earlier run's memories would answer for these turns
    with runtime.KAFKA.session(base):
        dep = Deployment(base, folder, env)
        try:
            status("starting a worker (all stages)")
            dep.start_worker("freshness")
            backlog, streamed = packaged_run()
            runs["packaged"] = asyncio.run(
                measure(
                    dep.settings, backlog, [Probe(t) for t in streamed], options, status=status, on_resolved=on_resolved
                )
            )
            if options.data is not None:
                backlog, streamed, sample = backlog_run(options.data, options.sample)
                runs["backlog"] = {
                    "data": str(options.data),
                    "sample": sample.sample_id,
                    **asyncio.run(
                        measure(
                            dep.settings,
                            backlog,
                            [Probe(t) for t in streamed],
                            options,
                            status=status,
                            on_resolved=on_resolved,
                        )
                    ),
                }
        finally:
            with contextlib.suppress(Exception):
                dep.stop_workers()
    s = dep.settings
    return {
        "bench": "freshness",
        "commit": source_commit(),
        "machine": {"cpus": os.cpu_count()},
        "settings": {
            "fresh_turns": s.fresh_turns,
            "fresh_turns_k": s.fresh_turns_k,
            "stm_idle_s": s.stm_idle_s,
            "stm_tick_s": s.stm_tick_s,
            "stm_tokens": s.stm_tokens,
            "extract_mode": "extractive",
        },
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
        "runs": runs,
    }
