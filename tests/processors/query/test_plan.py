from datetime import datetime, timezone
from typing import get_args

import orjson
import pytest

from memstream.config import Settings
from memstream.ports import LLMError, LlmResult
from memstream.processors.query import prompts
from memstream.processors.query.engine import QueryEngine, QueryOptions
from memstream.processors.query.plan import (
    DOUBTS,
    HybridPlanner,
    LlmPlanner,
    RulePlanner,
    choose_profile,
    merge_plans,
    planner_for,
    resolve_time,
    rule_doubts,
    rule_plan,
    rules_unsure,
    time_range,
)
from memstream.schemas import Plan, Reply
from memstream.schemas.query import Operation
from tests.factories import query
from tests.fakes import EmptyStore, ScriptedLLM, ZeroEmbedder

NOW = datetime(2023, 8, 1, 15, 30, tzinfo=timezone.utc)  # a Tuesday


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def end_of(*args: int) -> datetime:
    return utc(*args, 23, 59, 59, 999999)


# --- rule planner -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question, profile, operation",
    [
        # The cases of tests/processors/query/test_query.py: the moved planner keeps them.
        ("What is Caroline's identity?", "lookup", "lookup"),
        ("When did Melanie paint a sunrise?", "lookup", "temporal_select"),
        ("How many times has Melanie gone to the beach?", "compose", "aggregate"),
        ("What activities do both Melanie and Caroline enjoy?", "compose", "lookup"),
        ("What exactly did I write about the vase?", "replay", "lookup"),
        ("Quote what you said word for word about taxes", "replay", "lookup"),
        # New ones.
        ("Compare Melanie's and Caroline's hobbies", "compose", "compare"),
        ("Which book did Melanie read first?", "lookup", "temporal_select"),
        ("List the trips in order, earliest to latest", "compose", "sort"),
        ("What code did you write for the parser?", "replay", "lookup"),
        # A time phrase is a filter, not a temporal operation.
        ("What did I buy last week?", "lookup", "lookup"),
        # A set is asked for: its members come from several places.
        ("What video games does Nate play?", "compose", "lookup"),
        ("Which cities has John been to?", "compose", "lookup"),
        ("What are the names of John's children?", "compose", "lookup"),
        ("What class did Nora sign up for?", "lookup", "lookup"),
        ("What does Nate's business sell?", "lookup", "lookup"),
    ],
)
def test_rule_planner(question, profile, operation):
    plan = rule_plan(question, NOW)
    assert plan.profile == profile
    assert plan.operation == operation
    assert plan.planner == "rules"


def test_profile_rule_table():
    assert choose_profile(fidelity=True, distributed=True) == "replay"
    assert choose_profile(fidelity=True, distributed=False) == "replay"
    assert choose_profile(fidelity=False, distributed=True) == "compose"
    assert choose_profile(fidelity=False, distributed=False) == "lookup"


@pytest.mark.parametrize(
    "question, participants",
    [
        ("What did you recommend?", "assistant"),
        # What the assistant said, however much of the question is about the user:
        ("What did you recommend to me?", "assistant"),
        ("I'm going back to Moncayo; what was the name of the trail you recommended?", "assistant"),
        ("Can you remind me of the ratio you'd suggested for my tea tree oil?", "assistant"),
        # Asking for new advice, or for what the user said: the user's side.
        ("Can you recommend a trail for my trip?", "user"),
        ("Did you know what I told my sister?", "user"),
        ("What did I tell you about my job?", "user"),
        ("Where did you and I go in 2022?", "both"),
        ("What did we talk about yesterday?", "both"),
        ("Which of our plans changed?", "both"),
        ("What did my sister tell us?", "both"),
        ("Where did Melanie go camping?", "ambiguous"),
        ("What did Melanie buy in the US?", "ambiguous"),  # "US" the country is not "us"
    ],
)
def test_rule_participants(question, participants):
    assert rule_plan(question, NOW).participants == participants


