"""Which input messages a table entry already reflects, so that a replay does not apply them twice.

A stage writes its outputs, then its table entry, and only after both may the input offset commit;
the commit runs on an interval. A worker killed in between leaves the changelog ahead of the
committed offset: the next owner recovers the entry as it was after message N and is handed
messages from before N again. Replaying a turn against that entry is harmless (the buffer knows the
turn ids it has seen), but a tick is not: an idle tick handled again, later, against a buffer that
has since taken more turns, flushes a different set of turns than it did the first time, and turns
of that flush were already flushed once with others (two memory writes holding the same turns).

So an entry carries the partition and offset of the last input message it reflects (``_applied``),
and a message at or before that offset is skipped: its outputs were acknowledged before the entry was
written. A conversation's messages all live in one partition and are handled in offset order."""

from __future__ import annotations

from typing import Any

APPLIED = "_applied"  # [partition, offset] of the last input message the entry reflects


def reflects(value: Any, partition: int, offset: int) -> bool:
    """The table entry already reflects the message at ``partition``/``offset``."""
    if not isinstance(value, dict) or offset < 0:
        return False
    stamp = value.get(APPLIED)
    return isinstance(stamp, list) and len(stamp) == 2 and stamp[0] == partition and offset <= stamp[1]


def stamped(value: Any, partition: int, offset: int) -> Any:
    """``value`` marked as reflecting every message of its key up to ``partition``/``offset``."""
    if not isinstance(value, dict) or offset < 0:
        return value
    return {**value, APPLIED: [partition, offset]}
