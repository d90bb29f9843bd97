"""The research loop (AdaMem): a question that needs more than one hop (an aggregate, a comparison,
evidence spread over the conversation) is asked again with what the first hop found. Rounds stop
when one brings no new source turn into the top K, or when they are spent.

Reflection ("what is still missing?") chooses the next round's queries:
- rule path (no LLM, no cost): the names and things the best evidence mentions that the question
  does not (``follow_ups``);
- ``LlmReflector``: one JSON-schema call per round (counted as stage ``research``; one repair on
  invalid output), the rule path when it fails or returns nothing usable.

Pure apart from the reflector's call: the engine does the searching.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from memstream.ports import LLM
from memstream.processors.query import prompts
from memstream.processors.structured import StructuredCall, chat, clean_strings
from memstream.processors.text import keywords
from memstream.schemas import Plan, StageCost

log = logging.getLogger(__name__)

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


class ReflectionInvalid(ValueError):
    """The reflection output does not follow the schema."""


class _Reflection(BaseModel):
    model_config = ConfigDict(extra="ignore")

    missing: str = ""
    queries: list[str] = Field(default_factory=list)


_REFLECT = StructuredCall("research", "research_reflection", _Reflection, ReflectionInvalid)


class LlmReflector:
    """The research loop's reflection by one structured LLM call per round."""

    def __init__(self, llm: LLM, *, max_tokens: int = 160):
        self.llm = llm
        self.max_tokens = max_tokens
        self.fallbacks = 0

    def reflect(
        self,
        question: str,
        found: Sequence[Mapping[str, object]],
        limit: int,
        *,
        timeout_s: float | None = None,
    ) -> tuple[list[str], StageCost]:
        """The next round's queries (at most ``limit``) and what the call cost; on a failed call or
        output with no usable query, the rule path's follow-ups (and the cost of the call made)."""
        lines = [f"- {p.get('text', '')}" for p in found]
        attempt = _REFLECT.ask(
            self.llm,
            chat(prompts.RESEARCH_SYSTEM, prompts.research_user(question, lines)),
            prompts.research_schema(limit),
            max_tokens=self.max_tokens,
            timeout_s=timeout_s,
            read=_REFLECT.parse,
        )
        if attempt.value is None:
            self.fallbacks += 1
            log.info("research reflection failed (%s): rule follow-ups", attempt.error)
            return follow_ups(question, found, limit), attempt.cost
        asked = " ".join(question.lower().split())
        # No query: the model finds nothing missing, and the loop stops.
        return [q for q in clean_strings(attempt.value.queries, limit) if q.lower() != asked], attempt.cost
