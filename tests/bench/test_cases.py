"""The end-to-end benchmarks' questions and scores (pure: files of our own, no services)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from memstream.bench.cases import BenchQuestion, locomo_set, longmemeval_set, score, session_of, subset
from memstream.datasets import demo_conversation_path

DEMO_LONGMEMEVAL = Path(__file__).resolve().parents[2] / "memstream" / "data" / "demo_longmemeval.json"
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_locomo_recall_is_the_share_of_gold_dia_ids_in_the_provenance() -> None:
    q = BenchQuestion("c:q0", "c", "When?", T0, "2", "May", ("D1:3", "D2:5"))
    assert score(q, ["D2:5", "D9:1"]) == {"evidence_recall": 0.5}
    assert score(q, []) == {"evidence_recall": 0.0}


def test_longmemeval_scores_sessions_and_turns_and_leaves_abstention_out() -> None:
    q = BenchQuestion("x", "x", "?", T0, "multi-session", "a", ("s1:2",), ("s1", "s3"))
    assert score(q, ["s1:0", "s2:4"]) == {"session_recall": 0.5, "turn_recall": 0.0}
    assert score(q, ["s3:1", "s1:2"]) == {"session_recall": 1.0, "turn_recall": 1.0}
    # A preference question may mark no turn: only its sessions are scored.
    no_turns = BenchQuestion("y", "y", "?", T0, "single-session-preference", "a", (), ("s1",))
    assert score(no_turns, ["s1:4"]) == {"session_recall": 1.0}
    abstain = BenchQuestion("z_abs", "z", "?", T0, "single-session-user", "a", ("s1:0",), ("s1",), abstention=True)
    assert not abstain.retrieval_scored and score(abstain, ["s1:0"]) == {}
    assert session_of("answer_4be1b6b4_2:11") == "answer_4be1b6b4_2"


def _questions(groups: dict[str, int]) -> list[BenchQuestion]:
    return [BenchQuestion(f"{g}{i}", "c", "?", T0, g, "a", ("D1:1",)) for g, n in groups.items() for i in range(n)]


def test_subset_is_seeded_keeps_file_order_and_every_group() -> None:
    questions = _questions({"1": 40, "2": 30, "3": 8, "4": 2})
    a = subset(questions, 10, seed=3)
    assert a == subset(questions, 10, seed=3)
    assert a != subset(questions, 10, seed=4)
    assert len(a) == 10 and {q.group for q in a} == {"1", "2", "3", "4"}
    assert [questions.index(q) for q in a] == sorted(questions.index(q) for q in a)
    assert subset(questions, None, seed=0) == questions
    assert subset(questions, 500, seed=0) == questions


def test_locomo_set_streams_only_the_conversations_of_the_drawn_questions() -> None:
    bench = locomo_set(demo_conversation_path())
    assert bench.name == "locomo" and bench.metrics == ("evidence_recall",)
    assert list(bench.conversations) == ["demo-nora-tomas"] and bench.turns == 30
    assert {q.group for q in bench.questions} <= {"1", "2", "3", "4"}
    assert all(q.gold_turns and q.asked_at > T0 for q in bench.questions)
    assert len({q.qid for q in bench.questions}) == len(bench.questions)
    with pytest.raises(ValueError, match="no conversation nope"):
        locomo_set(demo_conversation_path(), conversations=["nope"])


def test_longmemeval_set_makes_each_haystack_a_conversation_with_gold_turns() -> None:
    bench = longmemeval_set(DEMO_LONGMEMEVAL)
    assert bench.baseline_index == "pipeline" and bench.metrics == ("session_recall", "turn_recall")
    by_id = {q.qid: q for q in bench.questions}
    ku = by_id["demo-ku-1"]
    assert ku.gold_sessions == ("demo_k1", "demo_k3") and ku.gold_turns == ("demo_k1:0", "demo_k3:0")
    assert ku.asked_at == datetime(2024, 6, 30, 9, 0, tzinfo=timezone.utc)
    turns = bench.conversations[ku.conversation_id]
    assert [t.turn_id for t in turns][:2] == ["demo_k1:0", "demo_k1:1"]
    assert {t.turn_id for t in turns} >= set(ku.gold_turns)
    assert by_id["demo-ssu-2_abs"].abstention and not by_id["demo-ssu-2_abs"].retrieval_scored
    assert len(bench.conversations) == 3


def test_a_chunk_of_a_long_turn_counts_as_its_turn_in_the_recall():
    q = BenchQuestion("x", "x", "?", T0, "multi-session", "a", ("s1:2",), ("s1", "s3"))
    assert score(q, ["s1:2#3"]) == {"session_recall": 0.5, "turn_recall": 1.0}