@pytest.mark.parametrize(
    "question, entities",
    [
        ("Where did Melanie go camping with Caroline?", ["Melanie", "Caroline"]),
        ("Tell me what Jon Snow said about Winterfell", ["Jon Snow", "Winterfell"]),
        ("Compare Melanie and Caroline", ["Melanie", "Caroline"]),
        ("When did Melanie paint a sunrise?", ["Melanie"]),
        ("What did Caroline do in May 2023 and on Monday?", ["Caroline"]),  # no "May", no "Monday"
        ("Did May visit Paris?", ["May", "Paris"]),  # May the person stays
        ("Which airline did I fly with the most in March and April?", []),  # a listed month is a time
        ("What is my favourite colour?", []),
    ],
)
def test_rule_entities(question, entities):
    assert rule_plan(question, NOW).entities == entities


@pytest.mark.parametrize(
    "question, time_from, time_to",
    [
        ("What did Melanie do in May 2023?", utc(2023, 5, 1), end_of(2023, 5, 31)),
        ("What happened last year?", utc(2022, 1, 1), end_of(2022, 12, 31)),
        ("What did I eat yesterday?", utc(2023, 7, 31), end_of(2023, 7, 31)),
        ("Which books did I read in 2022?", utc(2022, 1, 1), end_of(2022, 12, 31)),
        ("What did I buy last week?", utc(2023, 7, 24), end_of(2023, 7, 30)),
        ("What did we do last weekend?", utc(2023, 7, 29), end_of(2023, 7, 30)),
        ("What did I say two weeks ago?", utc(2023, 7, 17), end_of(2023, 7, 23)),
        ("What did Caroline do last May?", utc(2023, 5, 1), end_of(2023, 5, 31)),
        ("What did Caroline read in September?", utc(2022, 9, 1), end_of(2022, 9, 30)),  # latest past one
        ("Which airline did I fly with the most in March and April?", utc(2023, 3, 1), end_of(2023, 4, 30)),
        ("What did I buy in May, June or July?", utc(2023, 5, 1), end_of(2023, 7, 31)),
        ("How many trips did I take in January through March?", utc(2023, 1, 1), end_of(2023, 3, 31)),
        ("What did I do since March and April?", utc(2023, 3, 1), None),  # one-sided: the first month bounds
        ("What happened on 7 May 2023?", utc(2023, 5, 7), end_of(2023, 5, 7)),
        ("What did I do between May 2023 and July 2023?", utc(2023, 5, 1), end_of(2023, 7, 31)),
        ("What did I do since 2022?", utc(2022, 1, 1), None),
        ("What did I do before 2023?", None, end_of(2022, 12, 31)),
        ("What did I do after May 2023 and before 2024?", utc(2023, 6, 1), end_of(2023, 12, 31)),
        ("What is Caroline's identity?", None, None),
    ],
)
def test_rule_time_ranges(question, time_from, time_to):
    plan = rule_plan(question, NOW)
    assert (plan.time_from, plan.time_to) == (time_from, time_to)
    assert time_range(question, NOW) == (time_from, time_to)


@pytest.mark.parametrize(
    "question",
    [
        "When did Melanie go camping in 2022?",
        "When in May 2023 did I visit Paris?",
        "What date last week did we meet?",
        "How long ago was my trip last year?",
    ],
)
def test_no_range_when_the_time_is_asked(question):
    plan = rule_plan(question, NOW)
    assert plan.time_from is None and plan.time_to is None


def test_naive_now_is_utc():
    naive = rule_plan("What did I eat yesterday?", datetime(2023, 8, 1, 15, 30))
    assert naive.time_from == utc(2023, 7, 31)


@pytest.mark.parametrize(
    "question, rewrites",
    [
        ("What do Melanie and Caroline both like?", ["What does Melanie like?", "What does Caroline like?"]),
        (
            "What activities do both Melanie and Caroline enjoy?",
            ["What activities does Melanie enjoy?", "What activities does Caroline enjoy?"],
        ),
        (
            "How many books have Melanie and Caroline each read?",
            ["How many books has Melanie read?", "How many books has Caroline read?"],
        ),
        (
            "Which books and movies did Melanie recommend?",
            ["Which books did Melanie recommend?", "Which movies did Melanie recommend?"],
        ),
        ("Compare Melanie's and Caroline's hobbies", ["Compare Melanie's hobbies", "Compare Caroline's hobbies"]),
        # No obvious split, or one that would break a shared event.
        ("How many times has Melanie gone to the beach?", []),
        ("What gifts did Melanie and Caroline give each other?", []),
        ("What did Melanie and Caroline both do together?", []),
        ("What did Anna, Ben and Carl all bring?", []),  # three items: two rewrites cannot cover them
    ],
)
def test_rule_rewrites(question, rewrites):
    plan = rule_plan(question, NOW)
    assert plan.distributed
    assert plan.rewrites == rewrites


