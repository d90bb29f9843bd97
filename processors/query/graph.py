"""Graph expansion (AdaMem): from the best evidence, follow the memory graph to what it links to.

The graph is not stored apart: it is the one the card payloads already hold, read through the store's
payload filters at query time (docs/retrieval.md, "Graph expansion"). Nodes are cards and the
entities they name; edges, each with a prior:
- ``entity``: two cards name the same entity (a subject or entity trigger that is not a speaker of
  the conversation: speakers are in every other card) — a hub named by more than ``max_degree`` of
  the neighbours found is not followed;
- ``scene``: two cards come from the same scene;
- ``temporal``: a card cites a turn right before or after a turn the other cites (conversation
  position, ``seq`` of the raw turns).
Expansion starts from the seeds (the best evidence of the first ranking, weighted by their fused
score over the best), takes each hop's neighbours closest to the question, weights each by its best
path (seed weight x edge prior, times ``decay`` per further hop), keeps ``per_hop`` of them and goes
on from those. Being derived from the store, the graph follows the tenant filter and forgetting (an
erased card is no node) with no state of its own.

Pure here: names, links and weights. ``processors.query.retrieve.Retriever.graph`` does the store calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

EDGE_TYPES = ("entity", "scene", "temporal")


@dataclass(frozen=True)
class GraphParams:
    # Defaults chosen on the LoCoMo tune split (bench/ablate.py GRAPH_GRID; docs/retrieval.md).
    hops: int = 1  # 0 = no graph expansion
    seeds: int = 5  # best evidence items expansion starts from
    per_hop: int = 16  # neighbours kept per hop (the expansion's budget) ...
    per_item: float = 0.5  # ... and at least this many per evidence item asked: a large K needs a wider graph
    decay: float = 0.5  # weight kept per further hop
    max_degree: int = 6  # an entity more neighbours name than this is a hub, not followed
    prior_entity: float = 1.0
    prior_scene: float = 1.0
    prior_temporal: float = 1.0
    multihop_only: bool = False  # expand only plans the research loop would take (aggregate, compare, spread)

    def kept(self, k: int) -> int:
        """Neighbours kept per hop when ``k`` evidence items are asked for."""
        return max(self.per_hop, math.ceil(self.per_item * k))

    def prior(self, edge: str) -> float:
        return {"entity": self.prior_entity, "scene": self.prior_scene, "temporal": self.prior_temporal}[edge]


@dataclass(frozen=True)
class Node:
    """A card reached so far: its payload, the weight of its best path and how many hops away it is."""

    id: str
    payload: Mapping[str, Any]
    weight: float
    hop: int


def names_of(payload: Mapping[str, Any], speakers: Iterable[str] = ()) -> dict[str, str]:
    """The entities a card names (lower-cased key → the spelling stored), speakers left out."""
    skip = {s.lower() for s in speakers if s}
    raw = payload.get("entity_triggers")
    out: dict[str, str] = {}
    for name in [str(payload.get("subject") or ""), *([str(t) for t in raw] if isinstance(raw, list) else [])]:
        name = name.strip()
        if name and name.lower() not in skip:
            out.setdefault(name.lower(), name)
    return out


def hubs(neighbours: Sequence[Mapping[str, Any]], names: Iterable[str], max_degree: int) -> set[str]:
    """Lower-cased names that more than ``max_degree`` of the neighbours carry."""
    wanted = {n.lower() for n in names}
    degree: dict[str, int] = {}
    for payload in neighbours:
        for name in names_of(payload).keys() & wanted:
            degree[name] = degree.get(name, 0) + 1
    return {name for name, d in degree.items() if d > max_degree}


def turn_ids(payload: Mapping[str, Any]) -> set[str]:
    raw = payload.get("turn_ids")
    return {str(t) for t in raw} if isinstance(raw, list) else set()


def links(
    seed: Node,
    payload: Mapping[str, Any],
    *,
    speakers: Iterable[str],
    skip_names: set[str],
    adjacent: Mapping[str, set[str]],
) -> list[str]:
    """The edge types between a seed and a card. ``adjacent``: seed id → the turn ids next to its turns."""
    found = []
    shared = names_of(seed.payload, speakers).keys() & names_of(payload, speakers).keys()
    if shared - skip_names:
        found.append("entity")
    scene = seed.payload.get("scene_id")
    if scene and payload.get("scene_id") == scene:
        found.append("scene")
    if turn_ids(payload) & adjacent.get(seed.id, set()):
        found.append("temporal")
    return found


def path_weight(
    seeds: Sequence[Node],
    payload: Mapping[str, Any],
    params: GraphParams,
    *,
    speakers: Iterable[str],
    skip_names: set[str],
    adjacent: Mapping[str, set[str]],
) -> tuple[float, str | None]:
    """The best path from a seed to this card: (weight, its edge type), (0, None) when none links."""
    best, via = 0.0, None
    speakers = list(speakers)
    for seed in seeds:
        for edge in links(seed, payload, speakers=speakers, skip_names=skip_names, adjacent=adjacent):
            weight = seed.weight * params.prior(edge)
            if weight > best:
                best, via = weight, edge
    return best, via


def seed_nodes(items: Sequence[tuple[str, Mapping[str, Any], float]], n: int) -> list[Node]:
    """The first ``n`` ranked items (id, payload, fused score) as hop-0 nodes weighted by score over the best."""
    top = items[0][2] if items else 0.0
    return [Node(i, p, (s / top) if top > 0 else 1.0, 0) for i, p, s in items[:n]]


def closeness(cosine: float) -> float:
    """A cosine to the question as a factor in [0, 1] (never zero before -1: a far node still ranks)."""
    return (1.0 + max(-1.0, min(1.0, cosine))) / 2.0


def keep_best(reached: Sequence[tuple[Node, float]], per_hop: int) -> list[Node]:
    """The ``per_hop`` reached nodes (with their cosine to the question) of best weight x closeness."""
    ranked = sorted(reached, key=lambda nr: nr[0].weight * closeness(nr[1]), reverse=True)
    return [node for node, _ in ranked[:per_hop] if node.weight > 0]


def adjacent_turns(seq_of: Mapping[str, int], turn_of_seq: Mapping[int, str], turns: Iterable[str]) -> set[str]:
    """The turn ids right before and after these turns in the conversation (the turns themselves excluded)."""
    own = set(turns)
    out = set()
    for t in own:
        s = seq_of.get(t)
        if s is None:
            continue
        for near in (s - 1, s + 1):
            tid = turn_of_seq.get(near)
            if tid is not None and tid not in own:
                out.add(tid)
    return out


__all__ = [
    "EDGE_TYPES",
    "GraphParams",
    "Node",
    "names_of",
    "hubs",
    "links",
    "path_weight",
    "seed_nodes",
    "keep_best",
    "closeness",
    "adjacent_turns",
    "turn_ids",
]
