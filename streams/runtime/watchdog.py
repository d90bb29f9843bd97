"""Two timers every worker runs: the watchdog, which recovers partitions that lag while nothing is
handled, and the consumer-lag gauges."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from aiokafka import TopicPartition

from ..lag import partition_lag
from .context import WorkerContext
from .processes import EXIT_RESTART

log = logging.getLogger(__name__)


def watchdog(ctx: WorkerContext) -> None:
    """When this worker's partitions lag while every agent idles: seek them back to what is
    unfinished, and if that does not help within ``stall_s``, exit for the supervisor to restart it.

    faust-streaming 0.15 can strand messages fetched around a rebalance or table recovery: no
    agent ever gets them and their partition stops committing (``streams.runtime.offsets``). A seek or a
    restart redelivers them (at-least-once; every sink is idempotent).
    """
    state: dict[str, Any] = {"last_handled": -1, "stuck_since": None, "rewound": False}
    stall_s = ctx.s.stall_s
    own_prefix = ctx.s.topic_prefix + "."

    async def check() -> None:
        if ctx.in_flight or ctx.handled != state["last_handled"]:
            state["last_handled"], state["stuck_since"], state["rewound"] = ctx.handled, None, False
            return
        tps = [
            TopicPartition(tp.topic, tp.partition)
            for tp in ctx.app.consumer.assignment()
            if tp.topic.startswith(own_prefix)
        ]
        lag = await partition_lag(ctx.s, ctx.app.conf.id, tps)
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
            log.warning("partitions lag while every agent idles (%s): sought back %d of them", lagging, len(sought))
            return
        if now - state["stuck_since"] >= stall_s:
            log.error(
                "partitions lag while every agent idles for %.0fs (%s): exiting for a restart (exit code %d)",
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
