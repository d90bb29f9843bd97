"""One scope's candidates for a query: the profile's mechanisms fill a pool (hybrid, triggers, the
Compose cascade, the content query), it is reranked, grown by the graph and by research rounds when
the plan needs them, and cut to K (or, adaptive, where the scores drop off) within the token budget.
The store calls are ``Retriever``'s; each mechanism is a timed step."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator, Sequence

import numpy as np

from memstream.ports import Embedder, Steps
from memstream.processors.query.budget import PLAN_SHARE, Budget
from memstream.processors.query.content import ContentQueries, ContentQuery
from memstream.processors.query.research import LlmReflector, follow_ups, needs_research, turns_of
from memstream.processors.query.retrieve import (
    Candidate,
    Pool,
    Retriever,
    Scope,
    adaptive_count,
    rerank,
    top_k,
    within_budget,
)
from memstream.processors.steps import timed
from memstream.processors.tokens import count_tokens
from memstream.schemas import Plan


class CandidateSearch:
    """Candidates of one scope, ranked and cut; per-step latencies into the caller's ``latency``."""

    def __init__(self, retriever: Retriever, embedder: Embedder, reflector: LlmReflector | None, steps: Steps):
        self.retriever = retriever
        self.embedder = embedder
        self.content = ContentQueries(retriever, embedder)  # a mechanism of the pool, guessed before it
        self.reflector = reflector  # research reflection by LLM; by rules when None
        self.steps = steps

    def retrieve(
        self,
        plan: Plan,
        scope: Scope,
        texts: Sequence[str],
        vectors: np.ndarray,
        k: int,
        latency: dict[str, float],
        budget: Budget | None = None,
        *,
        content: ContentQuery | None = None,
    ) -> tuple[list[Candidate], int]:
        """The profile's candidate pool, reranked, cut to ``k`` (or, with the adaptive policy, where
        the scores drop off) within the budget's tokens, and how many the scope held before the
        token cut; per-step latencies into ``latency``, LLM costs (research reflection) and research
        rounds into the budget."""
        budget = budget or Budget()
        pool = Pool()
        r, p = self.retriever, self.retriever.params
        with self._mechanism(latency, "hybrid", pool):  # dense and sparse (BM25), fused
            r.hybrid(pool, scope, texts, vectors, k=k)
        with self._mechanism(latency, "trigger", pool):
            promoted_scenes = r.triggers(pool, scope, vectors)
            r.scene_items(pool, scope, vectors[0], promoted_scenes, signal="trigger", limit=p.scene_items)
        if plan.profile == "compose":
            with self._mechanism(latency, "cascade", pool):
                r.cascade(pool, scope, vectors[0])
        if p.content_query != "none":
            with self._mechanism(latency, "content", pool):
                vectors = self.content.search(pool, scope, texts[0], vectors, k, content)
        with timed(latency, "rerank", self.steps) as step:
            ranked = rerank(pool, vectors, plan.entities, p)
            step["memstream.candidates"] = len(ranked)
        if p.graph.hops and (not p.graph.multihop_only or needs_research(plan)):
            with self._mechanism(latency, "graph", pool):
                if r.graph(pool, scope, vectors, ranked, k=k):
                    ranked = rerank(pool, vectors, plan.entities, p)
        if p.research_rounds > 1 and needs_research(plan):
            with self._mechanism(latency, "research", pool):
                ranked = self._research(plan, scope, texts, vectors, pool, ranked, k, budget)
        return self._cut(ranked, k, budget.max_tokens, latency)

    def _cut(
        self, ranked: list[Candidate], k: int, max_tokens: int | None, latency: dict[str, float]
    ) -> tuple[list[Candidate], int]:
        """The evidence items kept of ``ranked`` and how many there were before the token cut."""
        p = self.retriever.params
        adaptive = p.evidence_policy == "adaptive"
        t0 = time.perf_counter()
        chosen = top_k(ranked, p.evidence_max_items if adaptive else k, new_turns_only=p.new_turns_only)
        if not adaptive and max_tokens is None:
            latency["cut_ms"] = _ms(t0)
            return chosen, len(chosen)  # K items, no budget: nothing to count on the hot path
        tokens = [count_tokens(str(c.payload.get("text", ""))) for c in chosen]
        if adaptive:
            n = adaptive_count(
                [c.score for c in chosen],
                tokens,
                budget=max_tokens or p.evidence_max_tokens,
                dropoff=p.evidence_dropoff,
                min_items=p.evidence_min_items,
            )
        else:
            n = within_budget(tokens, max_tokens)
        latency["cut_ms"] = _ms(t0)
        return chosen[:n], len(chosen)

    @contextlib.contextmanager
    def _mechanism(self, latency: dict[str, float], name: str, pool: Pool) -> Iterator[None]:
        """A retrieval mechanism's step: timed, and how many items it brought to the pool."""
        with timed(latency, name, self.steps) as step:
            before = len(pool)
            yield
            step["memstream.items_added"] = len(pool) - before

    def _research(
        self,
        plan: Plan,
        scope: Scope,
        texts: Sequence[str],
        vectors: np.ndarray,
        pool: Pool,
        ranked: list[Candidate],
        k: int,
        budget: Budget,
    ) -> list[Candidate]:
        """Further rounds for a multi-hop plan: search again with what reflection finds missing (the
        LLM's queries, or by rules the names the best evidence mentions and the question does not),
        until a round brings no new source turn into the top ``k``."""
        p, r = self.retriever.params, self.retriever
        asked = len(texts)
        rounds = 1
        for _ in range(p.research_rounds - 1):
            top = top_k(ranked, k, new_turns_only=p.new_turns_only)
            found = [c.payload for c in top[: p.research_seeds]]
            if self.reflector is not None:
                left = budget.seconds_left()
                queries, cost = self.reflector.reflect(
                    texts[0], found, p.research_queries, timeout_s=None if left is None else left * PLAN_SHARE
                )
                budget.costs.append(cost)
            else:
                queries = follow_ups(texts[0], found, p.research_queries)
            if not queries:
                break
            r.hybrid(
                pool, scope, queries, np.asarray(self.embedder.embed(queries)), k=k, first=asked, signal="research"
            )
            asked += len(queries)
            rounds += 1
            before = turns_of(c.payload for c in top)
            ranked = rerank(pool, vectors, plan.entities, p)
            if turns_of(c.payload for c in top_k(ranked, k, new_turns_only=p.new_turns_only)) <= before:
                break  # nothing new: the adaptive stop
        budget.rounds = rounds
        return ranked


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


__all__ = ["CandidateSearch"]
