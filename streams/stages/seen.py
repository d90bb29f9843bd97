"""A held-turns stage's recent turn ids in pieces (processors/write/seen_ids.py): the sealed pieces live
in the stage's seen table, keyed ``<conversation key>#<n>``; the open piece stays in the entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faust.types import TableT

from memstream.processors.write.seen_ids import SeenPieces, piece_key

from .api import StageContext

OPEN, SEALED = "seen", "seen_sealed"  # the entry's fields: open piece, pieces sealed so far


@dataclass(frozen=True)
class EarlierIds:
    """The ids of a conversation's remembered sealed pieces, looked up on demand (``in``)."""

    table: TableT
    key: str
    indices: range

    def __contains__(self, turn_id: object) -> bool:
        return any(turn_id in (self.table.get(piece_key(self.key, i)) or ()) for i in self.indices)


@dataclass(frozen=True)
class SeenTable:
    ctx: StageContext
    stage: str
    table: TableT
    pieces: SeenPieces

    def earlier(self, key: str, data: Any) -> EarlierIds:
        """The ids in the sealed pieces of the conversation whose entry is ``data``."""
        return EarlierIds(self.table, key, self.pieces.live(int((data or {}).get(SEALED, 0))))

    def seen(self, key: str, data: Any, turn_id: str) -> bool:
        return turn_id in (data or {}).get(OPEN, ()) or turn_id in self.earlier(key, data)

    async def seal(self, key: str, entry: dict[str, Any]) -> None:
        """Seal the entry's full open piece, before the entry is saved: pieces that fall out of memory
        go first, then the new piece, each durable; ``entry`` is changed to match. A crash between
        these writes and the entry's leaves the entry as it was, and the replay writes the same."""
        roll = self.pieces.roll(list(entry.get(OPEN, [])), int(entry.get(SEALED, 0)))
        if roll is None:
            return
        for index in roll.delete:
            await self.ctx.delete_state(self.stage, self.table, piece_key(key, index), evicted=False)
        for piece in roll.write:
            await self.ctx.save_state(self.table, piece_key(key, piece.index), piece.ids)
        entry[OPEN], entry[SEALED] = roll.open_ids, roll.sealed

    async def drop(self, key: str, data: Any) -> None:
        """Delete the conversation's sealed pieces (its entry is being evicted), before the entry."""
        for index in self.pieces.live(int((data or {}).get(SEALED, 0))):
            await self.ctx.delete_state(self.stage, self.table, piece_key(key, index), evicted=False)
