"""`bench fill-recall`: the means over questions, overall, per group and per conversation."""

from datetime import datetime, timezone

from memstream.bench.cases import BenchQuestion
from memstream.bench.fill_recall import mean_scores


def question(qid: str, group: str, conversation: str) -> BenchQuestion:
    return BenchQuestion(qid, conversation, "?", datetime(2026, 1, 1, tzinfo=timezone.utc), group, "a", ("t",))


def test_scores_are_averaged_overall_per_group_and_per_conversation():
    rows = [
        (question("q1", "1", "c1"), {"evidence_recall": 1.0}),
        (question("q2", "1", "c2"), {"evidence_recall": 0.0}),
        (question("q3", "2", "c2"), {"evidence_recall": 0.5}),
    ]
    means = mean_scores(rows, per_conversation=True)
    assert means["recall"] == {"evidence_recall": 0.5}
    assert means["per_group"] == {"1": {"evidence_recall": 0.5}, "2": {"evidence_recall": 0.5}}
    assert means["per_conversation"] == {"c1": {"evidence_recall": 1.0}, "c2": {"evidence_recall": 0.25}}
    assert "per_conversation" not in mean_scores(rows, per_conversation=False)
