"""Stage 7: plan a question, retrieve evidence under hard tenant filters, answer.

Access profiles (JustMem): Lookup (local evidence), Compose (broader discovery, same final K),
Replay (follow provenance to the raw source turns).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Sequence

from memstream.ports import LLM, Embedder, LLMError, StoreFilter, StoreHit, VectorStore
from schemas import Evidence, Plan, Query, Reply, StageCost

from . import prompts
from .index import CARDS, PROFILES, TURNS
from .text import names
from .timeparse import find_time_mentions
from .tokens import count_tokens

log = logging.getLogger(__name__)

_FIDELITY = re.compile(r"\b(exact(ly)?|word for word|verbatim|quote|what did (i|you) (say|write)|wording)\b", re.I)
_DISTRIBUTED = re.compile(r"\b(how many|all|every|list|both|each|compare|in total|times|which .* and)\b", re.I)
_AGGREGATE = re.compile(r"\b(how many|in total|count|all)\b", re.I)
_TEMPORAL = re.compile(r"\b(when|what (date|day|year|month)|how long|before|after|first|last)\b", re.I)
_COMPARE = re.compile(r"\b(compare|more than|less than|better|worse|difference)\b", re.I)
_SORT = re.compile(r"\b(order|earliest|latest|sort|rank)\b", re.I)


def rule_plan(question: str, now: datetime) -> Plan:
    """The planner without an LLM: the same fields from patterns."""
    fidelity = bool(_FIDELITY.search(question))
    distributed = bool(_DISTRIBUTED.search(question))
    if _AGGREGATE.search(question):
        operation = "aggregate"
    elif _COMPARE.search(question):
        operation = "compare"
    elif _SORT.search(question):
        operation = "sort"
    elif _TEMPORAL.search(question):
        operation = "temporal_select"
    else:
        operation = "lookup"
    mentions = find_time_mentions(question, now)
    time_from = time_to = None
    if mentions and operation != "temporal_select":
        time_from = mentions[0].start
    lowered = question.lower()
    if re.search(r"\b(you|your)\b", lowered) and not re.search(r"\b(i|my|me)\b", lowered):
        participants = "assistant"
    elif re.search(r"\b(i|my|me)\b", lowered):
        participants = "user"
    else:
        participants = "ambiguous"
    return Plan(
        planner="rules",
        entities=names(question),
        participants=participants,  # type: ignore[arg-type]
        time_from=time_from,
        time_to=time_to,
        operation=operation,  # type: ignore[arg-type]
        distributed=distributed,
        fidelity=fidelity,
        rewrites=[],
        profile=choose_profile(fidelity=fidelity, distributed=distributed),
    )


def choose_profile(*, fidelity: bool, distributed: bool) -> str:
    """Replay if fidelity-sensitive, else Compose if the evidence is distributed, else Lookup."""
    if fidelity:
        return "replay"
    return "compose" if distributed else "lookup"


def rrf_fuse(rankings: Sequence[Sequence[str]], k: int = 60) -> dict[str, float]:
    """Reciprocal-rank fusion of several ranked id lists."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, pid in enumerate(ranking):
            scores[pid] = scores.get(pid, 0.0) + 1.0 / (k + rank + 1)
    return scores


def cap_to_budget(texts: Sequence[str], max_tokens: int) -> int:
    """How many of ``texts``, in order, fit in ``max_tokens`` (at least one)."""
    used = 0
    for i, text in enumerate(texts):
        used += count_tokens(text)
        if used > max_tokens and i > 0:
            return i
    return len(texts)


@dataclass(frozen=True)
class QueryOptions:
    evidence_k: int = 10
    replay_window: int = 1
    replay_max_tokens: int = 1200
    max_answer_tokens: int = 256


@dataclass
class _Candidate:
    hit: StoreHit
    score: float
    found_by: list[str]


