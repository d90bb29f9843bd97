"""Every use of faust-streaming's internals, in one place.

memstream decides its own commits (``streams.runtime.offsets``), writes table state with a changelog
record it can wait for, retries faust's topic declarations that drew a broker that is down, logs
the consumer's bookkeeping on SIGUSR2, and has the aiokafka consumer faust builds fetch promptly.
Each of these needs an attribute or method faust (or aiokafka under it) does not document. They are
reached only through this module, and :func:`check` names the ones an upgrade removed, so a new
faust fails loudly at start-up (and in ``tests/streams/test_faust_compat.py``) instead of silently
losing offsets. pyproject.toml pins faust-streaming to the range tested here.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any, Awaitable, Callable, Mapping
from typing import Collection as Collection_

from aiokafka.consumer.fetcher import Fetcher
from faust.tables.base import Collection
from faust.tables.manager import TableManager
from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import Transport
from mode.utils.queues import FlowControlQueue

log = logging.getLogger(__name__)

TESTED_VERSIONS = ">=0.15.3,<0.16"  # keep in step with pyproject.toml

# What this module reaches into: the method or attribute name on each faust class (instance
# attributes are checked on a live consumer by check_consumer).
CONSUMER_METHODS = ("_commit", "seek_wait", "highwater", "assignment", "commit")
CONSUMER_STATE = ("_committed_offset", "_acked", "_acked_index", "_gap", "_paused_partitions", "_unacked_messages")
TABLE_METHODS = ("send_changelog", "partition_for_key")
TRANSPORT_METHODS = ("_create_topic",)
TABLE_MANAGER_METHODS = ("_update_channels", "on_start")


def check() -> list[str]:
    """The internals this module uses that the installed faust lacks (empty when all are there)."""
    missing = [f"Consumer.{name}" for name in CONSUMER_METHODS if not callable(getattr(Consumer, name, None))]
    missing += [f"Collection.{name}" for name in TABLE_METHODS if not callable(getattr(Collection, name, None))]
    missing += [f"Transport.{name}" for name in TRANSPORT_METHODS if not callable(getattr(Transport, name, None))]
    missing += [
        f"TableManager.{name}" for name in TABLE_MANAGER_METHODS if not callable(getattr(TableManager, name, None))
    ]
    if not isinstance(getattr(FlowControlQueue, "pressure_high_ratio", None), (int, float)):
        missing.append("FlowControlQueue.pressure_high_ratio")
    if "prefetch_backoff" not in (Fetcher.__init__.__kwdefaults__ or {}):
        missing.append("aiokafka Fetcher(prefetch_backoff=)")
    return missing


def check_consumer(consumer: Any) -> list[str]:
    """The bookkeeping attributes a live consumer lacks (they are set in its constructor)."""
    return [f"consumer.{name}" for name in CONSUMER_STATE if not hasattr(consumer, name)]


def require(app: Any) -> None:
    """Fail at start-up when this faust lacks something memstream's delivery guarantees rest on."""
    missing = check() + check_consumer(app.consumer)
    if missing:
        raise RuntimeError(
            f"faust-streaming changed: {', '.join(missing)} not found; memstream was tested "
            f"with faust-streaming{TESTED_VERSIONS}"
        )


# --- delivery buffers ----------------------------------------------------------------------------


NEVER = 2**62  # acks: faust's inline commit never comes


