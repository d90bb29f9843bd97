"""Scores shared by the benchmarks (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class BoundaryScore:
    predicted: int
    gold: int
    matched: int

    @property
    def precision(self) -> float:
        return self.matched / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def __add__(self, other: BoundaryScore) -> BoundaryScore:
        return BoundaryScore(self.predicted + other.predicted, self.gold + other.gold, self.matched + other.matched)


def score_boundaries(predicted: Sequence[int], gold: Sequence[int], tolerance: int = 1) -> BoundaryScore:
    """One-to-one matching of predicted to gold boundaries within ``tolerance`` turns (nearest first)."""
    free = sorted(set(gold))
    matched = 0
    for p in sorted(set(predicted)):
        candidates = [g for g in free if abs(g - p) <= tolerance]
        if candidates:
            free.remove(min(candidates, key=lambda g: (abs(g - p), g)))
            matched += 1
    return BoundaryScore(len(set(predicted)), len(set(gold)), matched)


def evidence_recall(gold: Sequence[str], provenance: Sequence[str]) -> float:
    """Share of the gold turn ids found in the provenance of the returned evidence."""
    wanted = set(gold)
    return len(wanted & set(provenance)) / len(wanted) if wanted else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(1, min(len(ordered), -(-len(ordered) * q // 100)))
    return float(ordered[int(rank) - 1])


def take_within_budget(texts: Sequence[str], budget: int, count: Callable[[str], int]) -> int:
    """How many ranked texts a baseline may return within ``budget`` tokens (at least one)."""
    used = 0
    for i, text in enumerate(texts):
        used += count(text)
        if used > budget:
            return max(i, 1)
    return len(texts)


def take_nearest_budget(texts: Sequence[str], budget: int, count: Callable[[str], int]) -> int:
    """How many ranked texts come closest to ``budget`` tokens, under or over (at least one): with
    long turns, stopping under the budget would hand a baseline far fewer tokens than memstream."""
    best, best_gap, used = 1, None, 0
    for i, text in enumerate(texts, start=1):
        used += count(text)
        gap = abs(used - budget)
        if best_gap is None or gap < best_gap:
            best, best_gap = i, gap
        if used >= budget:
            break
    return min(best, len(texts))
