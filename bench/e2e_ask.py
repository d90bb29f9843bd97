"""Phase 2 of an end-to-end run (``bench.e2e``): every question over the request/reply topics, at
the configured K (with an answer when ``llm``), at each K of the budget sweep and filled to each
evidence-token budget; with ``llm`` the answer is judged. One JSON line per finished question in
``<out>/questions.jsonl``: a resumed run asks only the others."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from memstream.bench.cases import TENANT, BenchQuestion, BenchSet, score
from memstream.bench.deployment import Deployment
from memstream.bench.e2e_state import E2EOptions, append_record
from memstream.bench.report import source_commit
from memstream.bench.scoring import fill_k
from memstream.client import AsyncMemoryClient
from memstream.processors.query.answer import answer_messages
from memstream.processors.tokens import count_tokens
from memstream.schemas import Reply


class Asking:
    """The questions not asked yet, on a worker of its own; ``asked`` sees the questions finished."""

    def __init__(
        self,
        bench: BenchSet,
        options: E2EOptions,
        out: Path,
        *,
        status: Callable[[str], None],
        asked: Callable[[int, int], None],
    ):
        self.bench, self.options, self.out, self.status, self.asked = bench, options, out, status, asked

    def run(
        self,
        deployment: Deployment,
        questions: Sequence[BenchQuestion],
        done: int,
        *,
        judge: Any = None,  # an LLM port: with ``llm``, the answers' judge
        models: str = "",  # who answers and who judges, for the status line
    ) -> None:
        self.status("starting a worker (all stages) for the questions")
        deployment.start_worker("ask")
        total = len(self.bench.questions)
        self.status(f"asking {len(questions)} questions over Kafka" + (f" ({models})" if models else ""))
        self.asked(done, total)
        asyncio.run(self._ask_all(deployment, questions, done, total, judge))
        deployment.stop_workers()

    async def _ask_all(
        self, deployment: Deployment, questions: Sequence[BenchQuestion], done: int, total: int, judge_llm: Any
    ) -> None:
        from memstream.bench.judge import Judge

        judge = Judge(judge_llm) if judge_llm is not None else None
        commit = source_commit()
        async with AsyncMemoryClient(deployment.settings) as client:
            for q in questions:
                record = await self._ask_one(client, q)
                record["commit"] = commit
                if judge is not None:
                    record["judge"] = await asyncio.to_thread(
                        judge_answer, judge, self.bench.name, q, record["answer"] or ""
                    )
                    wrong = control_answer(self.bench.questions, q)
                    if wrong is not None:
                        record["judge_control"] = await asyncio.to_thread(
                            judge_answer, judge, self.bench.name, q, wrong
                        )
                append_record(self.out, record)
                done += 1
                self.asked(done, total)

    async def _ask_one(self, client: AsyncMemoryClient, q: BenchQuestion) -> dict[str, Any]:
        """The question at the configured K, at each swept K and filled to each token budget."""

        async def ask(**how: Any) -> Reply:
            return await client.ask(
                q.text,
                tenant_id=TENANT,
                conversation_id=q.conversation_id,
                question_time=q.asked_at,
                timeout_s=self.options.ask_timeout_s,
                **how,
            )

        t0 = time.perf_counter()
        # an error reply is a scored outcome
        reply = await ask(k=self.options.k, answer=self.options.llm, raise_on_error=False)
        record = question_record(q, reply, (time.perf_counter() - t0) * 1000.0)
        for k in self.options.sweep_k:
            record["sweep"][str(k)] = reply_context(q, await ask(k=k, answer=False))
        for budget in self.options.sweep_tokens:
            filled = await ask(k=fill_k(budget), max_tokens=budget, answer=False)
            record["budgets"][str(budget)] = reply_context(q, filled)
        return record


def provenance(reply: Reply) -> list[str]:
    """The turn ids behind the returned evidence, in rank order, each once."""
    seen: dict[str, None] = {}
    for e in reply.evidence:
        for t in e.turn_ids:
            seen.setdefault(t, None)
    return list(seen)


def reader_context(question: str, reply: Reply) -> str:
    """Everything the answer call would receive for this reply (``processors.query.answer_messages``:
    the system prompt, the evidence lines, the speaker profile, the question); no LLM is called."""
    operation = reply.plan.operation if reply.plan is not None else "lookup"
    messages = answer_messages(question, operation, reply.evidence, reply.profile_text)
    return "\n".join(m["content"] for m in messages)


def context_texts(reply: Reply) -> list[str]:
    """The texts a reader gets from a reply, in rank order: the evidence, then the speaker profile."""
    return [e.text for e in reply.evidence] + ([reply.profile_text] if reply.profile_text else [])


def reply_context(q: BenchQuestion, reply: Reply) -> dict[str, Any]:
    """What a reply returned, as the report scores it: provenance, tokens (evidence only, and all the
    answer call would read), texts (answer-bearing recall) and turn ids per evidence item."""
    turn_ids = provenance(reply)
    return {
        "evidence_items": len(reply.evidence),
        "context_tokens": reply.context_tokens,
        "reader_tokens": count_tokens(reader_context(q.text, reply)),
        "turns_per_evidence": [len(set(e.turn_ids)) for e in reply.evidence],
        "turn_ids": turn_ids,
        "scores": score(q, turn_ids),
        "context_texts": context_texts(reply),
    }


def question_record(q: BenchQuestion, reply: Reply, latency_ms: float) -> dict[str, Any]:
    return {
        "qid": q.qid,
        "group": q.group,
        "abstention": q.abstention,
        "ok": reply.ok,
        "error": reply.error,
        "latency_ms": round(latency_ms, 1),
        "worker_latency_ms": reply.latency_ms,
        "profile": reply.access_profile,
        **reply_context(q, reply),
        "answer": reply.answer,
        "answer_mode": reply.answer_mode,
        "costs": [c.model_dump(mode="json") for c in reply.costs],
        "sweep": {},
        "budgets": {},
    }


def judge_answer(judge: Any, bench: str, q: BenchQuestion, answer: str) -> dict[str, Any]:
    from memstream.bench.judge import bleu1, token_f1

    unreadable = judge.unreadable
    if bench == "locomo":
        correct, cost = judge.locomo(q.text, q.gold_answer, answer)
        extra = {"f1": round(token_f1(answer, q.gold_answer), 4), "bleu1": round(bleu1(answer, q.gold_answer), 4)}
    else:
        correct, cost = judge.longmemeval(q.group, q.qid, q.text, q.gold_answer, answer)
        extra = {}
    return {
        "correct": correct,
        "readable": judge.unreadable == unreadable,
        "cost": cost.model_dump(mode="json"),
        **extra,
    }


CONTROLS = 20  # questions whose judge is also shown a wrong answer


def control_answer(questions: Sequence[BenchQuestion], q: BenchQuestion) -> str | None:
    """For about ``CONTROLS`` questions spread over the run, a wrong answer: the gold answer of a
    question half the list away (another one if that happens to be the same text). A judge that
    accepts it is not to be trusted; the report gives the rate."""
    i = questions.index(q)
    if i % max(1, len(questions) // CONTROLS):
        return None
    for step in range(len(questions) // 2 + 1, len(questions) // 2 + 1 + len(questions)):
        other = questions[(i + step) % len(questions)]
        if other is not q and other.gold_answer.strip().lower() != q.gold_answer.strip().lower():
            return other.gold_answer
    return None
