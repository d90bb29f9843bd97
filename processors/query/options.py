"""The query engine's settings: retrieval's, replay's, fresh turns', the answer's and the planner."""

from __future__ import annotations

from dataclasses import dataclass, field

from memstream.processors.query.retrieve import RetrievalParams


@dataclass(frozen=True)
class QueryOptions:
    retrieval: RetrievalParams = field(default_factory=RetrievalParams)
    replay_window: int = 1
    replay_max_tokens: int = 1200
    max_answer_tokens: int = 256
    planner: str = "rules"  # or "llm", "hybrid" (plan.PLANNER_MODES; both need the engine's LLM)
    fresh_k: int = 3  # fresh turns (said, in no card yet) added after the evidence; 0 = none


__all__ = ["QueryOptions"]