def test_no_rewrites_for_a_simple_question():
    plan = rule_plan("Where did Melanie and Caroline go camping?", NOW)
    assert not plan.distributed and plan.rewrites == []
    assert rule_plan("What is Caroline's identity?", NOW).rewrites == []


def test_rule_planner_class_spends_nothing():
    plan, cost = RulePlanner().plan("What did I eat yesterday?", NOW)
    assert plan.planner == "rules"
    assert (cost.stage, cost.calls, cost.prompt_tokens, cost.completion_tokens) == ("plan", 0, 0, 0)


# --- LLM planner --------------------------------------------------------------------------------


def doc(**overrides) -> dict:
    base = {
        "entities": ["Melanie"],
        "participants": "ambiguous",
        "time": "",
        "operation": "lookup",
        "distributed": False,
        "fidelity": False,
        "rewrites": [],
    }
    return {**base, **overrides}


def ok(data: dict, prompt: int = 100, completion: int = 20) -> LlmResult:
    return LlmResult(orjson.dumps(data).decode(), prompt, completion, "scripted-model", data=data)


def bad(content: str = "not json {", prompt: int = 100, completion: int = 7) -> LlmResult:
    return LlmResult(content, prompt, completion, "scripted-model")


def test_valid_output_becomes_an_llm_plan():
    llm = ScriptedLLM(
        ok(
            doc(
                entities=["Melanie", "Yosemite"],
                participants="user",
                time="last week",
                operation="aggregate",
                distributed=True,
                fidelity=False,
                rewrites=["What did Melanie paint?"],
                profile="replay",
            )
        )
    )
    plan, cost = LlmPlanner(llm, max_tokens=200).plan("How many things did Melanie paint last week?", NOW)
    assert plan.planner == "llm"
    assert plan.profile == "compose"  # from the booleans; the model's "replay" is ignored
    assert (plan.time_from, plan.time_to) == (utc(2023, 7, 24), end_of(2023, 7, 30))  # resolved against NOW
    assert plan.entities == ["Melanie"]  # "Yosemite" is not in the question: a guessed answer
    assert plan.participants == "user" and plan.operation == "aggregate"
    assert plan.rewrites == ["What did Melanie paint?"]
    assert (cost.stage, cost.calls, cost.prompt_tokens, cost.completion_tokens) == ("plan", 1, 100, 20)
    call = llm.calls[0]
    assert call["json_schema"] == prompts.plan_schema() and call["max_tokens"] == 200
    assert call["messages"][0]["content"] == prompts.PLAN_SYSTEM
    assert "How many things did Melanie paint last week?" in call["messages"][1]["content"]


def test_fidelity_wins_and_content_is_parsed_without_data():
    result = LlmResult(orjson.dumps(doc(fidelity=True, distributed=True)).decode(), 10, 5, "m")
    plan, _ = LlmPlanner(ScriptedLLM(result)).plan("What exactly did Melanie write?", NOW)
    assert plan.planner == "llm" and plan.profile == "replay"


@pytest.mark.parametrize(
    "time, expected",
    [
        ("2023-05", (utc(2023, 5, 1), end_of(2023, 5, 31))),
        ("2022", (utc(2022, 1, 1), end_of(2022, 12, 31))),
        ("2023-05-07", (utc(2023, 5, 7), end_of(2023, 5, 7))),
        ("2023-05/2023-07", (utc(2023, 5, 1), end_of(2023, 7, 31))),
        ("in May 2023", (utc(2023, 5, 1), end_of(2023, 5, 31))),
        ("May", (utc(2023, 5, 1), end_of(2023, 5, 31))),
        ("yesterday", (utc(2023, 7, 31), end_of(2023, 7, 31))),
        ("", (None, None)),
        ("in the summer", (None, None)),  # unresolvable: no filter, no error
        ("2023-13", (None, None)),
    ],
)
def test_model_time_is_resolved_in_code(time, expected):
    assert resolve_time(time, NOW) == expected
    plan, _ = LlmPlanner(ScriptedLLM(ok(doc(time=time)))).plan("What did Melanie do?", NOW)
    assert (plan.time_from, plan.time_to) == expected


