"""Stage 3: the topic-aware short-term buffer.

Turns accumulate per conversation as ``{topic, turns}`` groups. A flush (one extraction call) happens
when the buffer reaches its token budget or when the conversation has been idle. A session end is
no flush of its own: it cuts a topic (the segmenter's boundary), and several short sessions of a
conversation share one call; each turn carries its own time, so time phrases still resolve against
the turn that said them. Whole topics are kept together where the budget allows: a new topic that
would overflow the buffer flushes what is pending first. Duplicate turn ids (redelivery) are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Container

from memstream.processors.ids import stable_id
from memstream.processors.write.table_entry import TableEntry
from memstream.schemas import CompressedTurn, FlushSegment, SegmentedTurn, StmFlush, StmTick


@dataclass(frozen=True)
class StmPolicy:
    budget_tokens: int = 768
    idle_s: float = 30.0
    remember_turn_ids: int = 4096  # how many seen ids are kept for duplicate detection


@dataclass
class StmState(TableEntry):
    """Per-conversation buffer, JSON-serialisable for the changelog-backed table."""

    tenant_id: str = ""
    conversation_id: str = ""
    groups: list[dict[str, Any]] = field(default_factory=list)  # {segment_id, topic_label, turns: [json]}
    tokens: int = 0
    seen: list[str] = field(default_factory=list)  # recent turn ids (the open piece)
    seen_sealed: int = 0  # pieces of older ids sealed so far (processors/write/seen_ids.py)
    last_activity: float = 0.0  # wall-clock seconds of the last buffered turn

    @property
    def pending_turns(self) -> int:
        return sum(len(g["turns"]) for g in self.groups)


def _flush(state: StmState, reason: str, now: float) -> StmFlush | None:
    if not state.groups:
        return None
    segments = [
        FlushSegment(
            segment_id=g["segment_id"],
            topic_label=g["topic_label"],
            turns=[CompressedTurn.model_validate(t) for t in g["turns"]],
        )
        for g in state.groups
    ]
    turn_ids = [t.turn.turn_id for s in segments for t in s.turns]
    flush = StmFlush(
        tenant_id=state.tenant_id,
        conversation_id=state.conversation_id,
        flush_id=stable_id(state.tenant_id, state.conversation_id, *turn_ids),
        reason=reason,  # type: ignore[arg-type]
        segments=segments,
        tokens=state.tokens,
        flushed_at=datetime.fromtimestamp(now, tz=timezone.utc),
    )
    state.groups = []
    state.tokens = 0
    return flush


def add_turn(
    state: StmState, message: SegmentedTurn, now: float, policy: StmPolicy, seen_before: Container[str] = ()
) -> list[StmFlush]:
    """Buffer one segmented turn; returns the flushes it triggers (0, 1 or 2), in order.
    ``seen_before``: the conversation's recent turn ids beyond ``state.seen`` (its sealed pieces)."""
    turn = message.item.turn
    if turn.turn_id in state.seen or turn.turn_id in seen_before:
        return []
    state.tenant_id, state.conversation_id = message.tenant_id, message.conversation_id
    flushes: list[StmFlush] = []

    def emit(reason: str) -> None:
        flush = _flush(state, reason, now)
        if flush is not None:
            flushes.append(flush)

    tokens = message.item.tokens_out
    opens_topic = not state.groups or state.groups[-1]["segment_id"] != message.segment_id
    if opens_topic and state.groups and state.tokens + tokens > policy.budget_tokens:
        emit("budget")  # keep the new topic whole in the next flush
    if opens_topic:
        state.groups.append({"segment_id": message.segment_id, "topic_label": message.topic_label, "turns": []})
    state.groups[-1]["turns"].append(message.item.wire())
    state.tokens += tokens
    state.last_activity = now
    state.seen.append(turn.turn_id)
    if len(state.seen) > policy.remember_turn_ids:
        del state.seen[: len(state.seen) - policy.remember_turn_ids]
    if state.tokens >= policy.budget_tokens:
        emit("budget")
    return flushes


def on_tick(
    state: StmState, now: float, policy: StmPolicy, *, force: bool = False, conversation_idle: bool = False
) -> StmFlush | None:
    """Flush an idle (or, with ``force``, any) non-empty buffer. ``conversation_idle``: the segmenter
    found the conversation idle and just handed over its last turns, so the buffer is idle too."""
    if not state.groups:
        return None
    if force:
        return _flush(state, "forced", now)
    if conversation_idle or now - state.last_activity >= policy.idle_s:
        return _flush(state, "idle", now)
    return None


def is_idle(state: StmState, now: float, policy: StmPolicy) -> bool:
    return bool(state.groups) and now - state.last_activity >= policy.idle_s


def buffer_evictable(state: StmState, now: float, evict_idle_s: float) -> bool:
    """The buffer holds no turn (all flushed) and none came for ``evict_idle_s``: its entry may be
    deleted (only its recent turn ids go, long past any redelivery)."""
    return not state.groups and now - state.last_activity >= evict_idle_s


def buffer_step(
    data: Any, message: SegmentedTurn | StmTick, now: float, policy: StmPolicy, seen_before: Container[str] = ()
) -> tuple[dict[str, Any], list[StmFlush], bool]:
    """One message against a buffer's table entry: the entry after it, the flushes it makes, and
    whether it was a turn the buffer had seen already."""
    state = StmState.from_dict(data)
    if isinstance(message, StmTick):
        flush = on_tick(state, now, policy, force=message.force, conversation_idle=message.conversation_idle)
        return state.to_dict(), [flush] if flush else [], False
    before = state.pending_turns + len(state.seen)
    flushes = add_turn(state, message, now, policy, seen_before)
    return state.to_dict(), flushes, state.pending_turns + len(state.seen) == before and not flushes
