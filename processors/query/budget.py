"""What one query may spend: time before its asker's deadline, evidence tokens, and the account of
the LLM calls and research rounds its retrieval made."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from memstream.schemas import StageCost

REPLY_MARGIN_S = 1.0  # kept back from the asker's deadline for the reply to travel back
PLAN_SHARE = 1 / 3  # of the time left, what an LLM planner (or reflector) may spend (the answer needs the rest)


def seconds_left(deadline: datetime | None, now: datetime) -> float | None:
    """Time left before ``deadline`` for work whose result must still reach the asker (None: no deadline)."""
    if deadline is None:
        return None
    return (deadline - now).total_seconds() - REPLY_MARGIN_S


@dataclass
class Budget:
    """What one query may spend while retrieving: evidence tokens, time before the deadline; where
    the LLM calls it makes are counted, and how many research rounds its latest loop made (the plan
    states them)."""

    max_tokens: int | None = None
    deadline: datetime | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    costs: list[StageCost] = field(default_factory=list)
    rounds: int = 1

    def seconds_left(self) -> float | None:
        return seconds_left(self.deadline, self.clock())


__all__ = ["Budget", "PLAN_SHARE", "REPLY_MARGIN_S", "seconds_left"]
