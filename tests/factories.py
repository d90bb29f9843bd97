"""Builders of valid payloads for unit tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np

from memstream.processors.write.compress import compress_turn
from memstream.schemas import CompressedTurn, SegmentedTurn, Turn

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)


def turn(
    turn_id: str = "D1:1",
    text: str = "I went to the museum in Lisbon yesterday.",
    *,
    session: str = "S1",
    speaker: str = "Caroline",
    tenant: str = "t1",
    conversation: str = "c1",
    seq: int = 0,
    last: bool = False,
    minutes: int = 0,
) -> Turn:
    return Turn(
        tenant_id=tenant,
        conversation_id=conversation,
        session_id=session,
        turn_id=turn_id,
        speaker=speaker,
        text=text,
        event_time=T0 + timedelta(minutes=minutes),
        metadata={"seq": seq},
        last_in_session=last,
    )


def compressed(t: Turn) -> CompressedTurn:
    return compress_turn(t, None, 0.7)


def segmented(t: Turn, segment_id: str = "seg1", boundary: bool = False) -> SegmentedTurn:
    ct = compressed(t)
    return SegmentedTurn(
        tenant_id=t.tenant_id,
        conversation_id=t.conversation_id,
        item=ct,
        segment_id=segment_id,
        topic_label="topic",
        boundary=boundary,
    )


class EmptyStore:
    """A store that holds nothing: every read comes back empty."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: 0 if name == "count" else []


class ZeroEmbedder:
    """Every text embeds to zeros."""

    dim = 8

    def embed(self, texts):
        return np.zeros((len(texts), self.dim), dtype=np.float32)
