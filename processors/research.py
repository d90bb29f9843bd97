"""The research loop (AdaMem), rule path: a question that needs more than one hop (an aggregate, a
comparison, evidence spread over the conversation) is asked again with what the first hop found:
the names and things its best evidence mentions that the question does not. Rounds stop when one
brings no new source turn into the top K, or when they are spent. With an LLM the reflection would
be one call per round; this path costs none.

Pure: what to ask next, and whether a round added anything. The engine does the searching.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from memstream.schemas import Plan

from .text import keywords

RESEARCH_OPERATIONS = ("aggregate", "compare")


def needs_research(plan: Plan) -> bool:
    """Multi-hop by the plan: an aggregate or comparison, or evidence spread over the conversation."""
    return plan.operation in RESEARCH_OPERATIONS or plan.distributed


def follow_ups(question: str, found: Sequence[Mapping[str, object]], limit: int) -> list[str]:
    """The next round's queries: each name or thing the evidence so far mentions (its subject and
    entity triggers, best evidence first) that the question does not, with the question's keywords."""
    asked = question.lower()
    topic = " ".join(keywords(question, 4))
    names: list[str] = []
    for payload in found:
        raw = payload.get("entity_triggers")
        triggers = [str(t) for t in raw] if isinstance(raw, list) else []
        for name in [str(payload.get("subject") or ""), *triggers]:
            name = name.strip()
            if name and name.lower() not in asked and name.lower() not in (n.lower() for n in names):
                names.append(name)
    return [f"{name} {topic}".strip() for name in names[:limit]]


def turns_of(payloads: Iterable[Mapping[str, object]]) -> set[str]:
    out: set[str] = set()
    for payload in payloads:
        raw = payload.get("turn_ids")
        if isinstance(raw, list):
            out.update(str(t) for t in raw)
    return out
