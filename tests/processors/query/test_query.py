from datetime import datetime, timedelta, timezone

import pytest

from memstream.ports import LLMError, LlmResult
from memstream.processors.query.budget import seconds_left
from memstream.processors.query.engine import QueryEngine, QueryOptions, expired_reply
from memstream.processors.query.evidence import roles_for, search_roles
from memstream.processors.query.replay import cap_to_budget
from memstream.processors.query.retrieve import RetrievalParams
from memstream.processors.tokens import count_tokens
from memstream.processors.write.index import CARDS
from memstream.schemas import Query
from tests import factories
from tests.factories import T0, sample_write
from tests.fakes import EmptyStore, HashEmbedder, ZeroEmbedder
from tests.stores import edge_store


def test_budget_capping_keeps_order_and_at_least_one():
    texts = ["one two three", "four five six", "seven eight nine"]
    assert cap_to_budget(texts, 6) == 2
    assert cap_to_budget(texts, 100) == 3
    assert cap_to_budget(["a very long text indeed"], 1) == 1


def test_search_roles_split_only_over_the_sides_the_conversation_has():
    both_sides = {"user", "assistant"}.__contains__
    people_only = {"user"}.__contains__
    assert search_roles(roles_for("assistant"), both_sides) == ("assistant",)
    assert search_roles(roles_for("user"), both_sides) == ("user",)
    assert search_roles(roles_for("ambiguous"), both_sides) == ("user", "assistant")
    assert search_roles(roles_for("both"), both_sides) == (None,)
    # Two people and no assistant: a question about "you" searches everything rather than nothing.
    assert search_roles(roles_for("assistant"), people_only) == (None,)
    assert search_roles(roles_for("ambiguous"), people_only) == (None,)
    assert search_roles(roles_for("user"), people_only) == ("user",)


# --- deadlines: a slow model costs the answer, never the reply ----------------------------------

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


class SlowLLM:
    """Takes ``seconds`` to answer: a call given less time than that times out."""

    model = "slow"

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.timeouts: list[float | None] = []

    def complete(self, messages, *, json_schema=None, schema_name="output", max_tokens=None, timeout_s=None):
        self.timeouts.append(timeout_s)
        if timeout_s is not None and timeout_s < self.seconds:
            raise LLMError("Request timed out.", "timeout")
        return LlmResult(content="Lisbon", prompt_tokens=100, completion_tokens=3, model=self.model)


def query(deadline: datetime | None) -> Query:
    return factories.query("Where did I go?", NOW, answer=True, deadline=deadline)


def engine(llm: SlowLLM) -> QueryEngine:
    return QueryEngine(EmptyStore(), ZeroEmbedder(), llm, QueryOptions())


def test_the_answer_call_gets_what_is_left_of_the_deadline_and_a_timeout_still_replies():
    llm = SlowLLM(seconds=60)
    reply = engine(llm).run(query(NOW + timedelta(seconds=20)), clock=lambda: NOW)
    assert llm.timeouts == [pytest.approx(20 - 1.0)]  # the reply's margin kept back
    assert reply.ok and reply.answer is None and reply.answer_mode == "evidence_only"
    assert "timeout" in reply.answer_error
    assert [(c.stage, c.calls) for c in reply.costs] == [("answer", 1)]  # the call was made: it counts


def test_no_answer_call_without_time_left_and_none_cut_without_a_deadline():
    llm = SlowLLM(seconds=60)
    reply = engine(llm).run(query(NOW + timedelta(seconds=1.5)), clock=lambda: NOW)
    assert llm.timeouts == [] and reply.costs == []
    assert "no time left" in reply.answer_error
    reply = engine(llm).run(query(None), clock=lambda: NOW)
    assert llm.timeouts == [None] and reply.answer == "Lisbon" and reply.answer_error is None


def test_a_query_past_its_deadline_gets_an_error_reply():
    q = query(NOW - timedelta(seconds=5))
    reply = expired_reply(q, NOW)
    assert not reply.ok and reply.correlation_id == "q1" and "5.0s after its deadline" in reply.error
    assert seconds_left(q.deadline, NOW) == -6.0 and seconds_left(None, NOW) is None


# --- evidence budget -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored_engine(tmp_path_factory):
    with edge_store(tmp_path_factory.mktemp("budget") / "q", sample_write("acme", "c1")) as store:

        def make(**params: object) -> QueryEngine:
            # Every card, even one whose turns an earlier one covers: this store is three cards small.
            retrieval = RetrievalParams(**{"new_turns_only": False, **params})  # type: ignore[arg-type]
            return QueryEngine(store, HashEmbedder(), None, QueryOptions(retrieval=retrieval))

        yield make


def budget_query(max_tokens: int | None) -> Query:
    return query(None).model_copy(update={"question": "Where did Caroline go in Lisbon?", "max_tokens": max_tokens})


