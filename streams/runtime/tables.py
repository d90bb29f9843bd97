"""The stages' changelog-backed tables: declared in the topology, written durably before the source
offset commits, replays recognised from the entry itself, idle entries ticked from a timer."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import faust
from faust.types import TableT

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.schemas import Payload
from memstream.topology import TOPOLOGY

from ..stages.api import Record
from . import faust_compat, replay
from .fence import FreezeFence
from .output import Output

log = logging.getLogger(__name__)


@dataclass
class Tables:
    """The tables of one worker's stages, over the faust app."""

    app: faust.App
    s: Settings
    metrics: Metrics
    fence: FreezeFence
    output: Output  # idle ticks go out through it

    def table(self, stage: str, name: str) -> TableT:
        """A changelog-backed table of ``stage`` (declared in memstream.topology, so its changelog topic is
        created before the worker subscribes); faust names it ``<app id>-<name>-changelog``.

        Keys and values go through faust's json codec, live and on recovery from the changelog.
        """
        if name not in (TOPOLOGY[stage].table, TOPOLOGY[stage].seen_table) or not name:
            raise ValueError(f"stage {stage} keeps table {name}, which memstream.topology does not give it")
        return self.app.Table(name, default=None, partitions=self.s.topic_partitions, key_type=str, value_type=None)

    async def save_state(self, table: TableT, key: str, value: Any, *, source: Record | None = None) -> None:
        """Set a table entry and wait until its changelog record is on the broker.

        ``table[key] = value`` only queues the record, and faust's flush before a commit gives up
        after 0.1 s without progress: the source offset could commit before the state it produced
        (a turn lost on restart). The handler finishes, and its offset may commit, after this returns.
        ``source``: the input message the entry now reflects, with those before it (``already_applied``)."""
        self.fence.check()
        if source is not None:
            value = replay.stamped(value, source.partition, source.offset)
        await faust_compat.write_table(table, key, value)

    async def delete_state(self, stage: str, table: TableT, key: str, *, evicted: bool = True) -> None:
        """Delete a conversation's entry (it went quiet with nothing in flight) and wait until its
        tombstone is on the broker: the changelog's compaction frees its space, a recovery does not
        bring it back, and the handler's offset commits only after. Counted per stage when ``evicted``."""
        self.fence.check()
        await faust_compat.delete_table_entry(table, key)
        if evicted:
            self.metrics.state_evicted.labels(stage).inc()

    def evict_timer(
        self,
        stage: str,
        table: TableT,
        evictable: Callable[[dict[str, Any]], bool],
        topic: str,
        tick: Callable[[str, str], Payload],
    ) -> None:
        """Every ``stm_tick_s``, send a tick to the partition of each conversation whose entry in
        ``table`` may go (``evictable``): the stage deletes it inside stream processing, in order
        with the conversation's messages, never from a side thread. Also keeps the gauge of the
        entries this worker holds."""
        self.idle_timer(f"{TOPOLOGY[stage].table}.evict", table, evictable, topic, tick)

        async def count() -> None:
            self.metrics.state_entries.labels(stage).set(len(table))

        self.app.timer(interval=self.s.stm_tick_s, name=f"memstream.{stage}.entries")(count)

    def already_applied(self, stage: str, value: Any, record: Record) -> bool:
        """The table entry ``value`` reflects ``record`` already (saved with it as ``source``, or a
        later one): a replay after a worker died between the entry's write and the offset commit.
        Counted as skipped, reason "in_state"."""
        if not replay.reflects(value, record.partition, record.offset):
            return False
        self.metrics.skipped.labels(stage, "in_state").inc()
        return True

    def idle_timer(
        self,
        name: str,
        table: TableT,
        idle: Callable[[dict[str, Any]], bool],
        topic: str,
        tick: Callable[[str, str], Payload],
    ) -> None:
        """Every ``stm_tick_s``, send a tick to the partition of each conversation whose state in
        ``table`` is idle: the stage then acts on it inside stream processing, where it may write
        the table."""

        async def look() -> None:
            try:
                keys = [key for key, data in list(table.items()) if data and idle(data)]
            except Exception:  # a bad entry must not crash the worker; the next tick retries
                log.exception("could not scan the %s table for idle conversations", name)
                return
            for key in keys:
                tenant, conversation = key.split("/", 1)
                await self.output.send(topic, key.encode(), tick(tenant, conversation).to_bytes())

        self.app.timer(interval=self.s.stm_tick_s, name=f"memstream.{name}.idle")(look)
