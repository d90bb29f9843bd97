"""Small text utilities shared by the extractive paths (sentences, keywords, names)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Iterable, TypeVar

Label = TypeVar("Label")
# A rule of a classifier by patterns: a test of the text (a pattern's ``search``, any predicate) and
# the label it gives.
Rule = tuple[Callable[[str], object], Label]

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves yeah yes oh hey hi hello wow thanks
    thank really so also got get gets getting going go went like just lot lots much many one things
    thing im i'm it's that's don't didn't can't you're i've i'd i'll we're they're let's well sure
    know think feel glad great good awesome amazing cool nice love totally super definitely""".split()
)

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'A-Z0-9])")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]+")
_NAME = re.compile(r"\b([A-Z][A-Za-z]+(?:\s+[A-Z][A-Za-z]+)*)\b")
PRONOUNS = frozenset("i me my mine we us our you your he him his she her they them their it its".split())


def sentences(text: str) -> list[str]:
    parts = [p.strip() for p in _SENTENCE_SPLIT.split(text.strip())]
    return [p for p in parts if p]


def content_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.lower() not in STOPWORDS]


def keywords(text: str, limit: int = 4) -> list[str]:
    counts = Counter(content_words(text))
    return [w for w, _ in counts.most_common(limit)]


def topic_label(text: str, limit: int = 4) -> str:
    words = keywords(text, limit)
    return " ".join(words) if words else "small talk"


def names(text: str) -> list[str]:
    """Capitalised spans that are not sentence-initial function words: cheap entity triggers."""
    out: list[str] = []
    for m in _NAME.finditer(text):
        span = m.group(1)
        first = span.split()[0].lower()
        if first in STOPWORDS or first in PRONOUNS:
            rest = span.split()[1:]
            if not rest:
                continue
            span = " ".join(rest)
        if span not in out:
            out.append(span)
    return out


POSSESSIVE = {"someone": "someone's", "they": "their"}


def without_names(text: str, drop: Iterable[str], word: str = "someone") -> str:
    """``text`` with each name in ``drop`` made ``word`` ("Caroline's" → "someone's"): the
    question's content, for matching cards whose speaker prefix would otherwise win on the name
    alone. ``word`` is one of ``POSSESSIVE`` (the others were the alternatives tried)."""
    out = text
    for name in sorted({n for n in drop if n}, key=len, reverse=True):
        quoted = re.escape(name)
        out = re.sub(rf"\b{quoted}(?:['’]s\b|(?<=s)['’](?!\w))", POSSESSIVE[word], out)  # Ann's, James'
        out = re.sub(rf"\b{quoted}\b", word, out)
    return out


def first_match(text: str, rules: Iterable[Rule[Label]], default: Label) -> Label:
    """The label of the first rule whose test holds for ``text``; ``default`` when none does."""
    return next((label for test, label in rules if test(text)), default)
