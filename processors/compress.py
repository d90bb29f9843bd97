"""Stage 1: pre-compression of a turn; the raw text stays on the turn for Replay."""

from __future__ import annotations

import re
from datetime import datetime

from memstream.ports import Compressor
from memstream.schemas import CompressedTurn, Turn

from .tokens import count_tokens

# Digits, dates and capitalised names must survive compression whatever the compressor thinks.
_MUST_KEEP = re.compile(r"\b(?:\d[\w:/.\-]*|[A-Z][a-z]+)\b")


def protected_words(turn: Turn) -> list[str]:
    words = set(_MUST_KEEP.findall(turn.text))
    words.add(turn.speaker)
    return sorted(words)


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
