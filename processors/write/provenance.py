"""Which source turns a statement came from, where the statement does not say precisely: an LLM card
that cites more turns than a card can rest on, a profile item (the profile of a flush names all its
speaker's turns). The turns whose content words the statement shares most are its provenance; the
others would only widen it (a reader would be shown turns that say nothing of it).

Pure: no store, no LLM.
"""

from __future__ import annotations

from typing import Sequence

from memstream.processors.text import content_words


def _stem(word: str) -> str:
    # Enough to match "hiking"/"hike", "paintings"/"painting" without a stemmer.
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _words(text: str) -> set[str]:
    return {_stem(w) for w in content_words(text)}


def overlap(statement: str, text: str) -> int:
    """Content words (crudely stemmed) the two texts share."""
    return len(_words(statement) & _words(text))


def supporting_turns(statement: str, turns: Sequence[tuple[str, str]], limit: int) -> list[str]:
    """Up to ``limit`` ids of ``turns`` (``(turn_id, text)`` in conversation order) sharing the most
    content words with ``statement``, back in conversation order; ties go to the earlier turn. Turns
    that share none are left out, so the result may be empty."""
    scored = [(overlap(statement, text), -i, turn_id) for i, (turn_id, text) in enumerate(turns)]
    best = sorted((s for s in scored if s[0] > 0), reverse=True)[:limit]
    order = {turn_id: i for i, (turn_id, _) in enumerate(turns)}
    return sorted((turn_id for _, _, turn_id in best), key=order.__getitem__)


def capped_provenance(statement: str, cited: Sequence[tuple[str, str]], limit: int) -> list[str]:
    """A card's cited turns cut to ``limit``: the ones that support its text best (all of them when
    they are few enough; the first ``limit`` when none shares a word)."""
    ids = [turn_id for turn_id, _ in cited]
    if len(ids) <= limit:
        return ids
    return supporting_turns(statement, cited, limit) or ids[:limit]
