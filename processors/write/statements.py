"""What a sentence states, by rule (the extractive mode has no LLM to ask): whether it is a question,
whether it states a preference, and whether that preference is the speaker's own.

A profile holds statements about its speaker, so a question ("What did it look like?"), "like" used
as a preposition ("It's like a cool form of self-expression") and someone else's taste ("My sister
loves jazz") stay out of it. The rules were chosen on ``bench/data/profile_statements_tune.jsonl``;
``memstream bench profile`` reports them on the held-out ``profile_statements_report.jsonl``.
"""

from __future__ import annotations

import re

_QUESTION_START = re.compile(
    r"^\s*(?:what|who|whom|whose|which|when|where|why|how|do|does|did|is|are|was|were|can|could|would|will|"
    r"should|have|has|had|shall|may|might|am)\b",
    re.I,
)
# Verb forms that are a preference whoever the subject is ("like" alone is often a preposition).
_PREF_VERB = re.compile(
    r"\b(?:lov(?:e|es|ed|ing)|likes|liked|enjoy(?:s|ed|ing)?|prefer(?:s|red)?|hat(?:e|es|ed)|dislik(?:e|es|ed)|"
    r"ador(?:e|es|ed)|favou?rite|can't stand|cannot stand|fan of)\b",
    re.I,
)
# "like" is a verb after a subject, an auxiliary or an intensifier; after "feel", "look", "seem",
# "sound", "just" or a form of "be" it is a comparison.
_LIKE_VERB = re.compile(
    r"\b(?:i|we|you|they|(?:do|does|did)(?:n't)?|don't|would|really|also|still|always|totally|to|not)\s+like\b",
    re.I,
)
_LIKE_COMPARISON = re.compile(
    r"\b(?:feel|feels|felt|feeling|look|looks|looked|looking|seem|seems|seemed|sound|sounds|sounded|just|"
    r"be|is|was|were|are|more|much|something|anything|things|stuff)\s+like\b",
    re.I,
)
_FIRST_PERSON_VERB = re.compile(
    r"\b(?:i|we)(?:'ve|'m)?\s+(?:[\w']+\s+){0,2}?(?:love|loved|like|liked|enjoy|enjoyed|prefer|preferred|hate|hated|"
    r"dislike|disliked|adore|adored)\b",
    re.I,
)
# "into" is a taste right after "I'm" and an intensifier ("I'm really into board games"); after a verb
# it is a phrasal verb ("I'm looking into adoption agencies", "we're moving into a flat").
_DEGREE = r"(?:not|a|an|such|big|huge|really|so|totally|very|quite|pretty|also|just|still|definitely)"
_FIRST_PERSON_OTHER = re.compile(
    r"\bmy\s+(?:\w+\s+)?favou?rite\b"
    rf"|\b(?:i'm|i am|we're|we are)\s+(?:{_DEGREE}\s+){{0,3}}(?:fan of|into)\b"
    r"|\b(?:i|we)\s+(?:can't|cannot|can not)\s+stand\b",
    re.I,
)
# A wish, not a taste: "I'd like to", "I would love to".
_WISH = re.compile(r"\b(?:i|we)(?:'d|\s+would)\s+(?:really\s+)?(?:love|like)\b", re.I)


def is_question(sentence: str) -> bool:
    text = sentence.strip()
    return text.endswith("?") or (bool(_QUESTION_START.match(text)) and not text.endswith((".", "!")))


def _like_as_verb(sentence: str) -> bool:
    return bool(_LIKE_VERB.search(sentence)) and not _LIKE_COMPARISON.search(sentence)


def states_preference(sentence: str) -> bool:
    """A statement (not a question) of someone's taste: what they like, love, prefer or cannot stand."""
    if is_question(sentence):
        return False
    return bool(_PREF_VERB.search(sentence)) or _like_as_verb(sentence)


def speakers_preference(sentence: str) -> bool:
    """A statement of the speaker's own taste ("I really enjoy hiking", "my favourite band is …"):
    the only kind of sentence the extractive mode files under the speaker's profile."""
    if is_question(sentence) or _WISH.search(sentence):
        return False
    if _FIRST_PERSON_OTHER.search(sentence):
        return True
    match = _FIRST_PERSON_VERB.search(sentence)
    if not match:
        return False
    if match.group(0).lower().endswith("like"):
        return not _LIKE_COMPARISON.search(sentence)
    return True
