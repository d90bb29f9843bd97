"""Stage 7 retrieval for one query, in one place: the question (and Compose's rewrites) embedded, the
scope under the tenant's hard filters, the candidates of that scope (processors/query/candidates.py)
topped up from a wider scope when short, then the evidence in order, the Replay turns, the speaker
profile and the fresh turns said since the last cards."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from memstream.ports import Embedder, Steps, StoreFilter, StoreHit, VectorStore
from memstream.processors.query.budget import Budget
from memstream.processors.query.candidates import CandidateSearch
from memstream.processors.query.content import ContentQuery
from memstream.processors.query.options import QueryOptions
from memstream.processors.query.replay import replay
from memstream.processors.query.research import LlmReflector
from memstream.processors.query.retrieve import Candidate, Retriever, Scope, top_up
from memstream.processors.steps import timed
from memstream.processors.tokens import count_tokens
from memstream.processors.write.index import CARDS, PROFILES
from memstream.schemas import Evidence, Plan, Query

TEMPORAL_OPERATIONS = ("temporal_select", "sort")


def roles_for(participants: str) -> tuple[str | None, ...]:
    """Participant resolution: whose cards to search. Ambiguous searches each side and fuses."""
    return {"user": ("user",), "assistant": ("assistant",), "both": (None,)}.get(participants, ("user", "assistant"))


def search_roles(named: tuple[str | None, ...], has_cards: Callable[[str], bool]) -> tuple[str | None, ...]:
    """One search per side the question names, among the sides the conversation has. A conversation
    with one side only (two people and no assistant) gets a single unfiltered search, so that a
    question about the assistant's words does not come back empty."""
    if named == (None,):
        return named
    present = tuple(role for role in named if role is not None and has_cards(role))
    if len(named) > 1:  # ambiguous: split only where the conversation has both sides
        return present if len(present) > 1 else (None,)
    return present or (None,)


def time_range(plan: Plan) -> tuple[float | None, float | None] | None:
    if plan.time_from is None and plan.time_to is None:
        return None
    return (plan.time_from.timestamp() if plan.time_from else None, plan.time_to.timestamp() if plan.time_to else None)


@dataclass(frozen=True)
class Found:
    """What retrieval found for one query: the evidence, the speaker profile's lines, the research rounds."""

    evidence: list[Evidence]
    profile_text: str | None
    rounds: int


