"""Stage 7: plan a question, retrieve evidence under hard tenant filters, answer.

Access profiles (JustMem): Lookup (local evidence), Compose (broader discovery: rewrites and the
topic → scene → item cascade, the same final K), Replay (Lookup, then the raw source turns).
Retrieval itself (signals, fusion, rerank) lives in :mod:`processors.retrieve`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterator, Sequence

import numpy as np

from memstream.ports import LLM, Embedder, LLMError, Steps, StoreFilter, StoreHit, VectorStore
from memstream.processors.query import prompts
from memstream.processors.query.plan import Planner, planner_for
from memstream.processors.query.research import LlmReflector, follow_ups, needs_research, turns_of
from memstream.processors.query.retrieve import (
    Candidate,
    Pool,
    RetrievalParams,
    Retriever,
    Scope,
    adaptive_count,
    pool_speakers,
    rerank,
    speakers_named,
    top_k,
    top_up,
    within_budget,
)
from memstream.processors.steps import no_steps, timed
from memstream.processors.text import without_names
from memstream.processors.tokens import count_tokens
from memstream.processors.write.index import CARDS, PROFILES, TURNS
from memstream.schemas import Evidence, Plan, Query, Reply, StageCost

log = logging.getLogger(__name__)

TEMPORAL_OPERATIONS = ("temporal_select", "sort")
SPEAKER_MEMORY = 4096  # conversations whose speakers an engine remembers (for the content query)


@dataclass(frozen=True)
class ContentQuery:
    """The question with the speakers it names (``names``) made "someone", and its vector."""

    names: tuple[str, ...]
    text: str
    vector: np.ndarray | None = None


REPLY_MARGIN_S = 1.0  # kept back from the asker's deadline for the reply to travel back
MIN_ANSWER_S = 1.0  # an answer call with less time than this left is not started
PLAN_SHARE = 1 / 3  # of the time left, what an LLM planner may spend (the answer needs the rest)
ROUNDS_KEY = "research_rounds"


def seconds_left(deadline: datetime | None, now: datetime) -> float | None:
    """Time left before ``deadline`` for work whose result must still reach the asker (None: no deadline)."""
    if deadline is None:
        return None
    return (deadline - now).total_seconds() - REPLY_MARGIN_S


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


def cap_to_budget(texts: Sequence[str], max_tokens: int) -> int:
    """How many of ``texts``, in order, fit in ``max_tokens`` (at least one)."""
    used = 0
    for i, text in enumerate(texts):
        used += count_tokens(text)
        if used > max_tokens and i > 0:
            return i
    return len(texts)


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


def replay_window(sources: Sequence[int], window: int) -> list[int]:
    """Conversation positions to replay: each source turn's position ± ``window``."""
    return sorted({s + d for s in sources for d in range(-window, window + 1) if s + d >= 0})


@dataclass
class Budget:
    """What one query may spend while retrieving: evidence tokens, time before the deadline, and
    where the LLM calls it makes are counted."""

    max_tokens: int | None = None
    deadline: datetime | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    costs: list[StageCost] = field(default_factory=list)

    def seconds_left(self) -> float | None:
        return seconds_left(self.deadline, self.clock())


