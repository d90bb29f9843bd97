"""Tests of memstream.platforms; ``events`` reads the payloads under tests/fixtures/platforms."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from memstream.platforms import Mapped, load_events
from memstream.processors.forgetting.forget import ForgetScope
from memstream.schemas import Turn
from memstream.schemas.base import ID_PATTERN

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"


def events(fmt: str) -> list[Any]:
    return load_events(fmt, FIXTURES / f"{fmt}.json")


def scope_of(removal: Any) -> ForgetScope:
    """The forget a removal becomes: what the pipeline would erase for it."""
    return ForgetScope(removal.tenant_id, removal.conversation_id, None, frozenset(removal.turn_ids), removal.before)


def covered(removal: Any, turn: Turn) -> bool:
    return scope_of(removal).covers_turn(turn)


def valid_id(value: str) -> bool:
    return re.match(ID_PATTERN, value) is not None


def by_id(result: Mapped) -> dict[str, Turn]:
    return {t.turn_id: t for t in result.turns}


def rejections(result: Mapped) -> list[tuple[int, str, str | None]]:
    """Each rejected event's place in the input, reason and tenant."""
    return [(r.index, r.reason, r.tenant_id) for r in result.rejected]