class EvidenceSearch:
    """Every retrieval step of a query; each store call carries the query's tenant as a hard filter."""

    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        options: QueryOptions,
        reflector: LlmReflector | None,
        steps: Steps,
    ):
        self.store = store
        self.embedder = embedder
        self.options = options
        self.steps = steps
        self.retriever = Retriever(store, options.retrieval)
        self.candidates = CandidateSearch(self.retriever, embedder, reflector, steps)

    def gather(self, query: Query, plan: Plan, budget: Budget, latency: dict[str, float]) -> Found:
        """The query's evidence under ``plan``; per-step latencies into ``latency``, LLM costs and
        research rounds into ``budget``."""
        texts, vectors, guess = self._embed(query, plan, latency)
        scope = Scope(query.tenant_id, query.conversation_id, time_range(plan), self._roles(query, plan), plan.history)
        chosen = self._topped_up(query, plan, scope, texts, vectors, latency, budget, guess)
        if plan.operation in TEMPORAL_OPERATIONS:
            chosen.sort(key=lambda c: c.payload.get("event_ts") or 0.0)
        evidence = [card_evidence(f"E{i + 1}", c) for i, c in enumerate(chosen)]

        if plan.profile == "replay" and evidence:
            with timed(latency, "replay", self.steps) as step:
                o = self.options
                cap = min(o.replay_max_tokens, query.max_tokens or o.replay_max_tokens)
                evidence = replay(self.store, scope, evidence, o.replay_window, cap)
                step["memstream.items"] = len(evidence)

        with timed(latency, "profile", self.steps) as step:
            profile_hits = self.store.search(PROFILES, query.tenant_id, vectors[0], where=scope.conversation(), limit=5)
            profile_text = (
                "\n".join(f"- {h.payload['subject']} ({h.payload['field']}): {h.payload['text']}" for h in profile_hits)
                or None
            )
            evidence = evidence or profile_evidence(profile_hits)
            step["memstream.items"] = len(profile_hits)

        if self.options.fresh_k:
            # After the evidence, never in its ranking: what was just said, before its cards exist.
            with timed(latency, "fresh", self.steps) as step:
                fresh = self._fresh(scope, query, vectors[0], evidence)
                evidence += fresh
                step["memstream.items"] = len(fresh)
        return Found(evidence, profile_text, budget.rounds)

    def _embed(
        self, query: Query, plan: Plan, latency: dict[str, float]
    ) -> tuple[list[str], np.ndarray, ContentQuery | None]:
        """The query texts (the question, and Compose's rewrites), their vectors, and the content
        query guessed from the speakers already known, embedded in the same pass."""
        texts = [query.question, *(plan.rewrites if plan.profile == "compose" else [])]
        guess = self.candidates.content.guess(query)
        with timed(latency, "embed", self.steps) as step:
            embedded = np.asarray(self.embedder.embed(texts + ([guess.text] if guess else [])), dtype=np.float32)
            if guess:
                guess = dataclasses.replace(guess, vector=embedded[-1])
            step["memstream.texts"] = len(embedded)
        return texts, embedded[: len(texts)], guess

    def _roles(self, query: Query, plan: Plan) -> tuple[str | None, ...]:
        return search_roles(
            roles_for(plan.participants),
            lambda role: bool(
                self.store.count(
                    CARDS,
                    query.tenant_id,
                    where=StoreFilter(equals={"conversation_id": query.conversation_id, "role": role}),
                )
            ),
        )

    def _topped_up(
        self,
        query: Query,
        plan: Plan,
        scope: Scope,
        texts: Sequence[str],
        vectors: np.ndarray,
        latency: dict[str, float],
        budget: Budget,
        guess: ContentQuery | None,
    ) -> list[Candidate]:
        """The scope's candidates, topped up (ranked after them) from the scope without its period,
        then over every side, where it held fewer than K items or none."""
        k = query.k or self.options.retrieval.evidence_k
        chosen, held = self.candidates.retrieve(plan, scope, texts, vectors, k, latency, budget, content=guess)
        p = self.retriever.params
        searched = scope
        for widen, top_up_on in ((Scope.without_time, p.time_top_up), (Scope.any_side, p.side_top_up)):
            # A wrong period or side should not silence the memory, nor a period or side that holds
            # fewer than K items (topped up from the wider scope, ranked after). A scope the token
            # budget cut short held enough: searching outside it would only look for a card small
            # enough for what is left.
            wider_scope = widen(searched)
            if wider_scope == searched or (chosen and not (top_up_on and p.evidence_policy == "fixed" and held < k)):
                continue
            wider, held = self.candidates.retrieve(plan, wider_scope, texts, vectors, k, latency, budget, content=guess)
            chosen = top_up(chosen, wider, k, max_tokens=query.max_tokens, new_turns_only=p.new_turns_only)
            searched = wider_scope
        return chosen

    def _fresh(self, scope: Scope, query: Query, vector: np.ndarray, evidence: Sequence[Evidence]) -> list[Evidence]:
        """Fresh turns the evidence does not cite, within what is left of the query's token budget."""
        covered = {t for e in evidence for t in e.turn_ids}
        left = None if query.max_tokens is None else query.max_tokens - sum(count_tokens(e.text) for e in evidence)
        out: list[Evidence] = []
        for c in self.retriever.fresh_turns(scope, query.question, vector, self.options.fresh_k):
            item = fresh_evidence(f"F{len(out) + 1}", c)
            if item.turn_ids[0] in covered:
                continue
            if left is not None:
                left -= count_tokens(item.text)
                if left < 0:
                    break
            out.append(item)
        return out


def profile_evidence(hits: Sequence[StoreHit]) -> list[Evidence]:
    """When nothing scored, the speaker profile is the evidence (it is otherwise outside the budget)."""
    return [
        Evidence(
            evidence_id=f"P{i + 1}",
            kind="profile",
            point_id=h.id,
            text=f"{h.payload['subject']} {h.payload['field']}: {h.payload['text']}",
            subject=h.payload.get("subject"),
            turn_ids=list(h.payload.get("turn_ids", [])),
            score=round(h.score, 5),
            found_by=["profile"],
        )
        for i, h in enumerate(hits)
    ]


def card_evidence(evidence_id: str, c: Candidate) -> Evidence:
    p = c.payload
    return _evidence(
        evidence_id,
        c,
        kind="card",
        text=p.get("text", ""),
        subject=p.get("subject"),
        type=p.get("type"),
        turn_ids=list(p.get("turn_ids", [])),
        session_ids=list(p.get("session_ids", [])),
        found_by=sorted(c.found_by),
    )


def fresh_evidence(evidence_id: str, c: Candidate) -> Evidence:
    """A fresh turn as evidence: the raw turn, as Replay shows turns."""
    p = c.payload
    return _evidence(
        evidence_id,
        c,
        kind="turn",
        text=f"{p['speaker']}: {p['text']}",
        subject=p.get("speaker"),
        turn_ids=[p["turn_id"]],
        session_ids=[p.get("session_id", "")],
        found_by=["fresh"],
    )


def _evidence(evidence_id: str, c: Candidate, **fields: Any) -> Evidence:
    """What every evidence item takes from its candidate: the point, its time, its score."""
    return Evidence(
        evidence_id=evidence_id,
        point_id=c.id,
        event_time=c.payload.get("event_time"),
        score=round(c.score, 6),
        **fields,
    )


__all__ = [
    "EvidenceSearch",
    "Found",
    "TEMPORAL_OPERATIONS",
    "card_evidence",
    "fresh_evidence",
    "profile_evidence",
    "roles_for",
    "search_roles",
    "time_range",
]
