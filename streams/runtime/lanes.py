"""Many messages of one stage in progress at once, in the orders the pipeline relies on.

An LLM-bound stage handling one message at a time spends its worker on waiting. :class:`Lanes` runs
handlings as tasks instead, under three rules:
- messages of one lane (a conversation: its Kafka key on its partition) run one after another, in the
  order they arrived, so two flushes of a conversation are extracted (and their writes produced) in
  order, and a forget keyed like the conversation runs after the flushes before it;
- a barrier (a message for many conversations: a tenant-wide forget, a broadcast command) runs once
  everything before it finished, and nothing after it starts before it finished;
- each class of work has its own number of slots, so evidence-only questions are not held behind
  LLM-answered ones; messages admitted beyond the slots wait as tasks, up to ``backlog`` of them,
  and only then does the stage stop taking messages.
Offsets are tracked elsewhere (``offsets``): a message commits only once it and every one before it
finished, whatever order the tasks end in.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial
from typing import Awaitable, Callable, Hashable, Iterable, Mapping

from ..stages.api import BARRIER, Slot

log = logging.getLogger(__name__)

Work = Callable[[], Awaitable[None]]


@dataclass
class _Entry:
    partition: Hashable
    started: bool = False


class Lanes:
    """Runs submitted work concurrently under the rules of the module docstring."""

    def __init__(self, slots: Mapping[str, int], backlog: int | None = None):
        if not slots or min(slots.values()) < 1:
            raise ValueError(f"every class needs at least one slot: {dict(slots)}")
        self._slots = {kind: asyncio.Semaphore(n) for kind, n in slots.items()}
        # Admitted and not finished: bounds the memory held by messages waiting for a slot or a lane.
        self._admitted = asyncio.Semaphore(backlog or 4 * sum(slots.values()))
        self._tails: dict[Hashable, asyncio.Task[None]] = {}  # lane -> its last task
        self._tasks: dict[asyncio.Task[None], _Entry] = {}
        self.running = 0  # holding a slot now
        self.waiting = 0  # admitted, waiting for their lane or a slot

    def __len__(self) -> int:
        return len(self._tasks)

    async def submit(self, slot: Slot, work: Work, *, partition: Hashable = None) -> None:
        """Run ``work`` as its slot says; returns once it is admitted (a barrier: once it finished)."""
        if slot.kind not in self._slots:
            raise ValueError(f"unknown class of work {slot.kind!r}; known: {sorted(self._slots)}")
        if slot.lane is BARRIER:
            await self.drain()
            async with self._slots[slot.kind]:
                self.running += 1
                try:
                    await work()
                finally:
                    self.running -= 1
            return
        await self._admitted.acquire()
        ahead = self._tails.get(slot.lane)
        entry = _Entry(partition)
        task = asyncio.create_task(self._run(entry, ahead, slot.kind, work))
        self._tasks[task] = entry
        self._tails[slot.lane] = task
        self.waiting += 1
        task.add_done_callback(partial(self._done, lane=slot.lane))

    async def _run(self, entry: _Entry, ahead: asyncio.Task[None] | None, kind: str, work: Work) -> None:
        if ahead is not None:
            await asyncio.wait({ahead})  # its outcome is its own: only its end matters here
        async with self._slots[kind]:
            self.waiting -= 1
            entry.started = True
            self.running += 1
            try:
                await work()
            finally:
                self.running -= 1

    def _done(self, task: asyncio.Task[None], *, lane: Hashable) -> None:
        # Here, not in _run: a task cancelled before its first step never runs its body.
        entry = self._tasks.pop(task)
        if not entry.started:
            self.waiting -= 1
        self._admitted.release()
        if self._tails.get(lane) is task:
            del self._tails[lane]
        if not task.cancelled() and task.exception() is not None:
            log.error("a handling task failed", exc_info=task.exception())

    async def drain(self, partitions: Iterable[Hashable] | None = None, timeout_s: float | None = None) -> bool:
        """Wait until the work admitted so far (of ``partitions`` only, when given) finished; False
        when ``timeout_s`` passed first."""
        wanted = None if partitions is None else set(partitions)
        tasks = [t for t, e in self._tasks.items() if wanted is None or e.partition in wanted]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        return not pending

    def cancel_waiting(self, partitions: Iterable[Hashable]) -> int:
        """Cancel the admitted work of ``partitions`` that has not started (their partitions went to
        another worker, which handles those messages again); returns how many."""
        wanted = set(partitions)
        cancelled = 0
        for task, entry in list(self._tasks.items()):
            if entry.partition in wanted and not entry.started:
                task.cancel()
                cancelled += 1
        return cancelled
