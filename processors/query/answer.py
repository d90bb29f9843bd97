"""The answer call: the evidence lines, the speaker profile and the question to the LLM, within what
is left of the asker's deadline; when it fails or there is no time, the reply carries the evidence
alone and why."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Sequence

from memstream.ports import LLM, LLMError, Steps
from memstream.processors.query import prompts
from memstream.processors.query.budget import REPLY_MARGIN_S, seconds_left
from memstream.processors.query.evidence import Found
from memstream.processors.steps import timed
from memstream.schemas import Evidence, Plan, Query, StageCost

log = logging.getLogger(__name__)

MIN_ANSWER_S = 1.0  # an answer call with less time than this left is not started


def answer_messages(
    question: str, operation: str, evidence: Sequence[Evidence], profile_text: str | None
) -> list[dict[str, str]]:
    """What the answer call receives: the system prompt, then the evidence lines (id, date, text),
    the speaker profile and the question (the benches count its tokens as the reader's)."""
    lines = [
        f"[{e.evidence_id}] {e.event_time.date().isoformat() if e.event_time else 'undated'} {e.text}" for e in evidence
    ]
    return [
        {"role": "system", "content": prompts.ANSWER_SYSTEM},
        {"role": "user", "content": prompts.answer_user(question, lines, operation, profile_text)},
    ]


@dataclass(frozen=True)
class Answer:
    """The answer (None: an evidence-only reply), how it was made, and why there is none."""

    text: str | None = None
    mode: str = "evidence_only"
    error: str | None = None


class Answerer:
    """Answers from the evidence with ``llm``, ``max_tokens`` at most."""

    def __init__(self, llm: LLM, max_tokens: int, steps: Steps):
        self.llm = llm
        self.max_tokens = max_tokens
        self.steps = steps

    def answer(
        self,
        query: Query,
        plan: Plan,
        found: Found,
        clock: Callable[[], datetime],
        latency: dict[str, float],
        costs: list[StageCost],
    ) -> Answer:
        """The answer in the time the deadline leaves (none started with under ``MIN_ANSWER_S``); its
        cost into ``costs``, its latency into ``latency``."""
        left = seconds_left(query.deadline, clock())
        if left is not None and left < MIN_ANSWER_S:
            return Answer(error=f"no time left to answer before the deadline ({left + REPLY_MARGIN_S:.1f}s)")
        with timed(latency, "answer", self.steps) as step:
            text, cost, error = self.complete(query.question, plan, found.evidence, found.profile_text, left)
            costs.append(cost)
            mode = "llm" if text is not None else "evidence_only"
            step.update({"memstream.answer_mode": mode, "memstream.evidence": len(found.evidence)})
        return Answer(text, mode, error)

    def complete(
        self, question: str, plan: Plan, evidence: list[Evidence], profile_text: str | None, timeout_s: float | None
    ) -> tuple[str | None, StageCost, str | None]:
        """The answer and its cost, or no answer and why (evidence-only reply)."""
        messages = answer_messages(question, plan.operation, evidence, profile_text)
        try:
            result = self.llm.complete(messages, max_tokens=self.max_tokens, timeout_s=timeout_s)
        except LLMError as exc:
            log.warning("answer call failed, replying with evidence only: %s", exc)
            # The call was made: it counts, its tokens unknown.
            return (
                None,
                StageCost(stage="answer", calls=1, model=self.llm.model),
                f"answer call failed ({exc.kind}): {exc}"[:500],
            )
        cost = StageCost(
            stage="answer",
            calls=1,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            model=result.model,
        )
        return result.content.strip(), cost, None


__all__ = ["Answer", "Answerer", "MIN_ANSWER_S", "answer_messages"]
