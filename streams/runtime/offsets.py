"""Offset commits that cover only messages a stage finished, and messages handled in order.

faust commits up to the highest run of offsets it saw acknowledged, but it acknowledges events no
handler finished: ones its fetcher dropped while the flow was suspended (around a rebalance or table
recovery), and ones whose handler a stop cancelled. On a partition with no committed offset yet it
does not even check that the run starts at the head. It then hands over what follows the dropped
messages, so a session's last turn could be segmented before the turns it ends. Here a partition's
commit advances only over offsets every stage reading it finished, contiguously from the group's
position read from the broker; and a stage handles a partition's messages strictly in offset order:
a message past one it has not had makes the partition seek back to that one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Iterable, Mapping, NamedTuple

from aiokafka import TopicPartition

from . import faust_compat

log = logging.getLogger(__name__)


class Partition(NamedTuple):
    topic: str
    partition: int


class CommitTracker:
    """Per partition: the group's position, and which stages finished which offsets beyond it.

    A topic can feed several stages (``cards`` feeds index and consolidation): an offset counts once
    every stage subscribed to its topic finished it. Each stage also gets the offset it must handle
    next, so a message handed over out of order is noticed instead of processed.
    """

    def __init__(self) -> None:
        self._stages: dict[str, set[str]] = {}  # topic -> stages reading it
        self._position: dict[Partition, int] = {}
        self._done: dict[Partition, dict[int, set[str]]] = {}
        self._next: dict[tuple[str, Partition], int] = {}
        # The offset a stage takes next: past _next while messages it took are still in progress.
        self._taken: dict[tuple[str, Partition], int] = {}

    def subscribe(self, stage: str, topic: str) -> None:
        self._stages.setdefault(topic, set()).add(stage)

    def stages(self, topic: str) -> set[str]:
        return self._stages.get(topic, set())

    def reads(self, topic: str) -> bool:
        return topic in self._stages

    def has_position(self, tp: tuple[str, int]) -> bool:
        return Partition(*tp) in self._position

    def position(self, tp: tuple[str, int]) -> int | None:
        return self._position.get(Partition(*tp))

    def next_for(self, stage: str, topic: str, partition: int) -> int | None:
        """The offset ``stage`` handles next on this partition (None: the position is not read yet)."""
        return self._next.get((stage, Partition(topic, partition)))

    def next_to_take(self, stage: str, topic: str, partition: int) -> int | None:
        """The offset ``stage`` takes next on this partition: past the ones it has in progress."""
        key = (stage, Partition(topic, partition))
        done = self._next.get(key)
        return None if done is None else max(done, self._taken.get(key, done))

    def took(self, stage: str, topic: str, partition: int, offset: int) -> None:
        """``stage`` has the message in progress: the next one it takes is the one after."""
        key = (stage, Partition(topic, partition))
        self._taken[key] = max(offset + 1, self._taken.get(key, 0))

    def left_unfinished(self, stage: str, topic: str, partition: int, offset: int) -> None:
        """``stage`` gave the message up unfinished: it must be taken again when it comes again (the
        messages after it that did finish are then redeliveries)."""
        key = (stage, Partition(topic, partition))
        if key in self._taken:
            self._taken[key] = min(self._taken[key], offset)

    def finished(self, stage: str, topic: str, partition: int, offset: int) -> None:
        tp = Partition(topic, partition)
        if offset < self._position.get(tp, 0):
            return
        done = self._done.setdefault(tp, {})
        done.setdefault(offset, set()).add(stage)
        if self._next.get((stage, tp)) == offset:
            self._advance(stage, tp, offset)

    def without_position(self) -> list[Partition]:
        """Partitions with finished offsets whose starting position is not known yet."""
        return [tp for tp, done in self._done.items() if done and tp not in self._position]

    def start_at(self, tp: Partition, position: int) -> None:
        """The group's position for ``tp``: its committed offset, or the log start when it has none."""
        tp = Partition(*tp)
        self._position[tp] = max(position, self._position.get(tp, 0))
        for stage in self._stages.get(tp.topic, ()):
            self._advance(stage, tp, max(self._position[tp], self._next.get((stage, tp), 0)))
        self._prune(tp)

    def committable(self) -> dict[Partition, int]:
        """Each partition every reader of which finished offsets past its position: the new position."""
        out = {}
        for tp, position in self._position.items():
            ends = [self._next.get((stage, tp), position) for stage in self._stages.get(tp.topic, ())]
            end = min(ends, default=position)
            if end > position:
                out[tp] = end
        return out

    def committed(self, positions: Mapping[Partition, int]) -> None:
        for tp, position in positions.items():
            tp = Partition(*tp)
            self._position[tp] = max(position, self._position.get(tp, 0))
            self._prune(tp)

    def forget(self, tps: Iterable[Any]) -> None:
        """Partitions this worker no longer owns: their position is read again if they come back."""
        for topic, partition in tps:
            tp = Partition(topic, partition)
            self._position.pop(tp, None)
            self._done.pop(tp, None)
            for stage in self._stages.get(topic, ()):
                self._next.pop((stage, tp), None)
                self._taken.pop((stage, tp), None)

    def _advance(self, stage: str, tp: Partition, offset: int) -> None:
        done = self._done.get(tp, {})
        while stage in done.get(offset, ()):
            offset += 1
        self._next[(stage, tp)] = offset

    def _prune(self, tp: Partition) -> None:
        position = self._position[tp]
        done = self._done.get(tp)
        if done:
            for offset in [o for o in done if o < position]:
                del done[offset]


