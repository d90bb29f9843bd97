"""bench embed: dense top-K keeps one chunk per turn and scores each question in its own conversation."""

from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from memstream.bench.cases import BenchQuestion, BenchSet
from memstream.bench.embed import dense_recall, top_turns

AT = datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_top_turns_keeps_a_turn_once_in_score_order():
    scores = np.array([0.9, 0.8, 0.7, 0.95])
    assert top_turns(scores, ["D1:1", "D1:1", "D1:2", "D1:3"], 2) == ["D1:3", "D1:1"]
    assert top_turns(scores, ["D1:1", "D1:1", "D1:2", "D1:3"], 5) == ["D1:3", "D1:1", "D1:2"]


def test_dense_recall_searches_only_the_questions_conversation_per_split():
    questions = [
        BenchQuestion("a:q1", "a", "q", AT, "4", "x", ("D1:1",)),
        BenchQuestion("b:q1", "b", "q", AT, "4", "x", ("D1:1",)),
    ]
    bench = BenchSet("locomo", Path("d"), {"a": [], "b": []}, questions, ("evidence_recall",), splits={"a:q1": "tune"})
    # chunk 0 (a, D1:1) and chunk 2 (b, D1:2) point at the question; b's gold D1:1 is chunk 1
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    q = np.array([[1.0, 0.0], [1.0, 0.0]])
    recall = dense_recall(bench, vectors, q, ["D1:1", "D1:1", "D1:2"], ["a", "b", "b"], k=1)
    assert recall == {"tune": 1.0, "report": 0.0}
