"""Segmentation quality: boundary precision / recall / F1 of similarity-only, attention-only and
hybrid segmentation on LongMemEval haystacks joined into one stream (the joins are the labels),
plus the label-free calibration of the attention heads."""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from memstream.bench.longmemeval import load_longmemeval, topic_change_stream
from memstream.datasets import load_locomo, locomo_turns
from memstream.processors.write.compress import compress_turn
from memstream.processors.write.segment import (
    Segmenter,
    SegmenterState,
    SegmentParams,
    adjacent_similarities,
    select_heads,
)

from .scoring import BoundaryScore, score_boundaries

METHODS = ("similarity", "attention", "hybrid")


class CachedCohesion:
    """Windows are the same for every method (the carry does not depend on the cuts): run each once."""

    def __init__(self, cohesion: Callable[[Sequence[str]], np.ndarray]):
        self._cohesion = cohesion
        self._cache: dict[tuple[str, ...], np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        key = tuple(texts)
        if key not in self._cache:
            self._cache[key] = self._cohesion(texts)
        return self._cache[key]


def predicted_boundaries(segmenter: Segmenter, turns: Iterable[Any]) -> list[int]:
    """Stream the turns through a fresh window; the indices of turns that open a segment."""
    state = SegmenterState()
    index = {}
    out: list[int] = []
    for i, turn in enumerate(turns):
        index[turn.turn_id] = i
        for seg in segmenter.add(state, compress_turn(turn, None, 1.0)):
            if seg.boundary and seg.boundary_reason not in ("first", "session"):
                out.append(index[seg.item.turn.turn_id])
    for seg in segmenter.drain(state):
        if seg.boundary and seg.boundary_reason not in ("first", "session"):
            out.append(index[seg.item.turn.turn_id])
    return out


def run_segment_bench(
    data: Path,
    *,
    questions: int,
    params: SegmentParams,
    embed: Callable[[Sequence[str]], np.ndarray],
    cohesion: Callable[[Sequence[str]], np.ndarray],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    # ``embed`` is the worker's embedder, whose cache already answers the repeats across methods.
    cohesion_c = CachedCohesion(cohesion)
    segmenters = {m: Segmenter(replace(params, method=m), embed, cohesion_c) for m in METHODS}  # type: ignore[arg-type]
    totals = {m: BoundaryScore(0, 0, 0) for m in METHODS}
    turns_total = 0
    started = time.perf_counter()
    chosen = load_longmemeval(data)[:questions]
    for q in chosen:
        turns, gold = topic_change_stream(q, tenant_id="bench")
        turns_total += len(turns)
        for method, segmenter in segmenters.items():
            totals[method] += score_boundaries(predicted_boundaries(segmenter, turns), gold, tolerance=1)
        if progress:
            progress(q.question_id)
    return {
        "data": str(data),
        "questions": len(chosen),
        "turns": turns_total,
        "gold_boundaries": totals["hybrid"].gold,
        "tolerance_turns": 1,
        "f1": {m: round(s.f1, 4) for m, s in totals.items()},
        "methods": {
            m: {
                "precision": round(s.precision, 4),
                "recall": round(s.recall, 4),
                "f1": round(s.f1, 4),
                "predicted": s.predicted,
                "matched": s.matched,
            }
            for m, s in totals.items()
        },
        "params": {k: (list(map(list, v)) if k == "heads" else v) for k, v in asdict(params).items() if k != "method"},
        "seconds": round(time.perf_counter() - started, 1),
    }


def calibrate_heads(
    locomo: Path,
    *,
    params: SegmentParams,
    embed: Callable[[Sequence[str]], np.ndarray],
    cohesion: Callable[[Sequence[str]], np.ndarray],
    top_n: int = 6,
) -> dict[str, Any]:
    """Pick the attention heads whose turn cohesion follows embedding similarity (no labels used)."""
    gaps: list[np.ndarray] = []
    sims: list[np.ndarray] = []
    stride = params.window_turns - params.carry_turns
    for sample in load_locomo(locomo):
        texts = [t.text for t in locomo_turns(sample, tenant_id="calibration")]
        for start in range(0, max(1, len(texts) - 1), stride):
            window = texts[start : start + params.window_turns]
            if len(window) < 2:
                continue
            gaps.append(cohesion(window))
            sims.append(adjacent_similarities(embed(window)))
    all_gaps, all_sims = np.concatenate(gaps), np.concatenate(sims)
    return {
        "heads": [list(h) for h in select_heads(all_gaps, all_sims, top_n=top_n)],
        "calibrated_on": Path(locomo).name,
        "gaps": int(len(all_sims)),
    }