def test_a_query_budget_caps_the_evidence_tokens_under_either_policy(stored_engine):
    for policy in ("fixed", "adaptive"):
        engine = stored_engine(evidence_policy=policy, evidence_k=10)
        free = engine.run(budget_query(None), clock=lambda: NOW)
        sizes = [count_tokens(e.text) for e in free.evidence]
        assert len(sizes) > 1, policy
        budget = sizes[0]  # the first item fits, not the first two
        assert sum(sizes[:2]) > budget, sizes
        capped = engine.run(budget_query(budget), clock=lambda: NOW)
        assert [e.point_id for e in capped.evidence] == [free.evidence[0].point_id], policy
        assert capped.context_tokens <= budget


def test_replay_keeps_to_the_query_budget_too(stored_engine):
    engine = stored_engine(evidence_k=10)
    replay = budget_query(None).model_copy(update={"profile": "replay"})
    free = engine.run(replay, clock=lambda: NOW)
    sizes = [count_tokens(e.text) for e in free.evidence]
    assert free.access_profile == "replay" and len(sizes) > 1 and {e.kind for e in free.evidence} == {"turn"}
    budget = sizes[0]  # the raw turns are longer than the cards they replace: only the first fits
    capped = engine.run(replay.model_copy(update={"max_tokens": budget}), clock=lambda: NOW)
    assert [e.point_id for e in capped.evidence] == [free.evidence[0].point_id]
    assert capped.context_tokens <= budget


def test_the_adaptive_policy_takes_fewer_items_with_a_stricter_dropoff(stored_engine):
    loose = stored_engine(evidence_policy="adaptive", evidence_dropoff=0.05, evidence_min_items=1).run(
        budget_query(None), clock=lambda: NOW
    )
    strict = stored_engine(evidence_policy="adaptive", evidence_dropoff=0.99, evidence_min_items=1).run(
        budget_query(None), clock=lambda: NOW
    )
    assert 1 <= len(strict.evidence) < len(loose.evidence)


class CountingStore:
    """The store, with every lexical search of the cards counted: one per retrieval (the hybrid's BM25
    half; the fresh turns' search is another collection's)."""

    def __init__(self, inner):
        self.inner = inner
        self.text_searches = 0

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name != "search_text":
            return attr

        def counted(collection, *args, **kwargs):
            self.text_searches += collection == CARDS
            return attr(collection, *args, **kwargs)

        return counted


def test_a_period_is_topped_up_when_it_holds_fewer_than_k_not_when_the_budget_cut_it(tmp_path):
    three = sample_write("acme", "c1")
    dated = [c.model_copy(update={"event_time": T0}) for c in three.cards]  # all three of May 2023
    in_may = budget_query(None).model_copy(update={"question": "Where did Caroline go in May 2023?"})

    def asked(inner, k: int, max_tokens: int | None) -> tuple[list[str], int]:
        store = CountingStore(inner)
        retrieval = RetrievalParams(new_turns_only=False, evidence_k=k)
        reply = QueryEngine(store, HashEmbedder(), None, QueryOptions(retrieval=retrieval)).run(
            in_may.model_copy(update={"max_tokens": max_tokens}), clock=lambda: NOW
        )
        assert reply.plan.time_from is not None  # the question names a period
        return [e.text for e in reply.evidence], store.text_searches

    with edge_store(tmp_path / "q", three.model_copy(update={"cards": dated})) as inner:
        assert asked(inner, 10, None)[1] == 2  # May holds 3 of the 10 asked: searched again outside it
        two, searches = asked(inner, 2, None)
        assert len(two) == 2 and searches == 1  # May holds the 2 asked
        # The budget leaves room for the first only: May held 2, so nothing is looked for outside it.
        assert asked(inner, 2, count_tokens(two[0])) == ([two[0]], 1)


def test_the_side_a_question_names_is_topped_up_from_the_other_when_it_holds_fewer_than_k(tmp_path):
    w = sample_write("acme", "c1")
    # D1:2 is the assistant's reply: the card citing it first ("Mel likes painting.") is the assistant's side.
    turns = [t.model_copy(update={"role": "assistant"}) if t.turn_id == "D1:2" else t for t in w.source_turns]
    mine = budget_query(None).model_copy(update={"question": "Where did I go in Lisbon?"})

    def asked(inner, k: int, **params: bool) -> tuple[list[str], int]:
        store = CountingStore(inner)
        retrieval = RetrievalParams(new_turns_only=False, evidence_k=k, **params)
        reply = QueryEngine(store, HashEmbedder(), None, QueryOptions(retrieval=retrieval)).run(mine, clock=lambda: NOW)
        assert reply.plan.participants == "user"  # "I": the user's side
        return [e.text for e in reply.evidence], store.text_searches

    with edge_store(tmp_path / "q", w.model_copy(update={"source_turns": turns})) as inner:
        user_side, searches = asked(inner, 10, side_top_up=False)
        assert searches == 1 and "Mel likes painting." not in user_side and len(user_side) == 2
        topped, searches = asked(inner, 10)  # the user's side holds 2 of the 10 asked: searched again over both
        assert searches == 2 and topped[:2] == user_side and topped[2:] == ["Mel likes painting."]
        assert asked(inner, 2) == (user_side, 1)  # the user's side holds the 2 asked
