"""What a stage module sees of the runtime: a :class:`StageContext` to declare its agent, tables and
timers, the types its handlers take and return, and the lanes it puts messages in when it keeps
many in flight. A handler gets a :class:`Record` (raw bytes, so a malformed message becomes a dead
letter instead of crashing the agent) and returns the messages it wants produced; the runtime
(streams/runtime/context.py, which implements :class:`StageContext`) sends them, waits for the
broker's acks, and only then lets the input offset commit. Stages import this module, never the
runtime."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Hashable, Iterable, Mapping, Protocol, Sequence

import faust
from aiokafka.partitioner import DefaultPartitioner
from faust.types import TableT

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.schemas import Payload, StageCost

from ..services import Services

TRACES = "_traces"  # in a window's or buffer's table entry: held turn id -> the trace context it came with


@dataclass
class Out:
    """A message a stage wants produced."""

    topic: str
    key: str
    value: Payload
    partition: int | None = None  # None: the key's partition; a forget copy keeps its partition number
    # The trace it continues: None, the current span's; a stage emitting a message it held (a window's
    # turn) gives the context the message was held with.
    traceparent: str | None = None


@dataclass
class StageResult:
    outputs: list[Out] = field(default_factory=list)


@dataclass(frozen=True)
class Record:
    """A consumed message as a stage sees it."""

    value: bytes
    timestamp: float | None  # seconds since the epoch: when the record reached its topic
    partition: int = 0
    offset: int = -1  # -1: not from a partition (replay.reflects then never skips it)
    traceparent: str | None = None  # the trace context it carries (memstream.tracing), to link to
    key: bytes | None = None  # as consumed: an input stage checks it against the payload (schemas.keys)
    signature: bytes | None = None  # its memstream-signature header: an input stage checks it (schemas.signature)
    background: bool = False  # marked as background work (schemas.background): handled after questions


Handler = Callable[[Record], Awaitable[StageResult]]


# --- lanes: where a message runs when a stage keeps many in flight (streams/runtime/lanes.py) -----


class Barrier:
    """The lane of a message that must run alone: everything before it finished first, nothing after
    it starts before it finished."""

    def __repr__(self) -> str:
        return "BARRIER"


BARRIER = Barrier()


@dataclass(frozen=True)
class Slot:
    """Where a message goes: its ordering lane (``BARRIER``: alone) and its class of slots."""

    lane: Hashable
    kind: str = "llm"


def conversation_lane(key: bytes | None, partition: int) -> Hashable:
    """The lane of a message keyed ``tenant_id/conversation_id``: its conversation on its partition.
    A broadcast (``tenant_id/*``, ``*/*``) or an unkeyed message concerns many: a barrier."""
    if not key or key.endswith(b"/*"):
        return BARRIER
    return (partition, key)


# --- the context a stage registers with --------------------------------------------------------


class LlmBudget(Protocol):
    """The tenants' LLM budgets (MEMSTREAM_LLM_TENANT_BUDGETS), over every worker."""

    def over(self, tenant: str) -> bool:
        """``tenant`` has spent its budget of the current window: do its work without the LLM."""

    def spend(self, tenant: str, costs: Iterable[StageCost]) -> None:
        """What an LLM call for ``tenant`` cost."""

    def fell_back(self, tenant: str, stage: str) -> None:
        """A piece of ``stage``'s work for ``tenant`` was done without the LLM (counted)."""


class StageContext(Protocol):
    """The app, settings and services a stage registers itself with, and what it may ask of the
    runtime: an agent per input topic, changelog tables, timers, and sending."""

    app: faust.App
    s: Settings
    services: Services
    metrics: Metrics
    llm_budget: LlmBudget

    def agent(
        self,
        stage: str,
        topic_name: str,
        handler: Handler,
        *,
        slots: Mapping[str, int] | None = None,
        slot_of: Callable[[Record], Slot] | None = None,
    ) -> None:
        """``handler`` runs for each message of ``topic_name`` (a logical name) as ``stage``: one at a
        time, or with ``slots`` (class of work -> how many at once) as many at once as ``slot_of``
        each message's slot allows (one lane's messages stay in order)."""

    def check_signature(self, record: Record) -> None:
        """With tenant write secrets configured: raises ``SignatureRefused`` (a dead letter) unless
        ``record`` is signed with a secret of the tenant its key names. Called by the stage that acts
        on a record of an input topic (turns, control, queries), after its key check."""

    async def live_first(self, record: Record) -> None:
        """Return once an imported turn may enter the pipeline: no live turn or question of this
        worker waits, and few messages are unfinished after it (streams/runtime/bulk.py)."""

    async def in_background(self) -> None:
        """The handling under way is background work (a history import's): its outputs are marked so,
        and it returns once no question of this worker waits (streams/runtime/priority.py). A record
        already marked is handled so without asking; a stage calls this for work it recognises itself."""

    def imported(self, tenant: str) -> None:
        """An imported turn of ``tenant`` went into the pipeline (counted, and published as progress)."""

    def busy_ingesting(self) -> bool:
        """An ingest stage of this worker is handling a message, or finished one within the last second."""

    def idle_timer(
        self,
        name: str,
        table: TableT,
        idle: Callable[[dict[str, Any]], bool],
        topic: str,
        tick: Callable[[str, str], Payload],
    ) -> None:
        """Every ``stm_tick_s``, send a tick to the partition of each conversation whose state in
        ``table`` is idle."""

    def evict_timer(
        self,
        stage: str,
        table: TableT,
        evictable: Callable[[dict[str, Any]], bool],
        topic: str,
        tick: Callable[[str, str], Payload],
    ) -> None:
        """Every ``stm_tick_s``, send a tick to the partition of each conversation whose entry in
        ``table`` may be evicted; the stage deletes it (``delete_state``) when it handles the tick."""

    async def delete_state(self, stage: str, table: TableT, key: str, *, evicted: bool = True) -> None:
        """Delete a table entry and wait until its tombstone is on the broker (``evicted``: counted as
        an evicted conversation; a piece of one is not)."""

    async def send(
        self, topic: str, key: bytes, value: bytes, partition: int | None = None, *, traceparent: str | None = None
    ) -> Awaitable[Any]:
        """Publish now; returns the delivery future."""

    async def produce(self, stage: str, outputs: Sequence[Out]) -> None:
        """Send and wait for the broker's ack: the source offset commits only after this returns."""

    async def save_state(self, table: TableT, key: str, value: Any, *, source: Record | None = None) -> None:
        """Set a table entry and wait until its changelog record is on the broker."""

    def already_applied(self, stage: str, value: Any, record: Record) -> bool:
        """The table entry ``value`` reflects ``record`` already (a replay after a crash)."""

    def table(self, stage: str, name: str) -> TableT:
        """A changelog-backed table of ``stage`` (declared in memstream.topology)."""


def key_partition(key: str, partitions: int) -> int:
    """The partition a keyed message goes to (the producers' murmur2 partitioner): a stage that
    acts on every conversation of one partition picks the table keys that live there."""
    every = list(range(partitions))
    return int(DefaultPartitioner()(key.encode(), every, every))


def keys_in_partition(table: TableT, partition: int, partitions: int) -> list[str]:
    """The keys of ``table`` (this worker's copy) that belong to ``partition``."""
    return [key for key in list(table.keys()) if key_partition(key, partitions) == partition]


def init_series(metric: Any, *label_values: Sequence[str]) -> None:
    """Create a labelled metric's series at 0 for every combination of known label values: rates and
    dashboards see them before the first event."""
    for combination in itertools.product(*label_values):
        metric.labels(*combination)
