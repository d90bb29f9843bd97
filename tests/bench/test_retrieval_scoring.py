"""Retrieval bench scoring: recall, percentiles, equal-token baselines, the sweep plot."""

from datetime import datetime, timezone
from pathlib import Path

import pytest

from memstream.bench.retrieval import Question, baseline_outcome, plot_sweep, summarize
from memstream.bench.scoring import evidence_recall, percentile, take_within_budget
from memstream.ports import StoreHit

Q = Question("conv", "Where did Ann go?", 1, ("D1:1", "D2:3"), datetime(2024, 1, 1, tzinfo=timezone.utc))


def test_recall_is_the_share_of_gold_turns_in_the_provenance():
    assert evidence_recall(["D1:1", "D2:3"], ["D2:3", "D9:9", "D2:3"]) == 0.5
    assert evidence_recall([], ["D1:1"]) == 0.0


def test_nearest_rank_percentiles():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_a_baseline_returns_what_fits_the_same_tokens_and_at_least_one_item():
    assert take_within_budget(["aa", "bb", "cc"], 4, len) == 2
    assert take_within_budget(["aaaaaa"], 4, len) == 1
    hits = [
        StoreHit(f"h{i}", 1.0, {"speaker": "Ann", "text": "went to Paris", "turn_id": tid})
        for i, tid in enumerate(["D1:1", "D5:5", "D2:3"])
    ]
    small = baseline_outcome(Q, hits, budget=6)  # "Ann: went to Paris" is 5 tokens: one fits
    assert small.recall == 0.5 and small.context_tokens <= 6
    assert baseline_outcome(Q, hits, budget=1000).recall == 1.0


def test_the_sweep_is_plotted_as_a_png(tmp_path: Path):
    rows = [
        {
            "k": k,
            **{
                m: summarize([baseline_outcome(Q, [], 10)]) | {"context_tokens": 10.0 * k, "evidence_recall": r}
                for m, r in (("adaptive", 0.1 * k), ("dense_topk", 0.05 * k), ("bm25_topk", 0.06 * k))
            },
        }
        for k in (1, 2, 4)
    ]
    out = plot_sweep(rows, tmp_path / "sweep.png", "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
