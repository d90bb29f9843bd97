"""Scoring of the knowledge-update measure (pure), on a hand-made LongMemEval-shaped question."""

from memstream.bench.knowledge_update import UpdateOutcome, rank_values, summarize_updates, update_case
from memstream.bench.longmemeval import LongMemEvalQuestion, longmemeval_turns


def question(qtype: str = "knowledge-update", qid: str = "q1") -> LongMemEvalQuestion:
    # Sessions listed out of time order, as haystacks can be; the newest value is in "ans_2".
    return LongMemEvalQuestion(
        question_id=qid,
        question_type=qtype,
        question="What is my current high score?",
        answer="132",
        answer_session_ids=["ans_1", "ans_2"],
        haystack_session_ids=["ans_2", "other", "ans_1"],
        haystack_dates=["2023/05/25 (Thu) 22:16", "2023/05/24 (Wed) 10:00", "2023/05/23 (Tue) 03:08"],
        haystack_sessions=[
            [
                {"role": "user", "content": "Talking games."},
                {"role": "assistant", "content": "Sure."},
                {"role": "user", "content": "I just scored 132 points!", "has_answer": True},
            ],
            [{"role": "user", "content": "Unrelated."}, {"role": "assistant", "content": ""}],
            [
                {"role": "user", "content": "My best is 124 points.", "has_answer": True},
                {"role": "assistant", "content": "Nice."},
            ],
        ],
        question_date="2023/06/10 (Sat) 16:46",
    )


def test_haystack_streams_in_time_order_with_turn_ids_that_name_session_and_index():
    turns = longmemeval_turns(question(), tenant_id="t")
    assert [t.turn_id for t in turns] == ["ans_1:0", "ans_1:1", "other:0", "ans_2:0", "ans_2:1", "ans_2:2"]
    assert [t.last_in_session for t in turns] == [False, True, True, False, False, True]  # the empty turn skipped
    assert all(a.event_time < b.event_time for a, b in zip(turns, turns[1:]))
    assert {t.role for t in turns} == {"user", "assistant"} and turns[0].conversation_id == "q1"


def test_the_case_holds_the_newest_and_the_stale_value_turns():
    case = update_case(question())
    assert case.newest == {"ans_2:2"} and case.stale == {"ans_1:0"}
    assert case.asked_at.isoformat() == "2023-06-10T16:46:00+00:00"
    assert update_case(question(qid="q1_abs")) is None  # abstention: nothing to find
    assert update_case(question(qtype="multi-session")) is None


def test_newest_counts_only_when_ranked_above_the_stale_value():
    case = update_case(question())
    assert rank_values(case, [["ans_2:2"], ["ans_1:0"]]).newest_above_stale
    assert rank_values(case, [["x"], ["ans_2:2"]]).newest_above_stale  # no stale value returned
    assert not rank_values(case, [["ans_1:0"], ["ans_2:2"]]).newest_above_stale
    assert not rank_values(case, [["ans_1:0", "ans_2:2"]]).newest_above_stale  # one item holding both: not above
    assert not rank_values(case, [["ans_1:0"]]).newest_above_stale
    summary = summarize_updates(
        [UpdateOutcome(0, 1), UpdateOutcome(2, 0), UpdateOutcome(None, 0), UpdateOutcome(1, None)]
    )
    assert summary == {"newest_above_stale": 0.5, "newest_found": 0.75, "stale_found": 0.75, "questions": 4}


def test_resetting_consolidation_gives_the_cards_as_indexed(tmp_path):
    from memstream.adapters.qdrant_store import QdrantStore
    from memstream.bench.knowledge_update import reset_consolidation
    from memstream.ports import StorePoint
    from memstream.processors.write.index import CARDS

    store = QdrantStore(path=tmp_path / "q")
    store.ensure_collections([CARDS], 2)
    ids = [f"00000000-0000-0000-0000-00000000000{i}" for i in range(3)]
    base = {"tenant_id": "t", "conversation_id": "c", "valid_to": None, "superseded_by": None}
    store.upsert(
        CARDS,
        [
            StorePoint(ids[0], [1, 0], {**base, "support": [ids[1]]}),
            StorePoint(
                ids[1],
                [1, 0],
                {
                    **base,
                    "retired": True,
                    "retired_ts": 5.0,
                    "valid_to": "2024-01-01T00:00:00+00:00",
                    "superseded_by": ids[0],
                    "duplicate_of": ids[0],
                    "successor_order": [1, 1, ids[0]],
                },
            ),
            StorePoint(ids[2], [0, 1], {**base, "valid_to": "2025-01-01T00:00:00+00:00"}),  # written with its validity
        ],
    )
    assert reset_consolidation(store, "t") == 2
    cards = {h.id: h.payload for h in store.scroll(CARDS, "t")}
    assert not cards[ids[0]].get("support") and not cards[ids[1]].get("retired")
    assert cards[ids[1]].get("superseded_by") is None and cards[ids[1]].get("valid_to") is None
    assert cards[ids[2]]["valid_to"] == "2025-01-01T00:00:00+00:00"
    assert reset_consolidation(store, "t") == 0
    store.close()
