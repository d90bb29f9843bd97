"""Characters that show nothing: whitespace, zero-width characters and bidi controls. A speaker made
only of them is no name (it would show in evidence as an invisible one); bidi controls in text are
kept as they came, and isolated wherever memstream shows text, so they cannot reorder what is
around it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only the type: .query imports what imports this module
    from .query import Reply

# As regex escapes, not the characters themselves: the same text is a Python and an ECMA-262 pattern
# (the JSON Schema of a turn says it too, readable).
_WHITESPACE = r"\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_ZERO_WIDTH = r"\u200b-\u200d\u2060\ufeff"
_BIDI_CONTROLS = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"

# At least one character that is none of them: a name someone can see (a search, unanchored).
VISIBLE_PATTERN = f"[^{_WHITESPACE}{_ZERO_WIDTH}{_BIDI_CONTROLS}]"
_VISIBLE = re.compile(VISIBLE_PATTERN)

LRE, RLE, PDF, LRO, RLO = "\u202a", "\u202b", "\u202c", "\u202d", "\u202e"
LRI, RLI, FSI, PDI = "\u2066", "\u2067", "\u2068", "\u2069"
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f" + LRE + RLE + PDF + LRO + RLO + LRI + RLI + FSI + PDI)
_OPENERS = {LRE: PDF, RLE: PDF, LRO: PDF, RLO: PDF, LRI: PDI, RLI: PDI, FSI: PDI}  # -> what closes it

INVISIBLE_SPEAKER = "speaker has no visible character (only whitespace, zero-width or bidi control characters)"


def has_visible(text: str) -> bool:
    """``text`` has a character that is not whitespace, zero-width or a bidi control."""
    return _VISIBLE.search(text) is not None


def isolate_bidi(text: str) -> str:
    """``text`` as it may be shown among other text: unchanged without bidi controls; otherwise
    inside FIRST STRONG ISOLATE ... POP DIRECTIONAL ISOLATE, with every embedding, override or
    isolate it opens closed before the end, and closers it did not open dropped (they would close
    the isolate early). What is around it then keeps its order (Unicode's bidi algorithm, UAX #9)."""
    if not BIDI_CONTROLS.intersection(text):
        return text
    kept: list[str] = []
    open_: list[str] = []  # the closer each opened control still needs, innermost last
    for ch in text:
        if ch in _OPENERS:
            open_.append(_OPENERS[ch])
        elif ch == PDF:
            if not open_ or open_[-1] != PDF:
                continue  # closes nothing of its own
            open_.pop()
        elif ch == PDI:
            if PDI not in open_:
                continue
            while open_.pop() != PDI:  # a PDI also ends the embeddings opened inside its isolate
                pass
        kept.append(ch)
    return FSI + "".join(kept) + "".join(reversed(open_)) + PDI


def _isolated(text: str | None) -> str | None:
    return text if text is None else isolate_bidi(text)


def isolated_reply(reply: Reply) -> Reply:
    """``reply`` as it is shown (the gateway's JSON, its MCP tool): the answer, the profile and each
    piece of evidence's text and subject with their bidi controls isolated (``isolate_bidi``)."""
    evidence = [
        e.model_copy(update={"text": isolate_bidi(e.text), "subject": _isolated(e.subject)}) for e in reply.evidence
    ]
    return reply.model_copy(
        update={"answer": _isolated(reply.answer), "profile_text": _isolated(reply.profile_text), "evidence": evidence}
    )