@dataclass(frozen=True)
class QueryOptions:
    retrieval: RetrievalParams = field(default_factory=RetrievalParams)
    replay_window: int = 1
    replay_max_tokens: int = 1200
    max_answer_tokens: int = 256
    planner: str = "rules"  # or "llm", "hybrid" (plan.PLANNER_MODES; both need the engine's LLM)
    fresh_k: int = 3  # fresh turns (said, in no card yet) added after the evidence; 0 = none


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
        self.retriever = Retriever(store, options.retrieval)
        # Conversation → the speakers its pools have shown (most recent last, bounded): lets the
        # content query be embedded in the question's own forward pass.
        self._speakers: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()
        self._speakers_lock = threading.Lock()  # questions are answered in several threads at once
        planner_llm = planner_llm or llm
        self.planner: Planner = planner_for(options.planner, planner_llm)
        # The research loop reflects with the LLM planner's LLM; by rules otherwise, the hybrid
        # planner's included (it is there to save calls).
        use_llm = planner_llm is not None and options.planner == "llm"
        self.reflector = LlmReflector(research_llm or planner_llm) if use_llm else None  # type: ignore[arg-type]

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

        k = query.k or self.options.retrieval.evidence_k
        texts = [query.question, *(plan.rewrites if plan.profile == "compose" else [])]
        guess = self._content_guess(query)
        with timed(latency, "embed", self.steps) as step:
            embedded = np.asarray(self.embedder.embed(texts + ([guess.text] if guess else [])), dtype=np.float32)
            vectors = embedded[: len(texts)]
            if guess:
                guess = dataclasses.replace(guess, vector=embedded[-1])
            step["memstream.texts"] = len(embedded)

        scope = Scope(query.tenant_id, query.conversation_id, time_range(plan), self._roles(query, plan), plan.history)
        budget = Budget(query.max_tokens, query.deadline, clock, costs)
        chosen, held = self.retrieve(plan, scope, texts, vectors, k, latency, budget, content=guess)
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
            wider, held = self.retrieve(plan, wider_scope, texts, vectors, k, latency, budget, content=guess)
            chosen = top_up(chosen, wider, k, max_tokens=query.max_tokens, new_turns_only=p.new_turns_only)
            searched = wider_scope
        plan = plan.model_copy(update={"rounds": int(latency.pop(ROUNDS_KEY, 1))})
        if plan.operation in TEMPORAL_OPERATIONS:
            chosen.sort(key=lambda c: c.payload.get("event_ts") or 0.0)
        evidence = [card_evidence(f"E{i + 1}", c) for i, c in enumerate(chosen)]

        if plan.profile == "replay" and evidence:
            with timed(latency, "replay", self.steps) as step:
                evidence = self._replay(scope, evidence, query.max_tokens)
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

        answer, mode, answer_error = None, "evidence_only", None
        if self.llm is not None and query.answer:
            left = seconds_left(query.deadline, clock())
            if left is not None and left < MIN_ANSWER_S:
                answer_error = f"no time left to answer before the deadline ({left + REPLY_MARGIN_S:.1f}s)"
            else:
                with timed(latency, "answer", self.steps) as step:
                    answer, cost, answer_error = self._answer(query.question, plan, evidence, profile_text, left)
                    costs.append(cost)
                    mode = "llm" if answer is not None else "evidence_only"
                    step.update({"memstream.answer_mode": mode, "memstream.evidence": len(evidence)})
        latency["total_ms"] = _ms(started)
        return Reply(
            tenant_id=query.tenant_id,
            conversation_id=query.conversation_id,
            correlation_id=query.correlation_id,
            answer=answer,
            answer_mode=mode,  # type: ignore[arg-type]
            answer_error=answer_error,
            evidence=evidence,
            plan=plan,
            access_profile=plan.profile,
            profile_text=profile_text,
            context_tokens=sum(count_tokens(e.text) for e in evidence),
            costs=costs,
            latency_ms=latency,
            replied_at=datetime.now(timezone.utc),
        )

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
        token cut; per-step latencies into ``latency``, LLM costs (research reflection) into the
        budget's."""
        budget = budget or Budget()
        max_tokens = budget.max_tokens
        pool = Pool()
        r = self.retriever
        with self._mechanism(latency, "hybrid", pool):  # dense and sparse (BM25), fused
            r.hybrid(pool, scope, texts, vectors, k=k)
        with self._mechanism(latency, "trigger", pool):
            promoted_scenes = r.triggers(pool, scope, vectors)
            r.scene_items(pool, scope, vectors[0], promoted_scenes, signal="trigger", limit=r.params.scene_items)
        if plan.profile == "compose":
            with self._mechanism(latency, "cascade", pool):
                r.cascade(pool, scope, vectors[0])
        p = r.params
        if p.content_query != "none":
            with self._mechanism(latency, "content", pool):
                vectors = self._content_query(pool, scope, texts[0], vectors, k, content)
        adaptive = p.evidence_policy == "adaptive"
        with timed(latency, "rerank", self.steps) as step:
            ranked = rerank(pool, vectors, plan.entities, p)
            step["memstream.candidates"] = len(ranked)
        if p.graph.hops and (not p.graph.multihop_only or needs_research(plan)):
            with self._mechanism(latency, "graph", pool):
                if r.graph(pool, scope, vectors, ranked, k=k):
                    ranked = rerank(pool, vectors, plan.entities, p)
        if p.research_rounds > 1 and needs_research(plan):
            with self._mechanism(latency, "research", pool):
                ranked = self._research(plan, scope, texts, vectors, pool, ranked, k, latency, budget)
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

    def _content_guess(self, query: Query) -> ContentQuery | None:
        """The content query from the speakers this conversation's earlier pools showed (None when
        off, or when the question names none of them): embedded with the question, in one pass."""
        if self.retriever.params.content_query == "none":
            return None
        known = self._speakers.get((query.tenant_id, query.conversation_id), frozenset())
        named = speakers_named(query.question, known)
        return ContentQuery(tuple(named), without_names(query.question, named)) if named else None

    def _content_query(
        self, pool: Pool, scope: Scope, question: str, vectors: np.ndarray, k: int, guess: ContentQuery | None
    ) -> np.ndarray:
        """Search with the question's content (its speakers' names made "someone"); returns the query
        vectors the rerank uses from here on (with "semantic", the content query's instead of the
        question's). The speakers are the pool's; the guess's vector serves when it named the same."""
        mode = self.retriever.params.content_query
        speakers = self._remember_speakers(scope, pool_speakers(pool))
        named = tuple(speakers_named(question, speakers))
        if not named:
            return vectors
        if guess is not None and guess.names == named and guess.vector is not None:
            content = guess.vector[None, :]
        else:
            content = np.asarray(self.embedder.embed([without_names(question, named)]), dtype=np.float32)
        if mode in ("vote", "both"):
            self.retriever.content(pool, scope, content[0], k=k)
        if mode in ("semantic", "both"):
            return np.vstack([content, vectors[1:]])
        return vectors

    def _remember_speakers(self, scope: Scope, seen: frozenset[str]) -> frozenset[str]:
        key = (scope.tenant_id, scope.conversation_id)
        with self._speakers_lock:
            speakers = self._speakers.pop(key, frozenset()) | seen
            self._speakers[key] = speakers
            while len(self._speakers) > SPEAKER_MEMORY:
                self._speakers.popitem(last=False)
        return speakers

    def _research(
        self,
        plan: Plan,
        scope: Scope,
        texts: Sequence[str],
        vectors: np.ndarray,
        pool: Pool,
        ranked: list[Candidate],
        k: int,
        latency: dict[str, float],
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
        latency[ROUNDS_KEY] = float(rounds)  # taken out again by ``run``: it goes on the plan
        return ranked

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

    def _replay(self, scope: Scope, evidence: list[Evidence], max_tokens: int | None = None) -> list[Evidence]:
        """Follow provenance to the raw turns (± window), source turns first, capped at the replay
        budget or the query's own, whichever is smaller (raw turns are longer than the cards)."""
        turn_ids: list[str] = []
        for e in evidence:
            turn_ids += [t for t in e.turn_ids if t not in turn_ids]
        sources = self.store.scroll(
            TURNS, scope.tenant_id, where=scope.conversation(turn_id=turn_ids), limit=len(turn_ids) + 1
        )
        # A fresh turn numbered by no producer has no position: it opens no window.
        positions = [int(h.payload["seq"]) for h in sources if "seq" in h.payload]
        wanted = replay_window(positions, self.options.replay_window)
        window = self.store.scroll(
            TURNS,
            scope.tenant_id,
            where=StoreFilter(equals={"conversation_id": scope.conversation_id}, any_of={"seq": wanted}),
            limit=len(wanted) * 4 + 1,
        )
        order = {tid: i for i, tid in enumerate(turn_ids)}
        window.sort(
            key=lambda h: (h.payload["turn_id"] not in order, order.get(h.payload["turn_id"], 0), h.payload["seq"])
        )
        texts = [f"{h.payload['speaker']}: {h.payload['text']}" for h in window]
        keep = cap_to_budget(texts, min(self.options.replay_max_tokens, max_tokens or self.options.replay_max_tokens))
        return [
            Evidence(
                evidence_id=f"R{i + 1}",
                kind="turn",
                point_id=h.id,
                text=texts[i],
                subject=h.payload.get("speaker"),
                event_time=h.payload.get("event_time"),
                turn_ids=[h.payload["turn_id"]],
                session_ids=[h.payload.get("session_id", "")],
                score=1.0 if h.payload["turn_id"] in order else 0.5,
                found_by=["replay"],
            )
            for i, h in enumerate(window[:keep])
        ]

    def _answer(
        self, question: str, plan: Plan, evidence: list[Evidence], profile_text: str | None, timeout_s: float | None
    ) -> tuple[str | None, StageCost, str | None]:
        """The answer and its cost, or no answer and why (evidence-only reply)."""
        assert self.llm is not None
        messages = answer_messages(question, plan.operation, evidence, profile_text)
        try:
            result = self.llm.complete(messages, max_tokens=self.options.max_answer_tokens, timeout_s=timeout_s)
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
    return Evidence(
        evidence_id=evidence_id,
        kind="card",
        point_id=c.id,
        text=p.get("text", ""),
        subject=p.get("subject"),
        type=p.get("type"),
        event_time=p.get("event_time"),
        turn_ids=list(p.get("turn_ids", [])),
        session_ids=list(p.get("session_ids", [])),
        score=round(c.score, 6),
        found_by=sorted(c.found_by),  # type: ignore[arg-type]
    )


def fresh_evidence(evidence_id: str, c: Candidate) -> Evidence:
    """A fresh turn as evidence: the raw turn, as Replay shows turns."""
    p = c.payload
    return Evidence(
        evidence_id=evidence_id,
        kind="turn",
        point_id=c.id,
        text=f"{p['speaker']}: {p['text']}",
        subject=p.get("speaker"),
        event_time=p.get("event_time"),
        turn_ids=[p["turn_id"]],
        session_ids=[p.get("session_id", "")],
        score=round(c.score, 6),
        found_by=["fresh"],
    )


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


__all__ = [
    "QueryEngine",
    "QueryOptions",
    "cap_to_budget",
    "roles_for",
    "search_roles",
    "time_range",
    "replay_window",
    "card_evidence",
    "fresh_evidence",
    "profile_evidence",
    "answer_messages",
]
