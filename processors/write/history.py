"""Positions for imported history: each conversation's turns in the order they happened, numbered
before the conversation's live turns.

Live turns are numbered from 0 by the segment stage as they arrive. History imported later, or while
the conversation goes on, must still come first in the conversation's order (the timeline, Replay's
neighbouring turns): its N turns of a conversation get positions -N..-1, by event time (ties keep
the order they were given in). A turn its producer numbered keeps its position.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from memstream.schemas import Turn


def number_history(turns: Iterable[Turn]) -> list[Turn]:
    """The turns, each conversation's in event-time order (conversations in the order they first
    appear), those without a position numbered -N..-1 within their conversation."""
    by_conversation: dict[tuple[str, str], list[Turn]] = defaultdict(list)
    for turn in turns:
        by_conversation[(turn.tenant_id, turn.conversation_id)].append(turn)
    out: list[Turn] = []
    for conversation in by_conversation.values():
        ordered = sorted(conversation, key=lambda t: t.event_time)  # stable: ties keep their order
        unnumbered = sum(1 for t in ordered if t.seq is None)
        position = -unnumbered
        for turn in ordered:
            if turn.seq is None:
                turn = turn.model_copy(update={"metadata": {**turn.metadata, "seq": position}})
                position += 1
            out.append(turn)
    return out
