"""Stage 1: pre-compression of a turn; the raw text stays on the turn for Replay."""

from __future__ import annotations

import re
from datetime import datetime

from memstream.ports import Compressor
from memstream.processors.tokens import count_tokens
from memstream.schemas import CompressedTurn, FreshTurn, Turn
from memstream.schemas.base import CHUNK_MARK

# Digits, dates and capitalised names must survive compression whatever the compressor thinks.
_MUST_KEEP = re.compile(r"\b(?:\d[\w:/.\-]*|[A-Z][a-z]+)\b")


def protected_words(turn: Turn) -> list[str]:
    words = set(_MUST_KEEP.findall(turn.text))
    words.add(turn.speaker)
    return sorted(words)


_BREAKS = ("\n\n", "\n", ". ", "! ", "? ", "; ", ", ", " ")


def split_turn(turn: Turn, max_chars: int) -> list[Turn]:
    """A turn longer than ``max_chars`` as chunks of at most that many characters, cut at the last
    paragraph, line, sentence or word break that fits (a hard cut only without one). Each chunk
    keeps the turn's speaker, time and session, and takes its id as a prefix (``D3:4#2``), so its
    provenance still names the turn; only the last chunk closes the session."""
    if len(turn.text) <= max_chars:
        return [turn]
    pieces: list[str] = []
    rest = turn.text
    while len(rest) > max_chars:
        window = rest[:max_chars]
        # The strongest break in the second half of the window (a paragraph before a sentence ...).
        cut = next((window.rfind(b) + len(b) for b in _BREAKS if window.rfind(b) > max_chars // 2), max_chars)
        piece, rest = rest[:cut].strip(), rest[cut:]
        if piece:
            pieces.append(piece)
    if rest.strip():
        pieces.append(rest.strip())
    n = len(pieces)
    data = turn.model_dump()
    return [
        Turn.model_validate(  # validated: a chunk id must still be a valid id
            {
                **data,
                "turn_id": f"{turn.turn_id}{CHUNK_MARK}{i}",
                "text": piece,
                "last_in_session": turn.last_in_session and i == n,
                "metadata": {**turn.metadata, "chunk": i, "chunks": n, "chunk_of": turn.turn_id},
            }
        )
        for i, piece in enumerate(pieces, 1)
    ]


def compress_turn(
    turn: Turn, compressor: Compressor | None, keep_rate: float, received_at: datetime | None = None
) -> CompressedTurn:
    """Compress one turn's text; with no compressor the text passes through unchanged."""
    tokens_in = count_tokens(turn.text)
    if compressor is None:
        text, name = turn.text, "off"
    else:
        text = compressor.compress(turn.text, keep_rate=keep_rate, force_keep=protected_words(turn))
        name = compressor.name
        if not text.strip():
            text = turn.text  # never lose a turn to an over-eager compressor
    return CompressedTurn(
        tenant_id=turn.tenant_id,
        conversation_id=turn.conversation_id,
        turn=turn,
        compressed_text=text,
        tokens_in=tokens_in,
        tokens_out=count_tokens(text),
        compressor=name,
        received_at=received_at,
    )


def fresh_turn(item: CompressedTurn) -> FreshTurn:
    """The early write of a turn let in (``memory.cards``, keyed like the conversation's later writes):
    the raw text, retrievable before the STM flushes it into cards."""
    return FreshTurn(
        tenant_id=item.tenant_id, conversation_id=item.conversation_id, turn=item.turn, received_at=item.received_at
    )
