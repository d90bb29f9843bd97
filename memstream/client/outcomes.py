"""What the SDK's writes report back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from memstream.schemas import ForgetReply


@dataclass
class ForgetOutcome:
    """What a forget removed, summed over its parts, and where raw text waits for retention.
    ``done`` is False when the caller did not wait (then only ``forget_id`` and ``parts`` are known)."""

    forget_id: str
    parts: int
    counts: dict[str, int] = field(default_factory=dict)
    retained: dict[str, datetime] = field(default_factory=dict)  # topic -> until
    replies: list[ForgetReply] = field(default_factory=list)
    done: bool = True

    @classmethod
    def of(cls, forget_id: str, parts: int, replies: list[ForgetReply]) -> ForgetOutcome:
        """The outcome of a forget whose every part replied: counts added up, the latest retention per topic."""
        counts: dict[str, int] = {}
        retained: dict[str, datetime] = {}
        for r in replies:
            for k, n in r.counts.items():
                counts[k] = counts.get(k, 0) + n
            for copy in r.retained:
                retained[copy.topic] = max(retained.get(copy.topic, copy.until), copy.until)
        return cls(forget_id, parts, counts, retained, replies)

    @property
    def store_points(self) -> int:
        return sum(n for k, n in self.counts.items() if k.startswith("store:") and k != "store:repaired")


@dataclass
class IngestOutcome:
    """What ``ingest`` put on the broker from a batch of platform events."""

    turns: int = 0
    forgets: list[str] = field(default_factory=list)  # forget ids (edits and deletions)
    dead_letters: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # event type -> count