def test_no_model_range_when_the_time_is_asked():
    llm = ScriptedLLM(ok(doc(time="2022", operation="temporal_select")))
    plan, _ = LlmPlanner(llm).plan("When did Melanie go camping in 2022?", NOW)
    assert plan.planner == "llm" and plan.time_from is None and plan.time_to is None


def test_invalid_then_valid_counts_both_calls():
    llm = ScriptedLLM(bad(completion=7), ok(doc(), completion=20))
    planner = LlmPlanner(llm)
    plan, cost = planner.plan("What does Melanie like?", NOW)
    assert plan.planner == "llm"
    assert (cost.calls, cost.prompt_tokens, cost.completion_tokens) == (2, 200, 27)
    assert planner.repairs == 1 and planner.fallbacks == 0
    repair = llm.calls[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "not json {"}
    assert repair[-1]["role"] == "user" and "invalid" in repair[-1]["content"]


@pytest.mark.parametrize("second", [bad(), ok({"participants": "everyone"}), ok(doc(operation="guess"))])
def test_invalid_twice_falls_back_to_rules(second):
    planner = LlmPlanner(ScriptedLLM(bad(), second))
    question = "What do Melanie and Caroline both like?"
    plan, cost = planner.plan(question, NOW)
    assert plan == rule_plan(question, NOW) and plan.planner == "rules"
    assert cost.stage == "plan" and cost.calls == 2 and cost.prompt_tokens == 200
    assert planner.fallbacks == 1


def test_llm_error_falls_back_to_rules():
    planner = LlmPlanner(ScriptedLLM(LLMError("connection refused")))
    plan, cost = planner.plan("What did I eat yesterday?", NOW)
    assert plan.planner == "rules" and plan.time_from == utc(2023, 7, 31)
    assert (cost.calls, cost.prompt_tokens, cost.completion_tokens) == (1, 0, 0)


def test_llm_error_on_the_repair_keeps_the_first_calls_tokens():
    plan, cost = LlmPlanner(ScriptedLLM(bad(), LLMError("timeout"))).plan("What does Melanie like?", NOW)
    assert plan.planner == "rules"
    assert (cost.calls, cost.prompt_tokens, cost.completion_tokens) == (2, 100, 7)


def test_rewrites_dropped_when_not_distributed():
    llm = ScriptedLLM(ok(doc(distributed=False, rewrites=["What does Melanie like?"])))
    plan, _ = LlmPlanner(llm).plan("What do Melanie and Caroline both like?", NOW)
    assert plan.rewrites == [] and plan.profile == "lookup"


def test_rewrites_capped_at_two_without_echoes_or_guesses():
    question = "What do Melanie and Caroline both like?"
    rewrites = [
        "what do Melanie and Caroline both like",  # the question again
        "Does Melanie like Yosemite?",  # a guessed answer: a name the question lacks
        "Did Caroline like it 3 times?",  # a guessed number
        "What does Melanie like?",
        "What does Melanie like?",
        "Melanie's likes",
        "What does Caroline like?",
    ]
    plan, _ = LlmPlanner(ScriptedLLM(ok(doc(distributed=True, rewrites=rewrites)))).plan(question, NOW)
    assert plan.rewrites == ["What does Melanie like?", "Melanie's likes"]
    assert Plan.model_validate(plan.model_dump()) == plan


# --- schema -------------------------------------------------------------------------------------


def _walk(node: dict):
    yield node
    for child in node.get("properties", {}).values():
        yield from _walk(child)
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"])


def test_schema_is_bounded_and_matches_the_plan_literals():
    schema = prompts.plan_schema()
    assert set(schema["required"]) == set(schema["properties"]) and schema["additionalProperties"] is False
    for node in _walk(schema):
        if node.get("type") == "array":
            assert "maxItems" in node
        if node.get("type") == "string":
            assert "maxLength" in node or "enum" in node
    assert schema["properties"]["rewrites"]["maxItems"] == 2
    assert prompts.PLAN_OPERATIONS == list(get_args(Operation))
    assert prompts.PLAN_PARTICIPANTS == list(get_args(Plan.model_fields["participants"].annotation))
    orjson.dumps(schema)  # plain JSON, as the LLM adapter sends it