PositionReader = Callable[[list[Partition]], Awaitable[Mapping[Any, int]]]
REVOKE_COMMIT_S = 10.0  # a revoke waits this long at most for its commit
SETTLE_S = 5.0  # ... and this long at most for work under way on its partitions (LLM calls) to finish
RESEEK_S = 5.0  # one seek back per partition and offset in this time: a refetch takes a moment to arrive


class SafeCommits:
    """A faust app's commits and message order, kept by a :class:`CommitTracker`.

    ``read_positions`` returns the group's position for partitions (committed offset, else log start).
    """

    def __init__(self, app: Any, read_positions: PositionReader, tracker: CommitTracker | None = None):
        self.app = app
        self.tracker = tracker or CommitTracker()
        self._read_positions = read_positions
        self._commit_lock = asyncio.Lock()
        self._sought: dict[tuple[Partition, int], float] = {}
        # Before revoked partitions' commit: lets work of theirs under way finish (seconds at most).
        self.before_revoke: Callable[[list[Any], float], Awaitable[None]] | None = None

    def subscribe(self, stage: str, topic: str) -> None:
        self.tracker.subscribe(stage, topic)

    async def skip_reason(self, stage: str, topic: str, partition: int, offset: int) -> str | None:
        """Why ``stage`` must not handle this message now, or None to handle it. "redelivered": the
        stage finished it already, or has it in progress. "out_of_order": a message before it never
        came (faust drops messages fetched while its flow is suspended around a rebalance), so the
        partition is sought back to that one and what follows comes again, in order."""
        expected = self.tracker.next_to_take(stage, topic, partition)
        if expected is None:
            await self._learn_positions([Partition(topic, partition), *self._assigned_without_position()])
            expected = self.tracker.next_to_take(stage, topic, partition)
            if expected is None:  # revoked meanwhile
                return "redelivered"
        if offset == expected:
            return None
        if offset < expected:
            return "redelivered"
        tp = Partition(topic, partition)
        now = time.monotonic()
        if now - self._sought.get((tp, expected), -RESEEK_S) >= RESEEK_S:
            self._sought[(tp, expected)] = now
            log.warning("%s got %s[%d]@%d before @%d: seeking back", stage, topic, partition, offset, expected)
            await faust_compat.seek(self.app.consumer, {TopicPartition(topic, partition): expected})
        return "out_of_order"

    async def rewind(self, tps: Iterable[tuple[str, int]]) -> list[Partition]:
        """Seek partitions back to the first offset a stage reading them has not finished: for one
        that lags while nothing arrives (faust dropped its last messages). Returns those sought."""
        wanted = [Partition(topic, partition) for topic, partition in tps if self.tracker.reads(topic)]
        unknown = [tp for tp in wanted if not self.tracker.has_position(tp)]
        if unknown:
            await self._learn_positions(unknown)
        targets: dict[TopicPartition, int] = {}
        for tp in wanted:
            nexts = [self.tracker.next_for(stage, *tp) for stage in self.tracker.stages(tp.topic)]
            known = [n for n in nexts if n is not None]
            if known and len(known) == len(nexts):
                targets[TopicPartition(*tp)] = min(known)
        sought = await faust_compat.seek(self.app.consumer, targets) if targets else []
        return [Partition(tp.topic, tp.partition) for tp in sought]

    async def lag(self) -> dict[Partition, int]:
        """Per partition this worker owns and reads: log end (as last fetched) minus the group's position."""
        return await self._behind(self.tracker.position)

    async def unfinished(self) -> dict[Partition, int]:
        """Per partition this worker owns and reads: log end (as last fetched) minus the first offset
        some stage reading it has not finished (messages fetched, queued or in progress, or not yet
        fetched). Unlike ``lag`` it does not wait for a commit."""
        return await self._behind(self._first_unfinished)

    def waiting(self, topics: frozenset[str]) -> bool:
        """Whether a message of ``topics`` (full names) on a partition this worker owns is fetched and
        not finished by every stage reading it. Synchronous and cheap (a check before each handling of
        background work): partitions whose position is not read yet count as quiet."""
        consumer = self.app.consumer
        for tp in consumer.assignment():
            if tp.topic not in topics:
                continue
            start = self._first_unfinished(tp)
            end = consumer.highwater(tp) if start is not None else None
            if start is not None and end is not None and end > start:
                return True
        return False

    def _first_unfinished(self, tp: Any) -> int | None:
        nexts = [self.tracker.next_for(stage, tp.topic, tp.partition) for stage in self.tracker.stages(tp.topic)]
        known = [n for n in nexts if n is not None]
        return min(known) if known and len(known) == len(nexts) else None

    async def _behind(self, start: Callable[[Any], int | None]) -> dict[Partition, int]:
        """Per assigned partition whose ``start`` is known: log end (as last fetched) minus it."""
        consumer = self.app.consumer
        unknown = self._assigned_without_position()
        if unknown:
            await self._learn_positions(unknown)
        out = {}
        for tp in consumer.assignment():
            position = start(tp)
            end = consumer.highwater(tp) if position is not None else None
            if end is not None and position is not None:
                out[Partition(tp.topic, tp.partition)] = max(0, end - position)
        return out

    def took(self, stage: str, topic: str, partition: int, offset: int) -> None:
        """The stage has the message in progress (see ``skip_reason``)."""
        self.tracker.took(stage, topic, partition, offset)

    def left_unfinished(self, stage: str, topic: str, partition: int, offset: int) -> None:
        """The stage gave the message up (fenced): it is taken again when it comes again."""
        self.tracker.left_unfinished(stage, topic, partition, offset)

    def finished(self, stage: str, topic: str, partition: int, offset: int) -> None:
        """The stage's effect for this message is durable (or dead-lettered): it may commit."""
        self.tracker.finished(stage, topic, partition, offset)

    def _assigned_without_position(self) -> list[Partition]:
        """Assigned partitions of the topics read here whose position is unknown: read in one go."""
        return [
            Partition(tp.topic, tp.partition)
            for tp in self.app.consumer.assignment()
            if self.tracker.reads(tp.topic) and not self.tracker.has_position(tp)
        ]

    async def _learn_positions(self, tps: list[Partition]) -> None:
        for tp, position in (await self._read_positions(list(dict.fromkeys(tps)))).items():
            self.tracker.start_at(Partition(tp[0], tp[1]), position)

    def install(self) -> None:
        """Replace the faust consumer's commit with :meth:`commit`; forget revoked partitions."""
        faust_compat.replace_commit(self.app, self.commit)
        self.app.on_partitions_revoked.connect(self._on_revoked)
        self.app.on_partitions_assigned.connect(self._on_assigned)

    def _on_assigned(self, _sender: Any = None, assigned: Iterable[Any] = (), **_kwargs: Any) -> None:
        # One line per rebalance this worker took part in (the chaos bench counts them).
        log.info("rebalance: %d partitions assigned", len(list(assigned)))

    async def _on_revoked(self, _sender: Any = None, revoked: Iterable[Any] = (), **_kwargs: Any) -> None:
        """Before revoked partitions go, commit what finished on them (this worker still owns them in
        this generation), so their next owner does not redo it; then forget them. Without this commit,
        work finished since the last commit interval was redone after every rebalance."""
        revoked = list(revoked)
        if self.before_revoke is not None:
            try:
                await self.before_revoke(revoked, SETTLE_S)
            except Exception:  # unfinished work is redone by the next owner (idempotent sinks)
                log.warning(
                    "could not settle the work of %d partitions before giving them up", len(revoked), exc_info=True
                )
        async with self._commit_lock:
            try:
                await asyncio.wait_for(self._commit_finished(), REVOKE_COMMIT_S)
            except Exception:  # a broker outage: the next owner redoes it (sinks are idempotent)
                log.warning("could not commit before giving up %d partitions", len(revoked), exc_info=True)
        self.tracker.forget(revoked)
        self._sought.clear()

    async def commit(self, topics: Any = None, start_new_transaction: bool = True) -> bool:  # faust's signature
        if self._commit_lock.locked():  # a commit is under way; the next interval catches up
            return False
        async with self._commit_lock:
            return await self._commit_finished()

    async def _commit_finished(self) -> bool:
        """Commit, on every assigned partition, the offsets every stage reading it finished."""
        consumer = self.app.consumer
        assignment = {Partition(tp.topic, tp.partition) for tp in consumer.assignment()}
        unknown = [tp for tp in self.tracker.without_position() if tp in assignment]
        if unknown:
            await self._learn_positions(unknown)
        # The assignment again: a rebalance may have taken partitions while the positions were read.
        assignment = {Partition(tp.topic, tp.partition) for tp in consumer.assignment()}
        by_tp = {tp: position for tp, position in self.tracker.committable().items() if tp in assignment}
        if not by_tp:
            return False
        # Partition equals (and hashes as) faust's TP: both are (topic, partition) named tuples.
        if not await faust_compat.commit_offsets(consumer, by_tp):
            return False
        self.tracker.committed(by_tp)
        faust_compat.trim_bookkeeping(consumer, by_tp)
        return True
