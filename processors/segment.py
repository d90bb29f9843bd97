"""Stage 2: topic segmentation of a conversation's stream of turns.

Streaming form: each turn is assigned to a segment as it arrives. A new session always opens a
segment; otherwise a drop of cosine similarity between consecutive turns below the threshold does.
(The attention-based coarse candidates of the full hybrid design plug in here.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schemas import CompressedTurn, SegmentedTurn

from .ids import stable_id
from .text import topic_label


@dataclass
class SegmenterState:
    """Per-conversation state, JSON-serialisable for the changelog-backed table."""

    session_id: str | None = None
    segment_id: str | None = None
    topic_label: str = ""
    segment_index: int = 0
    last_vector: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "segment_id": self.segment_id,
            "topic_label": self.topic_label,
            "segment_index": self.segment_index,
            "last_vector": [round(float(x), 5) for x in self.last_vector],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SegmenterState:
        return cls(**data) if data else cls()


def segment_turn(
    state: SegmenterState, item: CompressedTurn, vector: np.ndarray, threshold: float
) -> SegmentedTurn:
    """Assign ``item`` to a segment, updating ``state`` in place."""
    turn = item.turn
    reason = "none"
    if state.segment_id is None:
        reason = "first"
    elif turn.session_id != state.session_id:
        reason = "session"
    elif state.last_vector:
        similarity = float(np.dot(np.asarray(state.last_vector, dtype=np.float32), vector))
        if similarity < threshold:
            reason = "similarity"
    boundary = reason != "none"
    if boundary:
        state.segment_index += 1
        state.segment_id = stable_id(item.tenant_id, item.conversation_id, turn.session_id, turn.turn_id)
        state.topic_label = topic_label(item.compressed_text)
    state.session_id = turn.session_id
    state.last_vector = vector.astype(float).tolist()
    return SegmentedTurn(
        tenant_id=item.tenant_id,
        conversation_id=item.conversation_id,
        item=item,
        segment_id=state.segment_id,
        topic_label=state.topic_label,
        boundary=boundary,
        boundary_reason=reason,
    )
