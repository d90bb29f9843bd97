"""Topic → scene grouping for Compose (T-Mem's cascade): density clustering of scene vectors.

Pure numpy: the retriever hands over the scenes a question reached (their vectors and scores); the
scenes are grouped into topics by density (DBSCAN over cosine distance), and the topics the question
reaches best are kept whole, so a scene that shares the topic but not the question's wording still
leads to its items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

NOISE = -1


def density_clusters(vectors: np.ndarray, *, eps: float, min_samples: int = 2) -> list[int]:
    """DBSCAN labels over cosine distance (vectors L2-normalised); ``NOISE`` for unclustered points."""
    n = len(vectors)
    if n == 0:
        return []
    distance = 1.0 - np.clip(vectors @ vectors.T, -1.0, 1.0)
    neighbours = [np.flatnonzero(distance[i] <= eps) for i in range(n)]  # includes i itself
    core = [len(nb) >= min_samples for nb in neighbours]
    labels = [NOISE] * n
    cluster = 0
    for i in range(n):
        if labels[i] != NOISE or not core[i]:
            continue
        labels[i] = cluster
        frontier = list(neighbours[i])
        while frontier:
            j = int(frontier.pop())
            if labels[j] == NOISE:
                labels[j] = cluster
                if core[j]:
                    frontier.extend(int(x) for x in neighbours[j] if labels[x] == NOISE)  # type: ignore[misc]  # numpy ints
        cluster += 1
    return labels


@dataclass(frozen=True)
class Topic:
    members: tuple[int, ...]  # indexes into the scenes handed in
    score: float


def rank_topics(vectors: np.ndarray, scores: Sequence[float], *, eps: float, min_samples: int = 2) -> list[Topic]:
    """Topics (clusters; an unclustered scene is a topic of its own), best first.

    A topic scores as its best scene plus a small share of the rest, so a dense topic the question
    touches several times outranks a lone near-match only when their best scores are close.
    """
    labels = density_clusters(vectors, eps=eps, min_samples=min_samples)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault((label, i if label == NOISE else -1), []).append(i)
    topics = []
    for members in groups.values():
        ordered = sorted(members, key=lambda i: scores[i], reverse=True)
        score = float(scores[ordered[0]]) + 0.1 * sum(float(scores[i]) for i in ordered[1:])
        topics.append(Topic(tuple(ordered), score))
    return sorted(topics, key=lambda t: t.score, reverse=True)


__all__ = ["NOISE", "Topic", "density_clusters", "rank_topics"]
