"""Stage 7: plan a question, retrieve evidence under hard tenant filters, answer.

Access profiles (JustMem): Lookup (local evidence), Compose (broader discovery: rewrites and the
topic → scene → item cascade, the same final K), Replay (Lookup, then the raw source turns).
The plan is :mod:`processors.query.plan`'s; retrieval, every step of it, :mod:`processors.query.evidence`'s
(signals, fusion and rerank in :mod:`processors.query.retrieve`); the answer call
:mod:`processors.query.answer`'s.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Callable

from memstream.ports import LLM, Embedder, Steps, VectorStore
from memstream.processors.query.answer import Answer, Answerer
from memstream.processors.query.budget import PLAN_SHARE, Budget, seconds_left
from memstream.processors.query.evidence import (
    EvidenceSearch,
)
from memstream.processors.query.options import QueryOptions
from memstream.processors.query.plan import Planner, planner_for
from memstream.processors.query.research import LlmReflector
from memstream.processors.steps import no_steps, timed
from memstream.processors.tokens import count_tokens
from memstream.schemas import Plan, Query, Reply, StageCost


def expired_reply(query: Query, now: datetime) -> Reply:
    """The reply to a query that arrived after its asker stopped waiting: an error, sent at once, so
    a backlog of abandoned questions never delays the ones still awaited."""
    late = (now - query.deadline).total_seconds() if query.deadline else 0.0
    return Reply(
        tenant_id=query.tenant_id,
        conversation_id=query.conversation_id,
        correlation_id=query.correlation_id,
        ok=False,
        error=f"expired: the query reached the worker {late:.1f}s after its deadline",
        replied_at=now,
    )


class QueryEngine:
    """Answers one query; every store call carries the query's tenant as a hard filter."""

    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        llm: LLM | None,
        options: QueryOptions,
        *,
        planner_llm: LLM | None = None,
        research_llm: LLM | None = None,
        steps: Steps = no_steps,
    ):
        self.steps = steps  # each step of a query, timed, to whoever watches (spans)
        self.store = store
        self.embedder = embedder
        self.llm = llm  # answers
        self.options = options
        planner_llm = planner_llm or llm
        self.planner: Planner = planner_for(options.planner, planner_llm)
        # The research loop reflects with the LLM planner's LLM; by rules otherwise, the hybrid
        # planner's included (it is there to save calls).
        use_llm = planner_llm is not None and options.planner == "llm"
        self.reflector = LlmReflector(research_llm or planner_llm) if use_llm else None  # type: ignore[arg-type]
        self.search = EvidenceSearch(store, embedder, options, self.reflector, steps)
        self.answerer = None if llm is None else Answerer(llm, options.max_answer_tokens, steps)

    def plan(self, query: Query, now: datetime, timeout_s: float | None = None) -> tuple[Plan, StageCost]:
        plan, cost = self.planner.plan(query.question, now, timeout_s=timeout_s)
        if query.profile != "auto":
            plan = plan.model_copy(update={"profile": query.profile})
        return plan, cost

    def run(self, query: Query, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> Reply:
        """Plan, retrieve, answer. With a deadline, LLM calls are cut to what is left of it: the reply
        then carries the evidence and ``answer_error`` instead of arriving after the asker gave up."""
        started = time.perf_counter()
        latency: dict[str, float] = {}
        costs: list[StageCost] = []
        now = query.question_time or clock()

        with timed(latency, "plan", self.steps) as step:
            left = seconds_left(query.deadline, clock())
            plan, plan_cost = self.plan(query, now, None if left is None else max(0.0, left * PLAN_SHARE))
            if plan_cost.calls:  # the rule planner spends nothing
                costs.append(plan_cost)
            step.update({"memstream.profile": plan.profile, "memstream.operation": plan.operation})

        found = self.search.gather(query, plan, Budget(query.max_tokens, query.deadline, clock, costs), latency)
        plan = plan.model_copy(update={"rounds": found.rounds})

        answer = Answer()
        if self.answerer is not None and query.answer:
            answer = self.answerer.answer(query, plan, found, clock, latency, costs)
        latency["total_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
        return Reply(
            tenant_id=query.tenant_id,
            conversation_id=query.conversation_id,
            correlation_id=query.correlation_id,
            answer=answer.text,
            answer_mode=answer.mode,  # type: ignore[arg-type]
            answer_error=answer.error,
            evidence=found.evidence,
            plan=plan,
            access_profile=plan.profile,
            profile_text=found.profile_text,
            context_tokens=sum(count_tokens(e.text) for e in found.evidence),
            costs=costs,
            latency_ms=latency,
            replied_at=datetime.now(timezone.utc),
        )


__all__ = ["QueryEngine", "QueryOptions", "expired_reply"]