def test_schema_is_valid_json_schema_and_accepts_a_plan():
    jsonschema = pytest.importorskip("jsonschema")
    schema = prompts.plan_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(doc(time="last week", distributed=True, rewrites=["What does Melanie like?"]))
    assert not validator.is_valid(doc(participants="everyone"))
    assert not validator.is_valid(doc(rewrites=["a", "b", "c"]))
    assert not validator.is_valid({**doc(), "profile": "replay"})


# --- how sure the rules are ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "question, doubts",
    [
        # Sure: every decision matched a pattern, or its default is what the question says.
        ("What is Caroline's identity?", ()),
        ("What did I buy last week?", ()),  # the period is resolved
        ("When did Melanie go camping in 2022?", ()),  # the time is asked: no period, on purpose
        ("Which airline did I fly with the most in March and April?", ()),  # one list of months
        ("What did I eat yesterday?", ()),  # no entity, but the asker is the subject
        ("What activities do both Melanie and Caroline enjoy?", ()),  # "X and Y", found distributed
        ("What did Jon and Gina do together?", ()),  # one shared event: the rules do not split it
        ("What may Caroline do next?", ()),  # "may" the verb is no month
        ("How many pre-1920 coins do I have?", ()),  # a year glued to a prefix is no period
        # A time word and no period resolved.
        ("What did Melanie paint recently?", ("time_unresolved",)),
        ("What state did Joanna visit in summer 2021?", ("time_unresolved",)),
        ("What did May say about the trip?", ("time_unresolved",)),  # May the person, or the month
        # Two periods that are not one list: the rules take their hull.
        ("What was Tim's writing issue last week, as mentioned on November 6, 2023?", ("time_several",)),
        # Aggregate and temporal patterns both match; the rules take the first.
        ("How many times did I go running before the marathon?", ("operation_conflict",)),
        # Neither an entity nor a person.
        ("What did the charity race raise awareness for?", ("no_subject",)),
        # "X and Y" the rules would split, in a question they did not find distributed.
        ("When did Jon and Gina decide to collaborate?", ("unsplit_coordination",)),
    ],
)
def test_rule_doubts(question, doubts):
    assert rule_doubts(question, NOW) == doubts
    assert rule_doubts(question, NOW, rule_plan(question, NOW)) == doubts  # the plan given or made


def test_doubts_come_in_a_fixed_order():
    question = "How many times did the team win before the final, recently?"
    assert rule_doubts(question, NOW) == ("time_unresolved", "operation_conflict", "no_subject")
    assert list(rule_doubts(question, NOW)) == [d for d in DOUBTS if d in rule_doubts(question, NOW)]


def test_rules_unsure_only_for_a_trigger():
    assert rules_unsure(("time_unresolved",))
    assert not rules_unsure(())
    assert not rules_unsure(("time_unresolved",), triggers=("no_subject",))
    assert rules_unsure(("time_unresolved", "no_subject"), triggers=("no_subject",))


# --- hybrid planner -----------------------------------------------------------------------------


def llm_plan(**fields) -> Plan:
    base = {"planner": "llm", "profile": "lookup", "participants": "user", "operation": "aggregate"}
    return Plan(**{**base, **fields})


def test_merge_takes_only_the_doubted_fields():
    question = "What did Melanie paint recently?"
    rules = rule_plan(question, NOW)
    llm = llm_plan(entities=["paint"], time_from=utc(2023, 7, 1), time_to=end_of(2023, 7, 31))
    merged = merge_plans(question, rules, llm, ["time_unresolved"])
    assert merged.planner == "llm"
    assert (merged.time_from, merged.time_to) == (utc(2023, 7, 1), end_of(2023, 7, 31))
    assert merged.history  # a period: superseded versions are evidence too
    # What the rules matched stays theirs.
    assert (merged.entities, merged.participants, merged.operation) == (["Melanie"], "ambiguous", "lookup")


def test_merge_of_a_subject_and_of_a_split():
    question = "When did Jon and Gina decide to collaborate?"
    rules = rule_plan(question, NOW)
    merged = merge_plans(question, rules, llm_plan(entities=["Jon"], distributed=True), ["unsplit_coordination"])
    # Distributed by the model: Compose, with the rules' own answer-free split as the model gave none.
    assert merged.distributed and merged.profile == "compose"
    assert merged.rewrites == ["When did Jon decide to collaborate?", "When did Gina decide to collaborate?"]
    assert merged.entities == ["Jon", "Gina"] and merged.operation == "temporal_select"
    question = "What did the charity race raise awareness for?"
    merged = merge_plans(question, rule_plan(question, NOW), llm_plan(entities=["charity race"]), ["no_subject"])
    assert (merged.entities, merged.participants, merged.profile) == (["charity race"], "user", "lookup")