class QueryEngine:
    """Answers one query; every store call carries the query's tenant as a hard filter."""

    def __init__(self, store: VectorStore, embedder: Embedder, llm: LLM | None, options: QueryOptions):
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.options = options

    def run(self, query: Query) -> Reply:
        started = time.perf_counter()
        latency: dict[str, float] = {}
        costs: list[StageCost] = []
        now = query.question_time or datetime.now(timezone.utc)

        t0 = time.perf_counter()
        plan = rule_plan(query.question, now)
        if query.profile != "auto":
            plan = plan.model_copy(update={"profile": query.profile})
        latency["plan_ms"] = _ms(t0)

        t0 = time.perf_counter()
        scope = StoreFilter(equals={"conversation_id": query.conversation_id})
        k = query.k or self.options.evidence_k
        vector = self.embedder.embed([query.question])[0]
        candidates = self._dense_cards(query.tenant_id, vector, scope, limit=k * 3)
        if plan.profile == "compose":
            for rewrite in plan.rewrites:
                rv = self.embedder.embed([rewrite])[0]
                for c in self._dense_cards(query.tenant_id, rv, scope, limit=k * 2):
                    candidates.setdefault(c.hit.id, c)
        ranked = sorted(candidates.values(), key=lambda c: c.score, reverse=True)[:k]
        evidence = [self._card_evidence(i, c) for i, c in enumerate(ranked)]
        latency["retrieve_ms"] = _ms(t0)

        if plan.profile == "replay" and evidence:
            t0 = time.perf_counter()
            evidence = self._replay(query.tenant_id, scope, evidence)
            latency["replay_ms"] = _ms(t0)

        t0 = time.perf_counter()
        profile_text = self._profile(query.tenant_id, scope, vector)
        latency["profile_ms"] = _ms(t0)

        answer, mode = None, "evidence_only"
        if self.llm is not None and query.answer:
            t0 = time.perf_counter()
            answer, cost = self._answer(query.question, plan, evidence, profile_text)
            if cost is not None:
                costs.append(cost)
                mode = "llm"
            latency["answer_ms"] = _ms(t0)
        latency["total_ms"] = _ms(started)
        return Reply(
            tenant_id=query.tenant_id,
            conversation_id=query.conversation_id,
            correlation_id=query.correlation_id,
            answer=answer,
            answer_mode=mode,  # type: ignore[arg-type]
            evidence=evidence,
            plan=plan,
            access_profile=plan.profile,
            profile_text=profile_text,
            context_tokens=sum(count_tokens(e.text) for e in evidence),
            costs=costs,
            latency_ms=latency,
            replied_at=datetime.now(timezone.utc),
        )

    def _dense_cards(self, tenant_id: str, vector, scope: StoreFilter, limit: int) -> dict[str, _Candidate]:  # noqa: ANN001
        hits = self.store.search(CARDS, tenant_id, vector, where=scope, limit=limit)
        return {h.id: _Candidate(h, h.score, ["dense"]) for h in hits}

    @staticmethod
    def _card_evidence(i: int, c: _Candidate) -> Evidence:
        p = c.hit.payload
        return Evidence(
            evidence_id=f"E{i + 1}",
            kind="card",
            point_id=c.hit.id,
            text=p.get("text", ""),
            subject=p.get("subject"),
            type=p.get("type"),
            event_time=p.get("event_time"),
            turn_ids=list(p.get("turn_ids", [])),
            session_ids=list(p.get("session_ids", [])),
            score=round(c.score, 5),
            found_by=c.found_by,  # type: ignore[arg-type]
        )

    def _replay(self, tenant_id: str, scope: StoreFilter, evidence: list[Evidence]) -> list[Evidence]:
        """Follow provenance to the raw turns (± window), token-capped, in conversation order."""
        turn_ids: list[str] = []
        for e in evidence:
            for tid in e.turn_ids:
                if tid not in turn_ids:
                    turn_ids.append(tid)
        sources = self.store.scroll(TURNS, tenant_id, where=StoreFilter(
            equals=dict(scope.equals), any_of={"turn_id": turn_ids}), limit=len(turn_ids) + 1)
        seqs = {int(h.payload["seq"]) for h in sources}
        w = self.options.replay_window
        wanted = sorted({s + d for s in seqs for d in range(-w, w + 1) if s + d >= 0})
        window = self.store.scroll(TURNS, tenant_id, where=StoreFilter(
            equals=dict(scope.equals), any_of={"seq": wanted}), limit=len(wanted) * 4 + 1)
        order = {tid: i for i, tid in enumerate(turn_ids)}
        # Source turns first, in evidence order; then neighbours by position.
        window.sort(key=lambda h: (h.payload["turn_id"] not in order, order.get(h.payload["turn_id"], 0), h.payload["seq"]))
        texts = [f"{h.payload['speaker']}: {h.payload['text']}" for h in window]
        keep = cap_to_budget(texts, self.options.replay_max_tokens)
        replayed = [
            Evidence(
                evidence_id=f"R{i + 1}", kind="turn", point_id=h.id, text=texts[i],
                subject=h.payload.get("speaker"), event_time=h.payload.get("event_time"),
                turn_ids=[h.payload["turn_id"]], session_ids=[h.payload.get("session_id", "")],
                score=1.0 if h.payload["turn_id"] in order else 0.5, found_by=["replay"],
            )
            for i, h in enumerate(window[:keep])
        ]
        return replayed

    def _profile(self, tenant_id: str, scope: StoreFilter, vector) -> str | None:  # noqa: ANN001
        hits = self.store.search(PROFILES, tenant_id, vector, where=scope, limit=5)
        if not hits:
            return None
        return "\n".join(f"- {h.payload['subject']} ({h.payload['field']}): {h.payload['text']}" for h in hits)

    def _answer(self, question: str, plan: Plan, evidence: list[Evidence],
                profile_text: str | None) -> tuple[str | None, StageCost | None]:
        assert self.llm is not None
        lines = [f"[{e.evidence_id}] {e.event_time.date().isoformat() if e.event_time else 'undated'} "
                 f"{e.text}" for e in evidence]
        messages = [
            {"role": "system", "content": prompts.ANSWER_SYSTEM},
            {"role": "user", "content": prompts.answer_user(question, lines, plan.operation, profile_text)},
        ]
        try:
            result = self.llm.complete(messages, max_tokens=self.options.max_answer_tokens)
        except LLMError as exc:
            log.warning("answer call failed, replying with evidence only: %s", exc)
            return None, None
        cost = StageCost(stage="answer", calls=1, prompt_tokens=result.prompt_tokens,
                         completion_tokens=result.completion_tokens, model=result.model)
        return result.content.strip(), cost


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


__all__ = ["QueryEngine", "QueryOptions", "rule_plan", "choose_profile", "rrf_fuse", "cap_to_budget"]
