"""Side-by-side runs (pure): speedup and recall change against the first run."""

import pytest

from memstream.bench.compare import compare, run_summary


def result(turns_per_s: float, recalls: dict[int, float], *, split: bool, turns: int = 100) -> dict:
    sweep = [{"k": k, "memstream": {"evidence_recall": r}} for k, r in recalls.items()]
    out = {"ingest": {"turns": turns, "seconds": turns / turns_per_s, "turns_per_s": turns_per_s, "commits": ["abc"]}}
    if split:  # a run with the split rule: its sweep is the headline split's, "all" holds every question
        return out | {"sweep": [], "splits": {"all": {"sweep": sweep}}}
    return out | {"sweep": sweep}


def test_runs_are_compared_with_the_first_over_every_question():
    old = result(10.0, {5: 0.60, 10: 0.70}, split=False)
    new = result(25.0, {5: 0.62, 10: 0.69}, split=True)
    assert run_summary(new)["recall_at_k"] == {"5": 0.62, "10": 0.69}
    runs = compare([old, new], ["old", "new"])["runs"]
    assert runs[0]["speedup"] == 1.0 and runs[1]["speedup"] == 2.5
    assert runs[1]["recall_change"] == {"5": 0.02, "10": -0.01}


def test_runs_over_other_data_are_refused():
    with pytest.raises(ValueError, match="different turns"):
        compare([result(10.0, {5: 0.6}, split=False), result(10.0, {5: 0.6}, split=False, turns=99)], ["a", "b"])
