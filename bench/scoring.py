"""Scores shared by the benchmarks (pure)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, TypeVar

T = TypeVar("T")


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


def spread(items: Sequence[T], n: int) -> list[T]:
    """``n`` items spread evenly over ``items`` (all of them when there are fewer)."""
    if n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


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


def fill_k(budget: int) -> int:
    """The evidence K of a query filled to ``budget`` tokens: enough items (≥ 12 tokens each) that the
    budget, not K, ends the list, and a candidate pool to match; at most a query's 100."""
    return min(100, max(10, budget // 12))


# --- fair baselines: fusion and one chunk per turn ------------------------------------------------

RRF_K = 60  # the usual reciprocal-rank-fusion constant (Cormack et al. 2009)


def rrf_fuse(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Reciprocal rank fusion: each key scores the sum over rankings of ``1 / (k + rank)`` (rank from
    1; a key absent from a ranking gets nothing from it; a repeat within one ranking counts once).
    Ties keep the order of first appearance, earlier rankings first, so the fusion is deterministic."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, key in enumerate(ranking, start=1):
            if key not in seen:
                seen.add(key)
                scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda key: -scores[key])  # stable: ties stay in first-appearance order


def one_per_turn(ranked: Sequence[T], turn_of: Callable[[T], str]) -> list[T]:
    """The best-ranked chunk of each turn, in rank order: later chunks of a turn already taken are
    skipped (as memstream's ``new_turns_only`` skips evidence whose turns are covered), so a budget
    is spent on as many turns as it can reach, the same way memstream spends it."""
    taken: set[str] = set()
    out = []
    for item in ranked:
        turn = turn_of(item)
        if turn not in taken:
            taken.add(turn)
            out.append(item)
    return out


# --- answer-bearing recall ------------------------------------------------------------------------

ARTICLES = re.compile(r"\b(a|an|the)\b")
NOT_WORD = re.compile(r"[^\w\s]|_")
# Words too common to show that a context holds an answer; numbers are never among them.
STOPWORDS = frozenset(
    """and or but nor of to in on at for with by from as into onto about over under after before than
    then so is are was were be been being am it its this that these those there here he she they we you
    i me my mine his her hers their theirs our ours your yours him them us do does did done has have had
    having will would shall should can could may might must not also just very too some any all each
    what which who whom whose when where why how""".split()
)


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: lowercase; every character that is not a letter, a digit or
    whitespace removed (punctuation and symbols, replaced by nothing, so ``mother's`` → ``mothers``
    and ``$1,000`` → ``1000``); the articles a/an/the removed; whitespace collapsed to single spaces."""
    return " ".join(ARTICLES.sub(" ", NOT_WORD.sub("", str(text).lower())).split())


def content_tokens(normalized: str) -> list[str]:
    """The tokens of a normalised answer that carry its content: all but :data:`STOPWORDS`."""
    return [t for t in normalized.split() if t not in STOPWORDS]


def bears_answer(gold: str, texts: Sequence[str]) -> bool:
    """Whether a returned context holds the gold answer. Both are normalised
    (:func:`normalize_answer`); the context bears the answer when either
    1. the normalised gold answer occurs in one normalised text as whole words (a substring that
       starts and ends at word boundaries: gold ``7`` is not found in ``2017``), or
    2. the gold answer has two or more words and every content token of it (not a stopword; numbers
       always count) is among the tokens of the whole context (all texts together), in any order.
    An empty gold answer is never borne."""
    wanted = normalize_answer(gold)
    if not wanted:
        return False
    normalized = [normalize_answer(t) for t in texts]
    if any(f" {wanted} " in f" {t} " for t in normalized):
        return True
    tokens = wanted.split()
    content = content_tokens(wanted)
    if len(tokens) < 2 or not content:
        return False
    present = {token for t in normalized for token in t.split()}
    return all(token in present for token in content)


# --- LongMemEval's retrieval metrics --------------------------------------------------------------


def first_distinct(items: Iterable[str], n: int | None = None) -> list[str]:
    """The items in order, each once, at most ``n`` of them (all when ``n`` is None)."""
    out: dict[str, None] = {}
    for item in items:
        if n is not None and len(out) >= n:
            break
        out.setdefault(item, None)
    return list(out)


def recall_any(units: Sequence[str], gold: Sequence[str]) -> float:
    """1 when at least one gold unit is among the returned units (LongMemEval's recall_any@k)."""
    returned = set(units)
    return float(any(g in returned for g in gold))


def recall_all(units: Sequence[str], gold: Sequence[str]) -> float:
    """1 when every gold unit is among the returned units (LongMemEval's recall_all@k); 0 without gold."""
    returned = set(units)
    return float(bool(gold) and all(g in returned for g in gold))


def _dcg(relevances: Sequence[float]) -> float:
    # LongMemEval's eval_utils.dcg: the first position counts 1, position i >= 2 counts 1 / log2(i).
    return sum(r if i == 1 else r / math.log2(i) for i, r in enumerate(relevances, start=1))


def ndcg(ranked: Sequence[str], gold: Sequence[str], cutoff: int) -> float:
    """NDCG at ``cutoff`` as LongMemEval computes it: binary relevance, DCG of ``ranked[:cutoff]``
    with the first position counting 1 and position i >= 2 counting 1/log2(i), over the DCG of the
    ideal list (min(len(gold), cutoff) relevant units first). 0 when there is no gold."""
    wanted = set(gold)
    ideal = _dcg([1.0] * min(len(wanted), cutoff))
    if not ideal:
        return 0.0
    return _dcg([1.0 if u in wanted else 0.0 for u in ranked[:cutoff]]) / ideal
