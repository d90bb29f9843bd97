"""Fair baselines, answer-bearing recall, LongMemEval's metrics and the tuning split (pure: no services)."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from memstream.bench.cases import (
    REPORT,
    TUNE,
    BenchQuestion,
    BenchSet,
    answer_score,
    full_context,
    locomo_set,
    longmemeval_set,
    ranked_scores,
    split_of,
)
from memstream.bench.e2e_ask import question_record, reader_context
from memstream.bench.e2e_baselines import Unit, baseline_rows, fuse, take_units
from memstream.bench.e2e_baselines import rankings_of as rankings
from memstream.bench.e2e_state import E2EOptions
from memstream.bench.report import BASELINES, render_report, summarize_run
from memstream.bench.retrieval import baseline_sentence_chunks, baseline_turn_text, sentence_baseline_store
from memstream.bench.scoring import (
    bears_answer,
    first_distinct,
    ndcg,
    normalize_answer,
    one_per_turn,
    recall_all,
    recall_any,
    rrf_fuse,
)
from memstream.datasets import demo_conversation_path
from memstream.ports import LlmResult
from memstream.processors.tokens import count_tokens
from memstream.schemas import Evidence, Plan, Reply, Turn

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _turn(turn_id: str, text: str, captions: list[str] | None = None, conversation: str = "c") -> Turn:
    return Turn(
        tenant_id="bench",
        conversation_id=conversation,
        session_id="S1",
        turn_id=turn_id,
        speaker="Mel",
        text=text,
        event_time=T0,
        image_captions=captions or [],
    )


# --- chunking -------------------------------------------------------------------------------------


def test_a_turn_is_cut_into_the_sentences_of_its_cards_and_its_captions_count_as_text() -> None:
    text = "Look at this. We went hiking by the lake last Sunday! It was so much fun."
    turn = _turn("D1:3", text, ["a dog on a trail"])
    assert baseline_sentence_chunks(turn) == [
        "Mel: We went hiking by the lake last Sunday!",  # "Look at this." is too short to be a card
        "Mel: It was so much fun.",
        "Mel: shared an image: a dog on a trail",
    ]
    assert baseline_turn_text(turn) == f"Mel: {turn.text} (shared an image: a dog on a trail)"
    assert full_context([turn, _turn("D1:4", "Nice")]) == baseline_turn_text(turn) + "\nMel: Nice"
    assert baseline_sentence_chunks(_turn("D1:5", "Nice")) == ["Mel: Nice"]  # a short turn stays reachable


class _Embedder:
    dim = 8

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Any) -> np.ndarray:
        self.calls += 1
        return np.ones((len(texts), self.dim), dtype=np.float32)


def test_the_sentence_store_is_built_once_and_a_resumed_run_skips_what_is_there(tmp_path: Path) -> None:
    turns = [_turn("D1:1", "We went hiking by the lake. It was so much fun."), _turn("D1:2", "Nice", ["a cake"])]
    embedder = _Embedder()
    store = sentence_baseline_store(tmp_path / "s", turns, embedder, batch=2)
    hits = store.scroll("turns", "bench", limit=10)
    assert sorted(h.payload["chunk_text"] for h in hits) == [
        "Mel: It was so much fun.",
        "Mel: Nice",
        "Mel: We went hiking by the lake.",
        "Mel: shared an image: a cake",
    ]
    assert embedder.calls == 2  # 4 chunks in batches of 2
    store.close()
    again = sentence_baseline_store(tmp_path / "s", turns, embedder, batch=2)
    assert embedder.calls == 2 and again.count("turns", "bench") == 4
    again.close()


# --- ranking --------------------------------------------------------------------------------------


def test_rrf_sums_reciprocal_ranks_and_keeps_first_appearance_on_ties() -> None:
    # a: 1/61 + 1/63; b: 1/62 + 1/61; c: 1/63; d: 1/62.
    assert rrf_fuse([["a", "b", "c"], ["b", "d", "a"]]) == ["b", "a", "d", "c"]
    assert rrf_fuse([["x"], ["y"]]) == ["x", "y"]  # a tie: the earlier ranking first
    assert rrf_fuse([["x", "x", "y"]]) == ["x", "y"]  # a repeat counts once
    assert rrf_fuse([["a", "b"], ["b", "a"]], k=0) == ["a", "b"]


def test_one_chunk_per_turn_keeps_the_best_ranked_chunk_of_each_turn() -> None:
    assert one_per_turn(["D1:1#a", "D1:2#a", "D1:1#b", "D1:3#a", "D1:2#b"], lambda c: c.split("#")[0]) == [
        "D1:1#a",
        "D1:2#a",
        "D1:3#a",
    ]
    dense = [Unit("p1", "D1:1", "Mel: one."), Unit("p2", "D1:1", "Mel: two."), Unit("p3", "D1:2", "Mel: three.")]
    sparse = [Unit("p3", "D1:2", "Mel: three."), Unit("p2", "D1:1", "Mel: two.")]
    ranked = rankings(dense, sparse, "sentences")
    assert [u.key for u in ranked["dense_sentences"]] == ["p1", "p3"]
    assert [u.key for u in ranked["bm25_sentences"]] == ["p3", "p2"]
    # Fused: p3 1/63 + 1/61, p2 1/62 + 1/62, p1 1/61: p3 (D1:2), then p2 (D1:1); p1's turn is taken.
    assert [u.key for u in fuse(dense, sparse)] == ["p3", "p2", "p1"]
    assert [u.key for u in ranked["rrf_sentences"]] == ["p3", "p2"]


def test_baselines_spend_memstreams_budget_on_one_chunk_per_turn() -> None:
    q = BenchQuestion("c:q0", "c", "Where did Mel hike?", T0, "4", "by the lake", ("D1:1", "D1:2"))
    sentence = "Mel: we went hiking by the lake."
    size = count_tokens(sentence)
    dense = [Unit("p1", "D1:1", sentence), Unit("p2", "D1:1", "Mel: it was fun."), Unit("p3", "D1:2", sentence)]
    rows = baseline_rows(q, rankings(dense, dense, "sentences"), {"main": 2 * size}, ranked=False)
    main = rows["dense_sentences"]["main"]
    assert main["context_tokens"] == 2 * size  # D1:1's second chunk was skipped, not spent
    assert main["scores"] == {"evidence_recall": 1.0, "answer_bearing": 1.0}
    chosen, tokens = take_units([Unit("p", "D1:9", "Mel: " + "word " * 50)], 3)
    assert [u.turn_id for u in chosen] == ["D1:9"] and tokens > 3  # at least one unit, even over the budget


# --- answer-bearing recall ------------------------------------------------------------------------


def test_answers_are_normalised_squad_style() -> None:
    assert normalize_answer("The  Eiffel-Tower, in Paris!") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("Mel's $1,000 prize") == "mels 1000 prize"
    assert normalize_answer(7) == "7"  # type: ignore[arg-type]  # LoCoMo answers can be ints


@pytest.mark.parametrize(
    ("gold", "texts", "bears"),
    [
        ("Sweden", ["Mel: I moved from Sweden."], True),  # punctuation
        ("the beach", ["Mel: we went to a beach"], True),  # articles
        ("7", ["Mel: back in 2017"], False),  # a number is matched as a whole word
        ("7", ["Mel: it took 7 years"], True),
        ("2", ["Mel: I have two kids"], False),  # numbers are not spelled out
        ("7 May 2023", ["Mel: on May 7, 2023 we met"], True),  # every content token, any order
        ("7 May 2023", ["Mel: on May 7 we met"], False),  # 2023 is missing
        ("painting and pottery", ["Mel: I love pottery.", "Mel: painting relaxes me"], True),  # across texts
        ("painting and pottery", ["Mel: I love pottery and the beach."], False),
        ("Yes", ["Mel: yesterday"], False),
        ("", ["anything"], False),
        ("at home", ["Mel: I stay at home"], True),
        ("with them", ["Mel: I went with them"], True),  # only stopwords: the phrase rule alone
        ("with them", ["Mel: them? I went with Jo"], False),
    ],
)
def test_a_context_bears_the_answer_as_whole_words_or_by_its_content_tokens(
    gold: str, texts: list[str], bears: bool
) -> None:
    assert bears_answer(gold, texts) is bears


def test_answer_bearing_leaves_abstention_and_empty_answers_out() -> None:
    q = BenchQuestion("q", "c", "?", T0, "1", "Paris", ("D1:1",))
    assert answer_score(q, ["Mel: Paris"]) == {"answer_bearing": 1.0}
    assert answer_score(q, ["Mel: Rome"]) == {"answer_bearing": 0.0}
    abstain = BenchQuestion("q_abs", "c", "?", T0, "t", "Paris", ("s1:0",), ("s1",), abstention=True)
    assert answer_score(abstain, ["Paris"]) == {}
    assert answer_score(BenchQuestion("q", "c", "?", T0, "1", " ", ("D1:1",)), ["x"]) == {}


# --- LongMemEval's metrics ------------------------------------------------------------------------


def test_recall_any_all_and_ndcg_as_longmemeval_computes_them() -> None:
    assert recall_any(["x", "g1"], ["g1", "g2"]) == 1.0 and recall_all(["x", "g1"], ["g1", "g2"]) == 0.0
    assert recall_all(["g2", "g1"], ["g1", "g2"]) == 1.0 and recall_any(["x"], ["g1"]) == 0.0
    assert recall_all(["x"], []) == 0.0
    # DCG counts position 1 as 1 and position i >= 2 as 1/log2(i): [x, g1, y, g2] = 1/log2(2) + 1/log2(4) = 1.5;
    # the ideal [g, g] = 1 + 1 = 2.
    assert ndcg(["x", "g1", "y", "g2"], ["g1", "g2"], 4) == pytest.approx(0.75)
    assert ndcg(["x", "g1", "y", "g2"], ["g1", "g2"], 2) == pytest.approx(0.5)  # g2 is past the cutoff
    assert ndcg(["g1"], ["g1", "g2", "g3"], 3) == pytest.approx(1 / (2 + 1 / math.log2(3)))
    assert ndcg(["x"], [], 3) == 0.0
    assert first_distinct(["a", "b", "a", "c"], 2) == ["a", "b"]


def test_ranked_scores_count_memstreams_cited_units_and_a_baselines_first_k() -> None:
    q = BenchQuestion("x", "x", "?", T0, "multi-session", "a", ("s1:2", "s3:0"), ("s1", "s3"))
    ranking = ["s2:0", "s1:2", "s1:5", "s3:0"]
    baseline = ranked_scores(q, ranking, 2, cited=False)
    assert baseline["turn_recall_any"] == 1.0 and baseline["turn_recall_all"] == 0.0  # s2:0, s1:2
    assert baseline["turn_ndcg"] == pytest.approx(0.5)  # 1/log2(2) over the ideal 1 + 1
    assert baseline["session_recall_all"] == 0.0  # its first 2 sessions: s2, s1
    assert ranked_scores(q, ranking, 3, cited=False)["session_recall_all"] == 1.0  # s2, s1, s3
    cited = ranked_scores(q, ranking, 2, cited=True)  # 2 evidence items citing all four turns
    assert cited["turn_recall_all"] == 1.0 and cited["session_recall_all"] == 1.0
    assert cited["turn_ndcg"] == pytest.approx((1 + 1 / math.log2(4)) / 2)  # cutoff 4: the cited turns
    abstain = BenchQuestion("x_abs", "x", "?", T0, "t", "a", ("s1:2",), ("s1",), abstention=True)
    assert ranked_scores(abstain, ranking, 2, cited=False) == {}


# --- the tuning split -----------------------------------------------------------------------------


def test_the_split_is_deterministic_and_disjoint() -> None:
    ids = ["conv-43", "conv-26", "conv-41", "conv-30", "conv-42"]
    locomo = {
        c: split_of(BenchQuestion(f"{c}:q0", c, "?", T0, "1", "a", ()), bench="locomo", sample_ids=ids) for c in ids
    }
    assert locomo == {"conv-26": TUNE, "conv-30": TUNE, "conv-41": REPORT, "conv-42": REPORT, "conv-43": REPORT}
    questions = [BenchQuestion(f"{i:08x}", f"{i:08x}", "?", T0, "t", "a", ()) for i in range(900)]
    first = [split_of(q, bench="longmemeval") for q in questions]
    assert first == [split_of(q, bench="longmemeval") for q in questions]  # stable
    assert set(first) == {TUNE, REPORT} and 250 < first.count(TUNE) < 350  # about a third
    bench = locomo_set(demo_conversation_path())
    assert all(bench.split(q.qid) in (TUNE, REPORT) for q in bench.questions)
    assert len({bench.split(q.qid) for q in bench.questions if q.conversation_id == "demo-nora-tomas"}) == 1


def test_a_run_of_one_split_asks_that_splits_questions_and_streams_only_their_conversations() -> None:
    data = Path(__file__).resolve().parents[2] / "memstream" / "data" / "demo_longmemeval.json"
    whole = longmemeval_set(data)
    for part in (TUNE, REPORT):
        one = longmemeval_set(data, split=part)
        expected = [q.qid for q in whole.questions if whole.split(q.qid) == part]
        assert [q.qid for q in one.questions] == expected and expected  # the demo file has both parts
        assert set(one.conversations) == {q.conversation_id for q in one.questions}
        assert {one.split(q.qid) for q in one.questions} == {part}
    # The demo conversation is the only sample of its file, so it is tune: a report run has nothing to ask.
    assert {q.qid for q in locomo_set(demo_conversation_path(), split=TUNE).questions} == {
        q.qid for q in locomo_set(demo_conversation_path()).questions
    }
    with pytest.raises(ValueError, match="report split"):
        locomo_set(demo_conversation_path(), split=REPORT)
    with pytest.raises(ValueError, match="unknown split"):
        longmemeval_set(data, split="dev")


# --- memstream's records and the report -----------------------------------------------------------


def test_reader_tokens_render_the_answer_prompt_as_the_query_engine_does() -> None:
    from memstream.processors.query.engine import QueryEngine, QueryOptions

    class Capture:
        model = "m"
        messages: list[dict[str, str]] = []

        def complete(self, messages: Any, **kwargs: Any) -> LlmResult:
            Capture.messages = messages
            return LlmResult(content="Paris", prompt_tokens=1, completion_tokens=1, model="m")

    evidence = [
        Evidence(evidence_id="E1", kind="card", point_id="p", text="Mel: I went to Paris.", score=1.0, found_by=[]),
        Evidence(
            evidence_id="E2", kind="card", point_id="q", text="Mel: so fun.", event_time=T0, score=0.5, found_by=[]
        ),
    ]
    plan = Plan(planner="rules", operation="temporal_select", profile="lookup")
    engine = QueryEngine(SimpleNamespace(), SimpleNamespace(), Capture(), QueryOptions())  # type: ignore[arg-type]
    engine.answerer.complete("Where?", plan, evidence, "- Mel (likes): tea", None)
    reply = Reply(
        tenant_id="bench",
        conversation_id="c",
        correlation_id="x",
        evidence=evidence,
        plan=plan,
        profile_text="- Mel (likes): tea",
        replied_at=T0,
    )
    assert reader_context("Where?", reply) == "\n".join(m["content"] for m in Capture.messages)
    q = BenchQuestion("c:q0", "c", "Where?", T0, "4", "Paris", ("D1:1",))
    record = question_record(q, reply.model_copy(update={"context_tokens": 9}), 1.0)
    assert record["context_texts"] == ["Mel: I went to Paris.", "Mel: so fun.", "- Mel (likes): tea"]
    assert record["reader_tokens"] == count_tokens(reader_context("Where?", reply)) > record["context_tokens"]


def _run_result(records: dict[str, dict], tmp: Path) -> dict:
    turns = [_turn(f"D1:{i}", f"turn number {i}", conversation=c) for c in ("conv-a", "conv-b") for i in range(1, 3)]
    questions = [
        BenchQuestion("conv-a:q0", "conv-a", "Where?", T0, "1", "Paris", ("D1:1",)),
        BenchQuestion("conv-b:q0", "conv-b", "When?", T0, "2", "May", ("D1:2",)),
    ]
    bench = BenchSet(
        "locomo",
        Path("data.json"),
        {"conv-a": turns[:2], "conv-b": turns[2:]},
        questions,
        ("evidence_recall",),
        splits={"conv-a:q0": TUNE, "conv-b:q0": REPORT},
    )

    def base(recall: float, bears: float) -> dict:
        point = {"context_tokens": 50, "scores": {"evidence_recall": recall, "answer_bearing": bears}}
        return {"main": point, "5": point}

    evaluation = {
        "embedding_model": "m",
        "cards": 3,
        "baselines": {
            q.qid: {
                "full_context_tokens": 1000,
                "full_context_scores": {"answer_bearing": 1.0},
                **{name: base(0.5, 0.0 if name.endswith("topk") else 1.0) for name in BASELINES},
            }
            for q in questions
        },
    }
    state = SimpleNamespace(
        construction={},
        started_at="t",
        ingest_seconds=1.0,
        ingest_segments=1,
        ingest_commits=[],
        consolidation_s=1.0,
        consolidation_decisions={},
        store_counts={},
    )
    options = E2EOptions(out=tmp, sweep_k=(5,), sweep_tokens=())  # records without budgets
    return summarize_run(bench, options, state, records, evaluation, answer_model=None, judge_model=None)


def _record(qid: str, recall: float, *, new: bool) -> dict:
    part: dict[str, Any] = {"context_tokens": 40, "turn_ids": ["D1:1"], "scores": {"evidence_recall": recall}}
    if new:
        part |= {
            "evidence_items": 2,
            "context_texts": ["Mel: Rome!", "Mel: Oslo.", "- Mel (likes): Paris"],  # the profile text last
            "reader_tokens": 120,
            "turns_per_evidence": [1, 3],
        }
    return {
        "qid": qid,
        "ok": True,
        "latency_ms": 30.0,
        "worker_latency_ms": {},
        "profile": "lookup",
        "costs": [],
        **part,
        "sweep": {"5": dict(part)},
    }


def test_every_figure_is_reported_per_split_with_the_report_split_as_headline(tmp_path: Path) -> None:
    records = {"conv-a:q0": _record("conv-a:q0", 1.0, new=True), "conv-b:q0": _record("conv-b:q0", 0.0, new=True)}
    result = _run_result(records, tmp_path)
    assert result["headline_split"] == REPORT and set(result["splits"]) == {"report", "tune", "all"}
    report, tune = result["splits"]["report"]["recall"]["overall"], result["splits"]["tune"]["recall"]["overall"]
    assert report["memstream"]["evidence_recall"] == 0.0 and tune["memstream"]["evidence_recall"] == 1.0
    assert result["recall"]["overall"] == report  # the headline
    assert report["memstream"]["answer_bearing"] == 0.0  # "Paris" is not the gold "May"
    assert tune["memstream"]["answer_bearing"] == 1.0  # through the profile text ...
    assert tune["memstream"]["answer_bearing_evidence"] == 0.0  # ... which is not evidence
    assert report["memstream"]["reader_tokens"] == 120 and report["memstream"]["evidence_tokens"] == 40
    assert report["memstream"]["provenance_turns_per_evidence"] == 2.0
    assert report["rrf_sentences"]["answer_bearing"] == 1.0 and report["full_context"]["answer_bearing"] == 1.0
    assert result["splits"]["all"]["sweep"][0]["memstream"]["evidence_recall"] == 0.5
    text = render_report(result, {})
    assert "## Report split (untuned) (the headline)" in text and "## Tune split" in text
    assert text.index("## Report split") < text.index("## Tune split") < text.index("## All questions")


def test_a_report_of_records_from_before_context_texts_says_the_figure_is_missing(tmp_path: Path) -> None:
    records = {"conv-a:q0": _record("conv-a:q0", 1.0, new=False), "conv-b:q0": _record("conv-b:q0", 0.0, new=False)}
    result = _run_result(records, tmp_path)
    mine = result["recall"]["overall"]["memstream"]
    assert mine["answer_bearing"] is None and mine["answer_bearing_questions"] == 0
    assert "reader_tokens" not in mine and "provenance_turns_per_evidence" not in mine
    assert result["recall"]["overall"]["dense_sentences"]["answer_bearing"] == 1.0
    text = render_report(result, {})
    assert "| memstream reader (all the answer call reads) | – |" in text
