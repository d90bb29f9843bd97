"""Recent turn ids of a conversation, for dropping redelivered turns, kept in fixed-size pieces.

A per-conversation table entry is rewritten whole on every turn. Were its duplicate-detection ids one
list, a long conversation's every turn would rewrite up to thousands of ids to the changelog: its
bytes per turn would grow with the conversation. Instead the entry holds only the open piece (fewer
than ``piece_ids`` ids); a full piece is sealed, written once under a key of its own and deleted
when it falls out of what is remembered. A turn's changelog bytes no longer depend on how long its
conversation is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SealedPiece:
    index: int
    ids: list[str]


@dataclass(frozen=True)
class Roll:
    """What sealing the open piece changes: the entry's open ids and sealed count after it, the pieces
    to write (new) and the piece indices to delete (fallen out of memory)."""

    open_ids: list[str]
    sealed: int
    write: list[SealedPiece]
    delete: list[int]


@dataclass(frozen=True)
class SeenPieces:
    """At least ``remember`` ids are remembered: the open piece and the newest sealed pieces."""

    remember: int
    piece_ids: int = 32

    def __post_init__(self) -> None:
        if self.remember < 1 or self.piece_ids < 1:
            raise ValueError(f"remember and piece_ids must be positive: {self.remember}, {self.piece_ids}")

    @property
    def pieces_kept(self) -> int:
        return -(-self.remember // self.piece_ids)

    def live(self, sealed: int) -> range:
        """The indices of the sealed pieces still remembered, of ``sealed`` sealed so far."""
        return range(max(0, sealed - self.pieces_kept), sealed)

    def roll(self, open_ids: list[str], sealed: int) -> Roll | None:
        """Seal every full piece of ``open_ids`` (an entry written by an older worker may hold many);
        None when the open piece is not full."""
        if len(open_ids) < self.piece_ids:
            return None
        before = self.live(sealed)
        write = []
        while len(open_ids) >= self.piece_ids:
            write.append(SealedPiece(sealed, open_ids[: self.piece_ids]))
            open_ids, sealed = open_ids[self.piece_ids :], sealed + 1
        after = self.live(sealed)
        write = [p for p in write if p.index in after]
        return Roll(open_ids, sealed, write, [i for i in before if i not in after])


def piece_key(key: str, index: int) -> str:
    """The table key of a conversation's sealed piece ``index`` (``key``: the conversation's)."""
    return f"{key}#{index}"
