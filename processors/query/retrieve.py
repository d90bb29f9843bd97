"""Stage 7 retrieval: a candidate pool from several signals, fused and reranked to K evidence cards.

Signals (each a ranked list, every store call under the tenant and conversation as hard filters):
- dense: cosine search over card vectors, for the question and (Compose) its rewrites;
- sparse: BM25 over card text;
- trigger: entity/bridge triggers of cards, and scene/horizon triggers of scenes, whose similarity to
  the question passes a calibrated threshold, promote their host (a scene promotes its items);
- cascade (Compose): the scenes the question reaches, grouped into topics by density, the best
  topics kept whole with their temporal neighbours, and then their items.
- graph (when on): from the best of the first ranking, the cards linked to it by a shared entity,
  scene or adjacent turn (processors/query/graph.py), then the pool is ranked again.
Rerank: every pooled card gets a semantic rank (best cosine to the question or a rewrite, whatever
found it); reciprocal-rank fusion of that with the sparse, trigger and cascade ranks, plus a vote
for naming a planned entity, orders the pool; near-identical texts are dropped; K are kept.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from memstream.ports import StoreFilter, StoreHit, VectorStore
from memstream.processors.query.cascade import rank_topics
from memstream.processors.query.graph import (
    GraphParams,
    Node,
    adjacent_turns,
    closeness,
    hubs,
    keep_best,
    names_of,
    path_weight,
    seed_nodes,
    turn_ids,
)
from memstream.processors.tokens import count_tokens
from memstream.processors.write.index import CARDS, FRESH, SCENES, TRIGGERS, TURNS

# Cards consolidation took out of the current view (superseded, merged, repeats) carry retired=true.
# An excluded value, not a required one: cards written before consolidation ran have no such key.
RETIRED = {"retired": True}


@dataclass(frozen=True)
class RetrievalParams:
    evidence_k: int = 10
    candidates: int = 30  # per signal and query text
    rrf_k: int = 5  # small: the top of each ranking decides (tuned on LoCoMo conv-26, see docs/retrieval.md)
    min_similarity: float = 0.15  # a card under this cosine, found by nothing else, does not score
    trigger_threshold: float = 0.35  # calibrated on LoCoMo dev (F1 peak), see docs/retrieval.md
    trigger_hits: int = 24
    trigger_max_hosts: int = 3  # a trigger text shared by more hosts among the hits promotes none
    scene_items: int = 4  # items a promoted scene brings
    cascade_scenes: int = 16
    cascade_eps: float = 0.35  # cosine distance within a topic
    cascade_topics: int = 2
    cascade_items: int = 24
    neighbour_s: float = 3600.0  # scenes this close in time to a chosen one are its neighbours
    entity_weight: float = 0.25  # in first-rank RRF votes
    new_turns_only: bool = True  # one evidence item per source turn: more of the conversation in K
    # A plan's period that holds fewer than K items is topped up from outside it, ranked after: a card
    # is dated by its turn, and a turn may speak of another period.
    time_top_up: bool = True
    # Likewise the one side (user / assistant) a question names: "What degree did I graduate with?"
    # searches the user's cards, and may find the degree only in the assistant's congratulations.
    side_top_up: bool = True
    # "fixed": K items; "adaptive": as many as the fused scores hold up for (see ``adaptive_count``).
    evidence_policy: str = "fixed"
    evidence_dropoff: float = 0.5  # adaptive: stop at the first item scoring under this share of the best
    evidence_min_items: int = 3  # adaptive: at least this many (when they fit the budget)
    evidence_max_items: int = 40  # adaptive: never more
    evidence_max_tokens: int = 1000  # adaptive: the budget when the query sets none
    research_rounds: int = 1  # rounds of the research loop for multi-hop plans (1 = no loop)
    research_queries: int = 3  # follow-up queries per round
    research_seeds: int = 3  # best evidence items whose names the follow-ups take
    graph: GraphParams = field(default_factory=GraphParams)  # graph expansion (hops=0: off)
    # The question with its speakers' names made "someone" ("content query"): "none"; "vote" (one more
    # dense ranking, a fusion vote); "semantic" (the semantic rank uses it instead of the question);
    # "both". Card texts carry "Speaker: ", so a short card of the named speaker otherwise outranks
    # the card that answers.
    content_query: str = "semantic"  # chosen on the LoCoMo tune split (docs/retrieval.md)


@dataclass(frozen=True)
class Scope:
    """Hard filters of one query. ``roles``: one search per entry (None = any role), then fused."""

    tenant_id: str
    conversation_id: str
    time_range: tuple[float | None, float | None] | None = None
    roles: tuple[str | None, ...] = (None,)
    history: bool = False  # False: only current versions (consolidation retires the others)

    def conversation(self, **any_of: Sequence[str]) -> StoreFilter:
        return StoreFilter(equals={"conversation_id": self.conversation_id}, any_of=any_of)

    def cards(self, role: str | None, **any_of: Sequence[str]) -> StoreFilter:
        equals: dict[str, str] = {"conversation_id": self.conversation_id}
        if role is not None:
            equals["role"] = role
        ranges = {"event_ts": self.time_range} if self.time_range else {}
        return StoreFilter(equals=equals, any_of=any_of, range_ts=ranges, not_equals={} if self.history else RETIRED)

    def without_time(self) -> Scope:
        """This scope without its period (itself when it has none)."""
        return dataclasses.replace(self, time_range=None)

    def any_side(self) -> Scope:
        """This scope over every side, when it searches only one (itself otherwise: an ambiguous
        question already searches each side)."""
        return dataclasses.replace(self, roles=(None,)) if len(self.roles) == 1 else self


@dataclass
class Candidate:
    id: str
    payload: Mapping[str, Any]
    vector: np.ndarray | None
    ranks: dict[str, int] = field(default_factory=dict)  # ranking name → best (0-based) rank
    found_by: set[str] = field(default_factory=set)
    similarity: float = 0.0
    score: float = 0.0


class Pool:
    """Candidates by point id: a card found several ways is one candidate with several votes."""

    def __init__(self) -> None:
        self.items: dict[str, Candidate] = {}

    def add(self, ranking: str, signal: str, hits: Iterable[StoreHit]) -> None:
        for rank, hit in enumerate(hits):
            c = self.items.get(hit.id)
            if c is None:
                c = self.items[hit.id] = Candidate(hit.id, hit.payload, _vector(hit))
            elif c.vector is None:
                c.vector = _vector(hit)
            c.ranks[ranking] = min(rank, c.ranks.get(ranking, rank))
            c.found_by.add(signal)

    def __len__(self) -> int:
        return len(self.items)


def _vector(hit: StoreHit) -> np.ndarray | None:
    return None if hit.vector is None else np.asarray(hit.vector, dtype=np.float32)


def mentions_entity(payload: Mapping[str, Any], entities: Sequence[str]) -> bool:
    wanted = {e.lower() for e in entities}
    if not wanted:
        return False
    names = [payload.get("subject") or "", *payload.get("entity_triggers", [])]
    return any(n.lower() in wanted for n in names)


def discriminative(hits: Sequence[StoreHit], max_hosts: int) -> list[StoreHit]:
    """Trigger hits whose text points to at most ``max_hosts`` hosts: a trigger that half the
    conversation carries (a name said every day) says nothing about which memory is meant."""
    hosts: dict[str, set[str]] = {}
    for h in hits:
        hosts.setdefault(str(h.payload.get("text", "")).lower(), set()).add(h.payload["host_id"])
    return [h for h in hits if len(hosts[str(h.payload.get("text", "")).lower()]) <= max_hosts]


def rerank(pool: Pool, query_vectors: np.ndarray, entities: Sequence[str], params: RetrievalParams) -> list[Candidate]:
    """The pool in final order (see the module docstring); candidates that do not score are left out."""
    candidates = list(pool.items.values())
    if not candidates:
        return []
    for c in candidates:
        c.similarity = float(np.max(query_vectors @ c.vector)) if c.vector is not None else 0.0
    semantic = sorted(candidates, key=lambda c: c.similarity, reverse=True)
    vote = lambda rank: 1.0 / (params.rrf_k + rank + 1)  # noqa: E731
    out = []
    for rank, c in enumerate(semantic):
        others = {name: r for name, r in c.ranks.items() if not name.startswith("dense")}
        if c.similarity < params.min_similarity and not others:
            continue
        c.score = vote(rank) + sum(vote(r) for r in others.values())
        if mentions_entity(c.payload, entities):
            c.score += params.entity_weight * vote(0)
        out.append(c)
    return sorted(out, key=lambda c: c.score, reverse=True)


def speakers_of(candidates: Iterable[Candidate]) -> frozenset[str]:
    """The speakers of these cards."""
    return frozenset(str(c.payload["speaker"]) for c in candidates if c.payload.get("speaker"))


def pool_speakers(pool: Pool) -> frozenset[str]:
    """The speakers of the pooled cards."""
    return speakers_of(pool.items.values())


def speakers_named(question: str, speakers: Iterable[str]) -> list[str]:
    """The speakers the question names, as whole words (the names the content query drops)."""
    return sorted(s for s in speakers if re.search(rf"\b{re.escape(s)}\b", question))


def top_k(ranked: Sequence[Candidate], k: int, *, new_turns_only: bool = False) -> list[Candidate]:
    """The first ``k`` candidates, skipping texts already chosen (the same sentence said twice) and,
    with ``new_turns_only``, candidates whose source turns earlier evidence already covers."""
    seen: set[str] = set()
    covered: set[str] = set()
    out = []
    for c in ranked:
        key = " ".join(str(c.payload.get("text", "")).lower().split())
        turns = set(c.payload.get("turn_ids", []))
        if key in seen or (new_turns_only and turns and turns <= covered):
            continue
        seen.add(key)
        covered |= turns
        out.append(c)
        if len(out) == k:
            break
    return out


def top_up(
    chosen: Sequence[Candidate],
    more: Sequence[Candidate],
    k: int,
    *,
    max_tokens: int | None = None,
    new_turns_only: bool = False,
) -> list[Candidate]:
    """``chosen``, then those of ``more`` that are new (another point, another text and, with
    ``new_turns_only``, a turn not yet covered), while fewer than ``k`` and within ``max_tokens``."""
    out = list(chosen)
    ids = {c.id for c in out}
    seen = {" ".join(str(c.payload.get("text", "")).lower().split()) for c in out}
    covered = {t for c in out for t in c.payload.get("turn_ids", [])}
    used = sum(count_tokens(str(c.payload.get("text", ""))) for c in out)
    for c in more:
        if len(out) >= k:
            break
        key = " ".join(str(c.payload.get("text", "")).lower().split())
        turns = set(c.payload.get("turn_ids", []))
        if c.id in ids or key in seen or (new_turns_only and turns and turns <= covered):
            continue
        n = count_tokens(str(c.payload.get("text", "")))
        if max_tokens is not None and out and used + n > max_tokens:
            break
        out.append(c)
        ids.add(c.id)
        seen.add(key)
        covered |= turns
        used += n
    return out


def adaptive_count(
    scores: Sequence[float], tokens: Sequence[int], *, budget: int | None, dropoff: float, min_items: int
) -> int:
    """How many of the ranked items (best first) to keep: those that fit ``budget`` tokens, and of
    them, past the first ``min_items``, none after the first whose score falls under ``dropoff`` times
    the best score (where the fused score drops off, the rest is noise). At least one item."""
    keep, used = 0, 0
    top = scores[0] if scores else 0.0
    for i, (score, n) in enumerate(zip(scores, tokens)):
        if budget is not None and used + n > budget and keep:
            break
        if i >= min_items and score < dropoff * top:
            break
        keep, used = keep + 1, used + n
    return keep


def within_budget(tokens: Sequence[int], budget: int | None) -> int:
    """How many of the ranked items fit ``budget`` tokens (at least one; all without a budget)."""
    if budget is None:
        return len(tokens)
    used = 0
    for i, n in enumerate(tokens):
        if used + n > budget and i:
            return i
        used += n
    return len(tokens)


class Retriever:
    """The store-facing half of retrieval; the choices (fusion, topics) are the pure functions above."""

    def __init__(self, store: VectorStore, params: RetrievalParams):
        self.store = store
        self.params = params

    def hybrid(
        self,
        pool: Pool,
        scope: Scope,
        texts: Sequence[str],
        vectors: np.ndarray,
        *,
        k: int = 0,
        first: int = 0,
        signal: str | None = None,
    ) -> None:
        """Dense and BM25 candidates for each query text, one ranking per text and role (at least
        twice ``k`` per signal, so a large K still has a pool to choose from). ``first`` numbers the
        rankings after earlier ones; ``signal`` names how they were found (default dense / sparse)."""
        n = self.pool_size(k)
        for i, (text, vector) in enumerate(zip(texts, vectors), start=first):
            self.dense(pool, scope, vector, ranking=f"dense:{i}", signal=signal or "dense", limit=n)
            for role in scope.roles:
                pool.add(
                    f"sparse:{i}:{role}",
                    signal or "sparse",
                    self.store.search_text(
                        CARDS, scope.tenant_id, text, where=scope.cards(role), limit=n, with_vectors=True
                    ),
                )

    def fresh_turns(self, scope: Scope, text: str, vector: np.ndarray, k: int) -> list[Candidate]:
        """The best ``k`` raw turns of the conversation that no card holds yet (points still
        ``fresh``): dense and BM25 over them, fused like the cards. None once every turn is flushed,
        so the cards' ranking never sees them."""
        where = StoreFilter(equals={"conversation_id": scope.conversation_id, FRESH: True})
        pool = Pool()
        limit = 2 * k
        pool.add(
            "dense:fresh",
            "fresh",
            self.store.search(TURNS, scope.tenant_id, vector, where=where, limit=limit, with_vectors=True),
        )
        pool.add(
            "sparse:fresh",
            "fresh",
            self.store.search_text(TURNS, scope.tenant_id, text, where=where, limit=limit, with_vectors=True),
        )
        return top_k(rerank(pool, vector[None, :], (), self.params), k)

    def content(self, pool: Pool, scope: Scope, vector: np.ndarray, *, k: int = 0) -> None:
        """Dense candidates for the content query (the question without its speakers' names), as a
        ranking of its own: a vote in the fusion, unlike the question's dense rankings."""
        self.dense(pool, scope, vector, ranking="content", signal="dense", limit=self.pool_size(k))

    def pool_size(self, k: int) -> int:
        """Candidates per signal and query: at least twice ``k``, so a large K has a pool to choose from."""
        return max(self.params.candidates, 2 * k)

    def dense(self, pool: Pool, scope: Scope, vector: np.ndarray, *, ranking: str, signal: str, limit: int) -> None:
        """The cards closest to ``vector``, one ranking per role (``<ranking>:<role>``)."""
        for role in scope.roles:
            pool.add(
                f"{ranking}:{role}",
                signal,
                self.store.search(
                    CARDS, scope.tenant_id, vector, where=scope.cards(role), limit=limit, with_vectors=True
                ),
            )

    def triggers(self, pool: Pool, scope: Scope, vectors: np.ndarray) -> list[str]:
        """Promote the cards whose triggers pass the threshold; return the scenes promoted likewise."""
        best: dict[tuple[str, str], float] = {}
        for vector in vectors:
            hits = [
                h
                for h in self.store.search(
                    TRIGGERS, scope.tenant_id, vector, where=scope.conversation(), limit=self.params.trigger_hits
                )
                if h.score >= self.params.trigger_threshold
            ]
            for hit in discriminative(hits, self.params.trigger_max_hosts):
                key = (hit.payload["host_kind"], hit.payload["host_id"])
                best[key] = max(best.get(key, 0.0), hit.score)
        ordered = sorted(best, key=best.get, reverse=True)  # type: ignore[arg-type]
        card_ids = [host for kind, host in ordered if kind == "card"]
        if card_ids:
            order = {cid: i for i, cid in enumerate(card_ids)}
            for role in scope.roles:
                hits = self.store.scroll(
                    CARDS,
                    scope.tenant_id,
                    where=scope.cards(role, card_id=card_ids),
                    limit=len(card_ids),
                    with_vectors=True,
                )
                pool.add(f"trigger:{role}", "trigger", sorted(hits, key=lambda h: order[h.payload["card_id"]]))
        return [host for kind, host in ordered if kind == "scene"]

    def scene_items(
        self, pool: Pool, scope: Scope, vector: np.ndarray, scene_ids: Sequence[str], *, signal: str, limit: int
    ) -> None:
        """The items of these scenes closest to the question join the pool under ``signal``."""
        if not scene_ids:
            return
        for role in scope.roles:
            pool.add(
                f"{signal}:{role}",
                signal,
                self.store.search(
                    CARDS,
                    scope.tenant_id,
                    vector,
                    where=scope.cards(role, scene_id=list(scene_ids)),
                    limit=limit,
                    with_vectors=True,
                ),
            )

    def graph(self, pool: Pool, scope: Scope, vectors: np.ndarray, ranked: Sequence[Candidate], *, k: int = 0) -> int:
        """Graph expansion from the best of ``ranked``: the cards reached (processors/query/graph.py) join the
        pool as one ranking, best path weight x closeness to the question first; ``k`` evidence items
        are asked for (the hop's budget grows with it). Returns how many."""
        g = self.params.graph
        per_hop = g.kept(k)
        frontier = seed_nodes([(c.id, c.payload, c.score) for c in ranked], g.seeds)
        speakers = speakers_of(ranked)
        visited = {c.id for c in ranked[: max(g.seeds, 1)]}
        reached: list[tuple[float, StoreHit]] = []
        for hop in range(1, g.hops + 1):
            if not frontier:
                break
            hits, adjacent = self._neighbours(scope, vectors[0], frontier, speakers, 3 * per_hop)
            names = {k for node in frontier for k in names_of(node.payload, speakers)}
            skip = hubs([h.payload for h in hits.values()], names, g.max_degree)
            scored: list[tuple[Node, float]] = []
            by_id: dict[str, StoreHit] = {}
            for h in hits.values():
                if h.id in visited or h.vector is None:
                    continue
                weight, via = path_weight(frontier, h.payload, g, speakers=speakers, skip_names=skip, adjacent=adjacent)
                if via is None:
                    continue
                cosine = float(np.max(vectors @ np.asarray(h.vector, dtype=np.float32)))
                scored.append((Node(h.id, h.payload, weight * (g.decay if hop > 1 else 1.0), hop), cosine))
                by_id[h.id] = h
            frontier = keep_best(scored, per_hop)
            cosine_of = {node.id: cos for node, cos in scored}
            for node in frontier:
                visited.add(node.id)
                reached.append((node.weight * closeness(cosine_of[node.id]), by_id[node.id]))
        reached.sort(key=lambda wh: wh[0], reverse=True)
        pool.add("graph", "graph", [h for _, h in reached])
        return len(reached)

    def _neighbours(
        self, scope: Scope, vector: np.ndarray, frontier: Sequence[Node], speakers: frozenset[str], limit: int
    ) -> tuple[dict[str, StoreHit], dict[str, set[str]]]:
        """The cards one edge away from the frontier (at most ``limit`` per edge type, closest to the
        question first, with vectors), and each frontier node's adjacent turn ids (temporal edges)."""
        names = sorted({spelled for node in frontier for spelled in names_of(node.payload, speakers).values()})
        scenes = sorted({str(node.payload["scene_id"]) for node in frontier if node.payload.get("scene_id")})
        own = {node.id: turn_ids(node.payload) for node in frontier}
        adjacent = self._adjacent(scope, own)
        near = sorted(set().union(*adjacent.values())) if adjacent else []
        hits: dict[str, StoreHit] = {}
        for role in scope.roles:
            filters = []
            if names:
                filters += [scope.cards(role, entity_triggers=names), scope.cards(role, subject=names)]
            if scenes:
                filters.append(scope.cards(role, scene_id=scenes))
            if near:
                filters.append(scope.cards(role, turn_ids=near))
            for where in filters:
                for h in self.store.search(CARDS, scope.tenant_id, vector, where=where, limit=limit, with_vectors=True):
                    hits.setdefault(h.id, h)
        return hits, adjacent

    def _adjacent(self, scope: Scope, own: Mapping[str, set[str]]) -> dict[str, set[str]]:
        """Node id → the turn ids right before and after its source turns (by ``seq`` of the raw turns)."""
        wanted = sorted(set().union(*own.values())) if own else []
        if not wanted:
            return {}
        where = scope.conversation(turn_id=wanted)
        sources = self.store.scroll(TURNS, scope.tenant_id, where=where, limit=len(wanted) + 1)
        seq_of = {str(h.payload["turn_id"]): int(h.payload["seq"]) for h in sources if "seq" in h.payload}
        seqs = sorted({s + d for s in seq_of.values() for d in (-1, 1)})
        if not seqs:
            return {}
        around = self.store.scroll(
            TURNS,
            scope.tenant_id,
            where=StoreFilter(equals={"conversation_id": scope.conversation_id}, any_of={"seq": seqs}),
            limit=2 * len(seqs) + 1,
        )
        turn_of_seq = {int(h.payload["seq"]): str(h.payload["turn_id"]) for h in around}
        return {node: adjacent_turns(seq_of, turn_of_seq, turns) for node, turns in own.items()}

    def cascade(self, pool: Pool, scope: Scope, vector: np.ndarray) -> list[str]:
        """Topic → scene → item: returns the scenes chosen; their items join the pool."""
        p = self.params
        scenes = [
            h
            for h in self.store.search(
                SCENES, scope.tenant_id, vector, where=scope.conversation(), limit=p.cascade_scenes, with_vectors=True
            )
            if h.vector is not None
        ]
        if not scenes:
            return []
        topics = rank_topics(
            np.asarray([h.vector for h in scenes], dtype=np.float32), [h.score for h in scenes], eps=p.cascade_eps
        )
        chosen = [scenes[i] for topic in topics[: p.cascade_topics] for i in topic.members]
        scene_ids = [h.id for h in chosen]
        for h in chosen[: p.cascade_topics]:  # temporal neighbours of each topic's best scene
            start, end = h.payload.get("event_ts"), h.payload.get("end_ts") or h.payload.get("event_ts")
            if start is None or end is None:
                continue
            near = StoreFilter(
                equals={"conversation_id": scope.conversation_id},
                range_ts={"event_ts": (start - p.neighbour_s, end + p.neighbour_s)},
            )
            for n in self.store.scroll(SCENES, scope.tenant_id, where=near, limit=8):
                if n.id not in scene_ids:
                    scene_ids.append(n.id)
        self.scene_items(pool, scope, vector, scene_ids, signal="cascade", limit=p.cascade_items)
        return scene_ids


__all__ = [
    "RETIRED",
    "RetrievalParams",
    "Scope",
    "Candidate",
    "Pool",
    "Retriever",
    "rerank",
    "top_k",
    "mentions_entity",
    "discriminative",
]
