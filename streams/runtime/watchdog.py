"""Two timers every worker runs: the watchdog, which recovers partitions that lag while the stages
reading them handle nothing, and the consumer-lag gauges."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Mapping, Sequence

from aiokafka import TopicPartition

from memstream.schemas.topics import Topic
from memstream.topology import TOPOLOGY

from ..lag import partition_lag
from .context import WorkerContext
from .processes import EXIT_RESTART

log = logging.getLogger(__name__)


def quiet_topics(readers: Mapping[str, Sequence[str]], busy: set[str]) -> set[str]:
    """The topics (logical names) none of whose reading stages is busy: only their lag can mean
    stranded messages (a stage that handles or holds something is getting on with its own)."""
    return {topic for topic, stages in readers.items() if not busy & set(stages)}


def busy_stages(
    stages: Sequence[str], in_flight: Mapping[str, int], handled: Mapping[str, int], last: Mapping[str, int]
) -> set[str]:
    """The stages with a message in a handler now, or that finished one since the last look."""
    return {st for st in stages if in_flight.get(st, 0) or handled.get(st, 0) != last.get(st, 0)}


def watchdog(ctx: WorkerContext) -> None:
    """When partitions lag while the stages reading them idle: seek them back to what is unfinished,
    and if that does not help within ``stall_s``, exit for the supervisor to restart it. Judged per
    stage: a steady stream of questions keeps the query stage busy, not the ingest stages idle.

    faust-streaming 0.15 can strand messages fetched around a rebalance or table recovery: no
    agent ever gets them and their partition stops committing (``streams.runtime.offsets``). A seek or a
    restart redelivers them (at-least-once; every sink is idempotent).
    """
    state: dict[str, Any] = {"last": {}, "stuck_since": None, "rewound": False}
    stall_s = ctx.s.stall_s
    own_prefix = ctx.s.topic_prefix + "."
    stages = ctx.s.stage_list()
    readers: dict[str, list[str]] = {}
    for stage in stages:
        for topic in TOPOLOGY[stage].inputs:
            readers.setdefault(topic, []).append(stage)

    async def check() -> None:
        busy = busy_stages(stages, ctx.stage_in_flight, ctx.stage_handled, state["last"])
        state["last"] = dict(ctx.stage_handled)
        quiet = {own_prefix + topic for topic in quiet_topics(readers, busy)}
        if ctx.bulk_waiting:  # held back by live work on purpose (runtime/bulk.py)
            quiet.discard(own_prefix + Topic.BULK_TURNS)
        tps = [TopicPartition(tp.topic, tp.partition) for tp in ctx.app.consumer.assignment() if tp.topic in quiet]
        lag = await partition_lag(ctx.s, ctx.app.conf.id, tps) if tps else {}
        lagging = {f"{tp.topic}[{tp.partition}]": n for tp, n in lag.items() if n}
        if not lagging:
            state["stuck_since"], state["rewound"] = None, False
            return
        now = time.monotonic()
        state["stuck_since"] = state["stuck_since"] or now
        if not state["rewound"]:
            # First try in process: seek the lagging partitions back to what is unfinished.
            state["rewound"] = True
            sought = await ctx.commits.rewind([(tp.topic, tp.partition) for tp, n in lag.items() if n])
            ctx.metrics.rewinds.inc(len(sought))
            log.warning("partitions lag while their stages idle (%s): sought back %d of them", lagging, len(sought))
            return
        if now - state["stuck_since"] >= stall_s:
            log.error(
                "partitions lag while their stages idle for %.0fs (%s): exiting for a restart (exit code %d)",
                now - state["stuck_since"],
                lagging,
                EXIT_RESTART,
            )
            logging.shutdown()
            os._exit(EXIT_RESTART)

    async def guarded() -> None:
        # An exception in a faust timer crashes the worker: a look that fails (the broker away, a
        # rebalance under way) is logged, and the next tick looks again.
        try:
            await check()
        except Exception:
            log.exception("watchdog check failed; trying again at the next tick")

    ctx.app.timer(interval=max(2.0, stall_s / 3), name="memstream.watchdog")(guarded)


def lag_gauges(ctx: WorkerContext, interval_s: float = 5.0) -> None:
    """``memstream_consumer_lag`` of every partition this worker owns; series of partitions it
    gave up are removed."""
    group, gauge = ctx.app.conf.id, ctx.metrics.consumer_lag
    shown: set[tuple[str, str]] = set()

    async def update() -> None:
        try:
            lag = await ctx.commits.lag()
        except Exception:  # a rebalance or a broker hiccup: the next tick retries
            log.debug("consumer lag not read this time", exc_info=True)
            return
        current = {(tp.topic, str(tp.partition)): n for tp, n in lag.items()}
        for topic, partition in shown - current.keys():
            gauge.remove(group, topic, partition)
        for (topic, partition), n in current.items():
            gauge.labels(group, topic, partition).set(n)
        shown.clear()
        shown.update(current)

    ctx.app.timer(interval=interval_s, name="memstream.lag")(update)


# --- shared handling -------------------------------------------------------------------