def test_merge_keeps_the_rules_when_the_llm_planner_fell_back_or_nothing_is_doubted():
    question = "What did Melanie paint recently?"
    rules = rule_plan(question, NOW)
    assert merge_plans(question, rules, rules, ["time_unresolved"]) == rules  # the fallback is the rules' plan
    assert merge_plans(question, rules, llm_plan(), []) == rules


def test_hybrid_asks_the_llm_only_when_the_rules_doubt():
    llm = ScriptedLLM(ok(doc(time="July 2023", entities=["Melanie"])))
    planner = HybridPlanner(LlmPlanner(llm))
    plan, cost = planner.plan("What did Melanie paint a sunrise on?", NOW)  # sure: no call
    assert plan.planner == "rules" and cost.calls == 0 and llm.calls == []
    plan, cost = planner.plan("What did Melanie paint recently?", NOW)  # a time word, no period
    assert (plan.planner, cost.stage, cost.calls, cost.prompt_tokens) == ("llm", "plan", 1, 100)
    assert (plan.time_from, plan.time_to) == (utc(2023, 7, 1), end_of(2023, 7, 31))
    assert len(llm.calls) == 1 and planner.asked == 1


def test_hybrid_counts_a_repair_and_falls_back_to_the_rules():
    planner = HybridPlanner(LlmPlanner(ScriptedLLM(bad(), bad())))
    plan, cost = planner.plan("What did Melanie paint recently?", NOW)
    assert plan == rule_plan("What did Melanie paint recently?", NOW)
    assert cost.calls == 2  # both calls were made: both count


def test_hybrid_asks_only_for_its_triggers():
    llm = ScriptedLLM()
    plan, cost = HybridPlanner(LlmPlanner(llm), triggers=("no_subject",)).plan("What did Melanie paint recently?", NOW)
    assert plan.planner == "rules" and cost.calls == 0 and llm.calls == []


# --- the planner of each mode -------------------------------------------------------------------


def test_planner_for_each_mode():
    llm = ScriptedLLM()
    assert isinstance(planner_for("rules", llm), RulePlanner)
    assert isinstance(planner_for("llm", llm), LlmPlanner)
    assert isinstance(planner_for("hybrid", llm), HybridPlanner)
    for mode in ("rules", "llm", "hybrid"):  # no LLM: the rules, whatever the mode
        assert isinstance(planner_for(mode, None), RulePlanner)
    with pytest.raises(ValueError, match="unknown planner mode"):
        planner_for("auto", llm)  # settings resolve auto before it reaches the engine


def test_settings_resolve_the_planner_mode():
    llm = {"llm_base_url": "http://llm/v1"}
    assert Settings(query_planner="hybrid", **llm).effective_query_planner == "hybrid"
    assert Settings(query_planner="auto", **llm).effective_query_planner == "llm"  # auto is unchanged
    assert Settings(query_planner="auto", llm_base_url=None).effective_query_planner == "rules"
    with pytest.raises(ValueError, match="hybrid needs MEMSTREAM_LLM_BASE_URL"):
        _ = Settings(query_planner="hybrid", llm_base_url=None).effective_query_planner


def ask(engine: QueryEngine, question: str) -> Reply:
    return engine.run(query(question, NOW, reply_topic="replies", question_time=NOW), clock=lambda: NOW)


def test_the_engine_counts_only_the_planner_calls_made():
    llm = ScriptedLLM(ok(doc(time="July 2023")))
    engine = QueryEngine(EmptyStore(), ZeroEmbedder(), None, QueryOptions(planner="hybrid"), planner_llm=llm)
    assert isinstance(engine.planner, HybridPlanner) and engine.reflector is None  # reflection stays by rules
    sure = ask(engine, "What is Caroline's identity?")
    assert sure.plan.planner == "rules" and sure.costs == []
    unsure = ask(engine, "What did Melanie paint recently?")
    assert unsure.plan.planner == "llm"
    assert [(c.stage, c.calls) for c in unsure.costs] == [("plan", 1)]
