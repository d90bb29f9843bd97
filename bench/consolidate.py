"""Consolidation cost at size: time and LLM calls to consolidate N cards, for growing N.

Synthetic cards (the generator, stated in the JSON): ``N / 20`` subjects with 5 attributes each;
an attribute is a random unit direction, and each card of it is that direction plus Gaussian
noise (σ = 0.02 per coordinate, cosine ≈ 0.9 within an attribute, ≈ 0 across). Every card is
"new": it gets its own update queue (one ANN search), decisions by the rules (no LLM; or the LLM
when one is given) and its patches applied to the store, as the consolidation stream does.
Near-linear growth is the point: O(N·k), never O(N²).
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from memstream.ports import Embedder, StoreFilter, StorePoint
from memstream.processors.consolidation.consolidate import (
    ConsolidateParams,
    Decider,
    RuleDecider,
    apply_update,
    consolidate_card,
)
from memstream.processors.consolidation.versioning import CardView, rule_decision
from memstream.processors.ids import point_id
from memstream.processors.query.retrieve import RETIRED
from memstream.processors.write.index import CARDS, COLLECTIONS, card_spec
from memstream.schemas import Card, Provenance

TENANT = "bench"
CONVERSATION = "synthetic"
GENERATOR = (
    "N/20 subjects x 5 attributes; card vector = attribute direction + N(0, 0.02^2) per coordinate "
    "(cosine ~0.9 within an attribute); texts '<subject> <attribute>: value <i>', every 3rd saying "
    "'now'; event times one hour apart"
)
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def card_point(index: int, subject: str, text: str, when: datetime, vector: Sequence[float]) -> StorePoint:
    """A state card said at ``when``, as the index stage stores it (the same payload, via card_spec)."""
    card = Card(
        card_id=point_id("bench-card", TENANT, CONVERSATION, [str(index)], text),
        subject=subject,
        type="state",
        content=text,
        event_time=when,
        provenance=Provenance(turn_ids=[f"T{index}"]),
        valid_from=when,
    )
    spec = card_spec({"tenant_id": TENANT, "conversation_id": CONVERSATION, "write_id": "bench"}, card, "user")
    return StorePoint(spec.id, list(vector), spec.payload, spec.text)


def synthetic_cards(n: int, *, dim: int = 384, seed: int = 11) -> list[StorePoint]:
    rng = np.random.default_rng(seed)
    subjects = max(1, n // 20)
    directions = rng.normal(size=(subjects, 5, dim)).astype(np.float32)
    directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
    points = []
    for i in range(n):
        s, a = int(rng.integers(subjects)), int(rng.integers(5))
        vector = directions[s, a] + rng.normal(0, 0.02, size=dim).astype(np.float32)
        vector /= np.linalg.norm(vector)
        text = f"person{s} attribute{a}: {'now ' if i % 3 == 0 else ''}value {i}"
        points.append(card_point(i, f"person{s}", text, T0 + timedelta(hours=i), vector.tolist()))
    return points


class _NoEmbedder:
    """The rules never merge; an LLM decider would need the real embedder for merged cards."""

    dim = 384
    name = "none"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("the rule decisions never merge: nothing to embed")

    def clear_cache(self) -> None:
        pass


def consolidate_size(
    n: int,
    *,
    decider: Decider | None = None,
    embedder: Embedder | None = None,
    params: ConsolidateParams = ConsolidateParams(),
    parallel: int = 4,
    workdir: Path | None = None,
    progress: Callable[[int], None] = lambda k: None,
) -> dict[str, Any]:
    from memstream.adapters.qdrant_edge_store import QdrantEdgeStore

    decider = decider or RuleDecider(params)
    embedder = embedder or _NoEmbedder()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        store = QdrantEdgeStore(Path(tmp) / "qdrant")
        try:
            store.ensure_collections(COLLECTIONS, 384)
            cards = synthetic_cards(n)
            for i in range(0, n, 2000):
                store.upsert(CARDS, cards[i : i + 2000])
            t0 = time.perf_counter()
            store.optimize([CARDS])
            optimize_s = time.perf_counter() - t0
            hits = store.scroll(CARDS, TENANT, limit=n + 1, with_vectors=True)
            decisions: dict[str, int] = {}
            calls = queues = candidates = changed = 0

            as_of = datetime.now(timezone.utc)

            def one(hit):
                update = consolidate_card(store, decider, TENANT, CONVERSATION, hit, params, as_of=as_of)
                return update, (apply_update(store, embedder, update) if update is not None else 0)

            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=parallel) as pool:
                for update, n_changed in pool.map(one, hits):
                    queues += 1
                    progress(1)
                    if update is None:
                        continue
                    candidates += len(update.candidates)
                    changed += n_changed
                    calls += sum(c.calls for c in update.costs)
                    for d in update.decisions:
                        decisions[d.action] = decisions.get(d.action, 0) + 1
            seconds = time.perf_counter() - t0
            current = store.count(CARDS, TENANT) - store.count(CARDS, TENANT, where=StoreFilter(equals=RETIRED))
        finally:
            store.close()
    return {
        "cards": n,
        "seconds": round(seconds, 2),
        "cards_per_s": round(n / seconds, 1),
        "llm_calls": calls,
        "queues": queues,
        "candidates_per_queue": round(candidates / max(queues, 1), 2),
        "decisions": decisions,
        "cards_changed": changed,
        "current_cards": current,
        "optimize_s": round(optimize_s, 1),
    }


FIRST = (
    "Ingrid",
    "Tomas",
    "Amara",
    "Kenji",
    "Lucia",
    "Farid",
    "Greta",
    "Mateo",
    "Noor",
    "Pavel",
    "Rosa",
    "Sven",
    "Yara",
    "Dmitri",
    "Elif",
    "Hugo",
)
LAST = (
    "Olsen",
    "Nakamura",
    "Okafor",
    "Brennan",
    "Castillo",
    "Haddad",
    "Lindqvist",
    "Moreau",
    "Petrov",
    "Quinn",
    "Rahman",
    "Silva",
    "Tanaka",
    "Varga",
    "Weber",
    "Zielinski",
)
CITIES = ("Boston", "Denver", "Seattle", "Lisbon", "Osaka", "Nairobi", "Toronto", "Krakow", "Austin", "Dublin", "Porto")
JOBS = ("nurse", "teacher", "plumber", "pilot", "chef", "lawyer", "baker", "architect", "dentist", "librarian")
LIFE_STORIES = (
    "per person, six cards over ten weeks: a home and a job, the home said again ten days later, "
    "a move, a new job ('now works as'), another move; full names (up to 256 people)"
)


def life_stories(people: int) -> list[tuple[str, str, int]]:
    """(subject, text, day) in time order: what people said about their homes and jobs (see LIFE_STORIES).
    Full names: MiniLM puts "<name> lives in Boston." and "<name> moved to Denver." near 0.8."""
    if not 0 < people <= len(FIRST) * len(LAST):
        raise ValueError(f"people must be 1..{len(FIRST) * len(LAST)}")
    said = []
    for i, (first, last) in enumerate([(f, s) for f in FIRST for s in LAST][:people]):
        name, start = f"{first} {last}", i % 5
        home, move, move2 = CITIES[i % 11], CITIES[(i + 3) % 11], CITIES[(i + 7) % 11]
        job, job2 = JOBS[i % 10], JOBS[(i + 4) % 10]
        said += [
            (name, f"{name} lives in {home}.", start),
            (name, f"{name} works as a {job}.", start),
            (name, f"{name} lives in {home}.", start + 10),
            (name, f"{name} moved to {move}.", start + 30),
            (name, f"{name} now works as a {job2}.", start + 50),
            (name, f"{name} moved to {move2}.", start + 70),
        ]
    return sorted(said, key=lambda s: s[2])


def consolidate_stories(
    people: int,
    decider: Decider,
    embedder: Embedder,
    *,
    params: ConsolidateParams = ConsolidateParams(),
    workdir: Path | None = None,
    progress: Callable[[int], None] = lambda k: None,
) -> dict[str, Any]:
    """Decide every card's queue over the life stories (real embeddings) with ``decider``, one queue
    at a time, nothing applied: its cost per queue, its decisions, and how often they agree with the
    rules on the same pairs."""
    from memstream.adapters.qdrant_edge_store import QdrantEdgeStore

    stories = life_stories(people)
    vectors = embedder.embed([text for _, text, _ in stories])
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        store = QdrantEdgeStore(Path(tmp) / "qdrant")
        try:
            store.ensure_collections(COLLECTIONS, embedder.dim)
            points = [
                card_point(i, subject, text, T0 + timedelta(days=day, seconds=i), vector)
                for i, ((subject, text, day), vector) in enumerate(zip(stories, vectors))
            ]
            store.upsert(CARDS, points)
            hits = store.scroll(CARDS, TENANT, limit=len(points) + 1, with_vectors=True)
            views = {h.id: CardView.from_payload(h.id, h.payload) for h in hits}
            as_of = datetime.now(timezone.utc)
            decisions: dict[str, int] = {}
            calls = prompt_tokens = completion_tokens = queues = pairs = agree = 0
            t0 = time.perf_counter()
            for hit in hits:
                update = consolidate_card(store, decider, TENANT, CONVERSATION, hit, params, as_of=as_of)
                progress(1)
                if update is None:
                    continue
                queues += 1
                for d in update.decisions:
                    key = f"{d.action}/{d.decided_by}"
                    decisions[key] = decisions.get(key, 0) + 1
                    pairs += 1
                    action = rule_decision(
                        views[d.older_card_id],
                        views[d.newer_card_id],
                        d.similarity,
                        duplicate_similarity=params.duplicate_similarity,
                    )
                    agree += action == d.action
                for cost in update.costs:
                    calls += cost.calls
                    prompt_tokens += cost.prompt_tokens
                    completion_tokens += cost.completion_tokens
            seconds = time.perf_counter() - t0
        finally:
            store.close()
    return {
        "people": people,
        "cards": len(stories),
        "generator": LIFE_STORIES,
        "queues": queues,
        "seconds": round(seconds, 1),
        "seconds_per_queue": round(seconds / max(queues, 1), 3),
        "llm_calls": calls,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "tokens_per_queue": round((prompt_tokens + completion_tokens) / max(queues, 1), 1),
        "decisions": decisions,
        "pairs": pairs,
        "agreement_with_rules": round(agree / max(pairs, 1), 3),
    }


def run_consolidate_bench(sizes: Sequence[int] = (10_000, 50_000), **kwargs: Any) -> dict[str, Any]:
    runs = [consolidate_size(n, **kwargs) for n in sizes]
    result: dict[str, Any] = {"generator": GENERATOR, "decider": "rules", "runs": runs}
    by_size = {r["cards"]: r for r in runs}
    if 10_000 in by_size and 50_000 in by_size:
        result["seconds_10k"] = by_size[10_000]["seconds"]
        result["seconds_50k"] = by_size[50_000]["seconds"]
        result["ratio"] = round(result["seconds_50k"] / result["seconds_10k"], 2)
    return result


__all__ = [
    "GENERATOR",
    "LIFE_STORIES",
    "synthetic_cards",
    "consolidate_size",
    "life_stories",
    "consolidate_stories",
    "run_consolidate_bench",
]