def delivery_config(buffer_records: int, partitions: int) -> dict[str, Any]:
    """faust's stream buffer, fetch size and inline commits, chosen so that delivery never waits.

    One loop delivers every fetched record to its stream's buffer; at a full buffer it waits, and so
    do all the worker's topics: a stream that does not take its records (the bulk lane waiting for
    live work to finish, a stage far behind) then stops every other stage, the live work the bulk
    lane waits for included. faust stops fetching a partition once a record of it lands in a buffer
    past ``maxsize / pressure_high_ratio``, but delivers the rest of the fetch; after that mark each
    of a topic's partitions adds at most one more fetch before it is stopped. So a fetch holds at
    most the room above the mark over (partitions + 1).

    The same loop also commits, inline, every ``broker_commit_every`` acks (10,000 by default): every
    topic's delivery then waits for the commit's round trip to the broker, and under a history import
    questions waited behind one. Commits come from the 1 s interval alone (``streams.runtime.offsets``)."""
    high = math.floor(buffer_records / FlowControlQueue.pressure_high_ratio)
    return {
        "stream_buffer_maxsize": buffer_records,
        "broker_max_poll_records": max(1, (buffer_records - high) // (partitions + 1)),
        "broker_commit_every": NEVER,
    }


# --- fetching ------------------------------------------------------------------------------------

PREFETCH_BACKOFF_S = 0.005


def fetch_promptly() -> None:
    """aiokafka sends a broker no fetch while a partition's fetched records are younger than
    ``prefetch_backoff`` (0.1 s) and not all taken yet, and faust takes a fetch's records one by one:
    a question that reached the broker just after a fetch waited up to 100 ms for the next (at idle,
    most of the slowest replies' time in the fairness bench). With 5 ms, records still untaken only
    keep their own partition out of the next fetch. faust builds its
    consumer without this option, so the default is changed; call before the worker starts."""
    defaults = Fetcher.__init__.__kwdefaults__
    assert defaults is not None and "prefetch_backoff" in defaults, "checked by check()"
    defaults["prefetch_backoff"] = PREFETCH_BACKOFF_S


def start_tables_promptly() -> None:
    """faust's table manager sleeps 1 s before it starts its tables and their recovery, a pause for
    tables added late; every memstream table is registered before the worker starts (the stages'
    ``register``), so the pause was a second of every start's join. Call before the worker starts."""

    async def on_start(self: Any) -> None:  # TableManager.on_start, without its ``sleep(1.0)``
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()

    TableManager.on_start = on_start  # type: ignore[method-assign]


# --- commits -------------------------------------------------------------------------------------


def replace_commit(app: Any, commit: Callable[..., Awaitable[bool]]) -> None:
    """faust's periodic and rebalance commits call ``consumer.commit``: route them to ``commit``."""
    app.consumer.commit = commit


async def commit_offsets(consumer: Any, offsets: Mapping[Any, int]) -> bool:
    """Commit exactly these offsets (faust's ``_commit``: no acked-offset arithmetic of its own), of
    the partitions still assigned. faust's ``_commit`` drops the others itself, and left with none it
    hands aiokafka an empty commit, which raises ``ValueError({})`` and crashes the worker: a rebalance
    between choosing the offsets and committing them did that (seen in the upgrade test's earlier
    release). False when nothing is left to commit."""
    mine = set(consumer.assignment())
    kept = {tp: offset for tp, offset in offsets.items() if tp in mine}
    return bool(kept) and bool(await consumer._commit(kept))


def trim_bookkeeping(consumer: Any, offsets: Mapping[Any, int]) -> None:
    """faust's own commit would have dropped its acked offsets below the new position; ours does it
    so they do not pile up (faust no longer reads them to commit)."""
    for tp, position in offsets.items():
        consumer._committed_offset[tp] = position
        acked = consumer._acked.get(tp)
        if acked:
            acked[:] = [o for o in acked if o >= position]
        index = consumer._acked_index.get(tp)
        if index:
            index.difference_update([o for o in index if o < position])
        gap = consumer._gap.get(tp)
        if gap:
            gap.chop(0, position)


async def seek(consumer: Any, positions: Mapping[Any, int]) -> list[Any]:
    """Move the fetch positions of the partitions still assigned and wait until the fetcher uses
    them; returns those moved. A rebalance can take a partition away between the caller's look and
    the seek: aiokafka then raises ``IllegalStateError``, which in a timer crashed the whole worker
    (seen in the 20-minute chaos run). The new owner reads from the committed offset anyway."""
    from aiokafka.errors import IllegalStateError

    assigned = set(consumer.assignment())
    kept = {tp: offset for tp, offset in positions.items() if tp in assigned}
    if not kept:
        return []
    try:
        await consumer.seek_wait(kept)
    except IllegalStateError as exc:
        log.info("seek skipped, partitions moved meanwhile: %s", exc)
        return []
    return list(kept)


# --- tables --------------------------------------------------------------------------------------


async def write_table(table: Any, key: str, value: Any) -> None:
    """Set a table entry and wait until its changelog record is on the broker.

    ``table[key] = value`` only queues the record, and faust's flush before a commit gives up after
    0.1 s without progress: the source offset could commit before the state it produced (a turn lost
    on restart). This writes the local copy without faust's fire-and-forget send, then sends the
    changelog record itself and waits for the broker's ack."""
    table.data[key] = value
    await table.send_changelog(table.partition_for_key(key), key, value)  # a future: delivered when done


async def delete_table_entry(table: Any, key: str) -> None:
    """Delete a table entry and wait until its tombstone (a null value) is on the broker: log
    compaction then drops the entry's earlier records, and a recovery from the changelog no longer
    brings it back. Durable before it returns, like :func:`write_table`."""
    if key in table.data:
        del table.data[key]
    await table.send_changelog(table.partition_for_key(key), key, value=None, value_serializer="raw")


# --- topic declarations --------------------------------------------------------------------------

DECLARE_RETRY_S = 1.0  # between two tries of a declaration: a fresh metadata view meanwhile


def retry_topic_declarations(app: Any, deadline_s: float, declared: Collection_[str] = ()) -> None:
    """Try a topic declaration again when it drew a broker that is down, until ``deadline_s``.

    At every start faust declares its topics through ``Transport._create_topic``: the leader-assignor
    topic first, which its producer's metadata does not list yet, so a CreateTopics goes out even when
    the topic exists. It sends a metadata request to the first broker its client knows and the
    CreateTopics to the controller that names. A
    broker killed a moment ago is still in the cluster's metadata until the controller fences it
    (seconds), and KRaft names a random live-or-not-yet-fenced broker as the controller, so either
    request may go to the dead node: aiokafka raises ``NodeNotReadyError``, faust does not retry, and
    the worker exited at start-up while two brokers of three were up. Retriable errors (the node not
    ready, a request timed out, a lost connection) are tried again with fresh metadata, which names
    another broker or no longer the dead one; any other error, and one that lasts past
    ``deadline_s``, still fails the start.

    ``declared``: topics this worker has just made sure of (``ensure_topics``: every memstream topic
    and its changelogs). faust is not asked about them: it declared each changelog twice, a metadata
    request and a CreateTopics each, about a second of every start."""
    from aiokafka.errors import KafkaError

    known = frozenset(declared)

    for transport in {id(t): t for t in (app.transport, app.producer_transport)}.values():
        if getattr(transport, "_memstream_retrying", False):
            continue
        create = transport._create_topic

        async def create_topic(
            owner: Any, client: Any, topic: str, *args: Any, _create: Any = create, **kwargs: Any
        ) -> None:
            if topic in known:
                return None
            deadline = time.monotonic() + deadline_s
            while True:
                try:
                    return await _create(owner, client, topic, *args, **kwargs)
                except KafkaError as exc:
                    if not exc.retriable or owner.should_stop or time.monotonic() >= deadline:
                        raise
                    log.info("declaring topic %s: %r; trying again on fresh metadata", topic, exc)
                await asyncio.sleep(DECLARE_RETRY_S)
                await client.force_metadata_update()

        transport._create_topic = create_topic
        transport._memstream_retrying = True


# --- group membership ----------------------------------------------------------------------------


def watch_expulsion(app: Any, on_expelled: Callable[[str], None]) -> bool:
    """Call ``on_expelled`` when the group goes on without this worker: aiokafka resets its generation
    when a heartbeat or a commit learns the member or generation is no longer known (a loop too busy
    to heartbeat within the session timeout, or to poll within max.poll.interval), and then rejoins.
    Its partitions may have been with another worker meanwhile and come back; faust recovers tables
    only for partitions that are new to the worker, so those tables would be stale. Installed on the
    live consumer's group coordinator (so from the first assignment on); True once installed. A reset
    before the first join (generation -1) or while the consumer closes is not an expulsion."""
    try:
        coordinator = app.consumer._thread._ensure_consumer()._coordinator
    except AttributeError:
        return False
    if getattr(coordinator, "_memstream_watched", False):
        return True
    reset = coordinator.reset_generation

    def reset_generation() -> None:
        closing = getattr(coordinator, "_closing", None)
        if getattr(coordinator, "generation", -1) > 0 and not (closing is not None and closing.done()):
            on_expelled(f"group {coordinator.group_id} went on without member {coordinator.member_id}")
        reset()

    coordinator.reset_generation = reset_generation
    coordinator._memstream_watched = True
    log.info("watching membership of group %s: an expelled worker restarts", coordinator.group_id)
    return True


# --- diagnostics ---------------------------------------------------------------------------------


def consumer_state(consumer: Any) -> str:
    """The consumer's view of every assigned partition (SIGUSR2): is one stuck, and where?"""
    lines = []
    for tp in sorted(consumer.assignment()):
        lines.append(
            f"{tp.topic}[{tp.partition}] committed={consumer._committed_offset.get(tp)} "
            f"acked={sorted(consumer._acked.get(tp, []))[-5:]} highwater={consumer.highwater(tp)} "
            f"paused={tp in consumer._paused_partitions}"
        )
    return f"consumer state (unacked={len(consumer._unacked_messages)}):\n" + "\n".join(lines)
