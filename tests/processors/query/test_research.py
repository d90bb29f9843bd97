"""The research loop's rule path: a second round searches with the names the first round's best
evidence mentions and the question does not."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from memstream.ports import LLMError, LlmResult
from memstream.processors.query import prompts
from memstream.processors.query.engine import QueryEngine, QueryOptions
from memstream.processors.query.graph import GraphParams
from memstream.processors.query.research import LlmReflector, follow_ups, needs_research, turns_of
from memstream.processors.query.retrieve import RetrievalParams
from memstream.schemas import Plan
from tests.factories import card, memory_write, query, source
from tests.fakes import HashEmbedder, ScriptedLLM
from tests.stores import edge_store

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
NO_GRAPH = GraphParams(hops=0)  # the graph would find D1:2 by its name alone: this measures the loop


def test_follow_ups_take_the_names_the_question_does_not_mention():
    found = [
        {"subject": "Caroline", "entity_triggers": ["Caroline", "Melanie", "Lisbon"]},
        {"subject": "Melanie", "entity_triggers": ["hospital"]},
    ]
    queries = follow_ups("Where does Caroline's best friend work?", found, 2)
    assert queries == ["Melanie caroline's best friend work", "Lisbon caroline's best friend work"]
    assert follow_ups("Caroline Melanie Lisbon hospital", found, 3) == []
    assert turns_of([{"turn_ids": ["D1:1"]}, {"turn_ids": ["D1:2", "D1:1"]}, {}]) == {"D1:1", "D1:2"}


def test_only_multi_hop_plans_research():
    plan = Plan(planner="rules", profile="lookup")
    assert not needs_research(plan)
    assert needs_research(plan.model_copy(update={"operation": "aggregate"}))
    assert needs_research(plan.model_copy(update={"distributed": True}))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    cards = [
        card(1, "Caroline", "Caroline's best friend is Melanie.", "D1:1", ["Caroline", "Melanie"]),
        card(2, "Melanie", "Melanie is a nurse at the city hospital.", "D1:2", ["Melanie", "hospital"]),
    ]
    turns = [
        source("D1:1", "Caroline", "My best friend is Melanie.", 0),
        source("D1:2", "Melanie", "I am a nurse at the city hospital.", 1),
    ]
    with edge_store(tmp_path_factory.mktemp("research") / "q", memory_write("acme", cards, turns)) as store:
        yield store


QUESTION = "How many shifts does Caroline's best friend work?"  # "how many": an aggregate


def ask(store, rounds: int):
    params = RetrievalParams(
        research_rounds=rounds, new_turns_only=False, min_similarity=1.1, trigger_threshold=1.1, graph=NO_GRAPH
    )
    engine = QueryEngine(store, HashEmbedder(), None, QueryOptions(retrieval=params))
    return engine.run(query(QUESTION, NOW), clock=lambda: NOW)


def test_a_second_round_finds_what_the_first_rounds_evidence_names(store):
    # min_similarity above 1: dense similarity alone scores nothing, so only lexical votes count.
    once, twice = ask(store, 1), ask(store, 2)
    assert once.plan.operation == "aggregate" and once.plan.rounds == 1
    assert [e.turn_ids for e in once.evidence] == [["D1:1"]]  # the question names nothing of D1:2
    assert twice.plan.rounds == 2
    assert {t for e in twice.evidence for t in e.turn_ids} == {"D1:1", "D1:2"}
    assert "research" in next(e.found_by for e in twice.evidence if e.turn_ids == ["D1:2"])


def reflection(queries: list[str], missing: str = "where the friend works") -> LlmResult:
    doc = {"missing": missing, "queries": queries}
    return LlmResult(json.dumps(doc), 90, 15, "scripted", doc)


def test_the_llm_reflection_asks_its_queries_and_counts_the_call():
    llm = ScriptedLLM(reflection(["Melanie hospital", "  Melanie   hospital ", "How many shifts?"]))
    found = [{"text": "Caroline's best friend is Melanie.", "subject": "Caroline"}]
    queries, cost = LlmReflector(llm).reflect("How many shifts?", found, 3)
    assert queries == ["Melanie hospital"]  # repeats and the question itself dropped
    assert (cost.stage, cost.calls, cost.prompt_tokens, cost.completion_tokens) == ("research", 1, 90, 15)
    call = llm.calls[0]
    assert call["json_schema"] == prompts.research_schema(3)
    assert "Caroline's best friend is Melanie." in call["messages"][1]["content"]


def test_the_llm_reflection_stops_when_nothing_is_missing_and_falls_back_to_rules_on_failure():
    found = [{"text": "x", "subject": "Caroline", "entity_triggers": ["Melanie"]}]
    done, cost = LlmReflector(ScriptedLLM(reflection([], missing=""))).reflect("Who is Caroline?", found, 3)
    assert done == [] and cost.calls == 1
    reflector = LlmReflector(ScriptedLLM(LLMError("connection refused", "connection")))
    rules, cost = reflector.reflect("Who is Caroline?", found, 3)
    assert rules == follow_ups("Who is Caroline?", found, 3) == ["Melanie caroline"]
    assert cost.calls == 1 and reflector.fallbacks == 1
    # Invalid output twice (one repair): the rule path, both calls counted.
    bad = LlmResult("not json", 50, 5, "scripted")
    rules, cost = LlmReflector(ScriptedLLM(bad, bad)).reflect("Who is Caroline?", found, 3)
    assert rules == ["Melanie caroline"] and cost.calls == 2


def test_with_the_llm_planner_the_research_rounds_reflect_by_llm_and_the_reply_counts_it(store):
    plan_doc = {
        "entities": ["Caroline"],
        "participants": "ambiguous",
        "time": "",
        "operation": "aggregate",
        "distributed": False,
        "fidelity": False,
        "rewrites": [],
    }
    llm = ScriptedLLM(
        LlmResult(json.dumps(plan_doc), 80, 30, "scripted", plan_doc), reflection(["Melanie nurse city hospital"])
    )
    params = RetrievalParams(
        research_rounds=2, new_turns_only=False, min_similarity=1.1, trigger_threshold=1.1, graph=NO_GRAPH
    )
    engine = QueryEngine(store, HashEmbedder(), None, QueryOptions(retrieval=params, planner="llm"), planner_llm=llm)
    reply = engine.run(query(QUESTION, NOW, correlation_id="q2"), clock=lambda: NOW)
    assert reply.plan.planner == "llm" and reply.plan.rounds == 2
    assert [c.stage for c in reply.costs] == ["plan", "research"]
    assert {t for e in reply.evidence for t in e.turn_ids} == {"D1:1", "D1:2"}
    assert "Caroline's best friend is Melanie." in llm.calls[1]["messages"][1]["content"]  # round 1's evidence
