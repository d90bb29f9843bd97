from datetime import datetime, timezone

import orjson
import pytest

from memstream.bench.cases import REPORT, TUNE, BenchQuestion
from memstream.bench.planner import (
    FIELDS,
    TUNED,
    Outcome,
    Record,
    RecordedLLM,
    ask_planner,
    charged_ms,
    choose_triggers,
    differing_fields,
    doubt_gains,
    mode_summary,
    plan_differences,
    planner_asker,
    planner_calls,
    planner_tokens,
    question_rows,
    records_for,
    run_modes,
    summary,
)
from memstream.ports import LLMError, LlmResult
from memstream.processors.query.plan import DOUBTS, LlmPlanner, rule_plan
from memstream.schemas import Plan, StageCost

NOW = datetime(2023, 8, 1, 15, 30, tzinfo=timezone.utc)


def question(qid: str, text: str, group: str = "4") -> BenchQuestion:
    return BenchQuestion(qid, "conv", text, NOW, group, "answer", ("D1:1",))


class CountingLLM:
    """Answers every planner call with the same valid plan and counts the calls."""

    model = "fake"

    def __init__(self, data: dict | None = None, error: LLMError | None = None):
        self.data = data or {
            "entities": ["Melanie"],
            "participants": "user",
            "time": "July 2023",
            "operation": "lookup",
            "distributed": False,
            "fidelity": False,
            "rewrites": [],
        }
        self.error = error
        self.calls = 0

    def complete(self, messages, *, json_schema=None, schema_name="output", max_tokens=None, timeout_s=None):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return LlmResult(orjson.dumps(self.data).decode(), 100, 20, self.model, data=self.data)


MESSAGES = [{"role": "user", "content": "plan this"}]


# --- the LLM, each distinct call made once ----------------------------------------------------------


def test_a_repeated_call_is_answered_from_what_was_kept_and_charged_its_latency():
    live = CountingLLM()
    llm = RecordedLLM(live)
    first = llm.complete(MESSAGES, schema_name="query_plan", max_tokens=256)
    assert (live.calls, llm.live_calls) == (1, 1) and llm.charged_s == pytest.approx(llm.live_s)
    again = llm.complete(MESSAGES, schema_name="query_plan", max_tokens=256)
    assert again == first and live.calls == 1
    assert llm.charged_s == pytest.approx(2 * llm.live_s)  # as if it had waited again
    llm.complete(MESSAGES, schema_name="query_plan", max_tokens=128)  # another call: made live
    assert live.calls == 2


def test_an_error_is_kept_and_raised_again():
    live = CountingLLM(error=LLMError("timed out", "timeout"))
    llm = RecordedLLM(live)
    for _ in range(2):
        with pytest.raises(LLMError, match="timed out"):
            llm.complete(MESSAGES)
    assert live.calls == 1


def test_without_a_live_llm_an_unknown_prompt_fails():
    with pytest.raises(LLMError):
        RecordedLLM(None).complete(MESSAGES)


def test_charged_time_replaces_the_live_time_of_a_step():
    llm = RecordedLLM(None)
    llm.live_s, llm.charged_s = 2.0, 3.5  # this step: 1.5 s charged, no live call
    assert charged_ms(10.0, llm, live_before=2.0, charged_before=2.0) == pytest.approx(1510.0)
    # A live call of 1 s inside a 1,002 ms step, charged its own 1 s: the wall time stands.
    assert charged_ms(1002.0, llm, live_before=1.0, charged_before=2.5) == pytest.approx(1002.0)


def test_only_the_planner_costs_count():
    costs = [
        StageCost(stage="plan", calls=2, prompt_tokens=200, completion_tokens=30),
        StageCost(stage="answer", calls=1, prompt_tokens=900, completion_tokens=50),
        StageCost(stage="research", calls=1),
    ]
    assert planner_calls(costs) == 2 and planner_tokens(costs) == 230
    assert planner_calls([]) == 0


# --- comparing plans ------------------------------------------------------------------------------


def test_plans_differ_per_field_entities_as_a_case_folded_set():
    a = Plan(planner="rules", profile="lookup", entities=["Melanie", "Caroline"])
    assert differing_fields(a, a.model_copy(update={"entities": ["caroline", "MELANIE"]})) == ()
    b = a.model_copy(update={"profile": "compose", "time_from": NOW, "participants": "user", "entities": ["Melanie"]})
    assert differing_fields(a, b) == ("profile", "time", "entities", "participants")
    assert differing_fields(a, a.model_copy(update={"operation": "aggregate"})) == ("operation",)
    assert set(FIELDS) == {"profile", "operation", "time", "entities", "participants"}


def outcome(plan: Plan, calls: int = 0, ms: float = 0.1, recall: float | None = 1.0) -> Outcome:
    return Outcome(plan, calls, ms, recall, 120 * calls)


RULES = Plan(planner="rules", profile="lookup", entities=["Melanie"])
LLM_PLAN = Plan(planner="llm", profile="compose", entities=["Melanie"], distributed=True)


def record(qid: str, split: str, doubts=(), llm_recall: float = 1.0, rules_recall: float = 1.0) -> Record:
    r = Record(question(qid, "What?"), split, tuple(doubts))
    r.outcomes = {
        "rules": outcome(RULES, recall=rules_recall),
        "llm": outcome(LLM_PLAN, calls=1, ms=1000.0, recall=llm_recall),
        "hybrid": outcome(LLM_PLAN if doubts else RULES, calls=int(bool(doubts)), ms=1000.0 if doubts else 0.2),
    }
    return r


def test_mode_summary_counts_calls_latency_and_recall():
    records = [record("q1", TUNE, ["no_subject"], llm_recall=0.0), record("q2", TUNE), record("q3", TUNE)]
    llm = mode_summary(records, "llm")
    assert (llm["questions"], llm["llm_calls"], llm["llm_calls_per_question"]) == (3, 3, 1.0)
    assert llm["asked_llm_share"] == 1.0
    assert llm["evidence_recall"] == pytest.approx(0.667) and llm["differs_from_rules"] == 1.0
    assert llm["plan_ms"]["p50"] == 1000.0 and llm["llm_tokens_per_question"] == 120.0
    hybrid = mode_summary(records, "hybrid")
    assert hybrid["llm_calls_per_question"] == pytest.approx(0.333) and hybrid["plan_ms"]["p50"] == 0.2
    assert hybrid["plan_ms"]["p99"] == 1000.0 and hybrid["differs_from_rules"] == pytest.approx(0.333)
    rules = mode_summary(records, "rules")
    assert rules["llm_calls"] == 0 and rules["differs_from_rules"] == 0.0
    assert mode_summary([], "rules") == {"questions": 0}


def test_plans_only_have_no_recall_figures():
    r = record("q1", REPORT)
    r.outcomes = {m: Outcome(o.plan, o.calls, o.plan_ms, None) for m, o in r.outcomes.items()}
    assert "evidence_recall" not in mode_summary([r], "llm")


def test_plan_differences_per_field_and_doubt():
    records = [record("q1", TUNE, ["no_subject"]), record("q2", TUNE)]
    records[1].outcomes["llm"] = outcome(RULES)  # the LLM planner fell back to the rules
    d = plan_differences(records)
    assert d["llm_differs"]["profile"] == 0.5 and d["llm_differs"]["any"] == 0.5 and d["llm_differs"]["time"] == 0.0
    assert d["llm_fell_back"] == 0.5 and d["unsure"] == 0.5 and d["doubts"]["no_subject"] == 0.5


def test_a_doubt_is_chosen_only_where_the_llm_fields_gained_recall():
    records = [record(f"q{i}", TUNE, ["no_subject"], rules_recall=0.5) for i in range(3)]
    records += [record(f"t{i}", TUNE, ["time_unresolved"]) for i in range(3)]
    per_doubt = {
        "no_subject": {r.question.qid: outcome(LLM_PLAN, 1, recall=1.0) for r in records[:3]},
        "time_unresolved": {r.question.qid: outcome(LLM_PLAN, 1, recall=1.0) for r in records[3:]},
    }
    gains = doubt_gains(records, per_doubt)
    assert gains["no_subject"] == {
        "questions": 3,
        "rules_recall": 0.5,
        "llm_recall": 1.0,
        "llm_fields_recall": 1.0,
        "llm_differs": 1.0,
    }
    assert gains["operation_conflict"]["questions"] == 0 and gains["operation_conflict"]["rules_recall"] is None
    assert choose_triggers(gains) == ("no_subject",)  # a tie (time_unresolved: 1.0 both ways) does not pay
    assert choose_triggers(gains, min_questions=4) == ()


# --- the run, plans only --------------------------------------------------------------------------


def test_run_modes_makes_each_llm_call_once_and_hybrid_only_where_the_rules_doubt():
    questions = [
        question("conv-a:q0", "What did Melanie paint recently?"),  # a doubt
        question("conv-a:q1", "What is Caroline's identity?"),  # sure
        question("conv-b:q0", "What did the charity race raise awareness for?"),  # a doubt
    ]
    records = records_for(questions, lambda qid: TUNE if qid.startswith("conv-a") else REPORT)
    assert [r.doubts for r in records] == [("time_unresolved",), (), ("no_subject",)]
    live = CountingLLM()
    llm = RecordedLLM(live)
    chosen, gains = run_modes(records, llm, planner_asker(llm), chosen=("no_subject",))
    assert chosen == ("no_subject",) and gains == {}
    assert live.calls == 3  # the llm mode's; every later mode is answered from them
    assert [r.outcomes["llm"].calls for r in records] == [1, 1, 1]
    assert [r.outcomes["rules"].calls for r in records] == [0, 0, 0]
    assert [r.outcomes["hybrid"].calls for r in records] == [1, 0, 1]
    assert [r.outcomes[TUNED].calls for r in records] == [0, 0, 1]  # only the chosen doubt
    # The hybrid took the LLM's period for the doubted question, and nothing else.
    hybrid = records[0].outcomes["hybrid"].plan
    assert hybrid.time_from == datetime(2023, 7, 1, tzinfo=timezone.utc) and hybrid.participants == "ambiguous"
    assert records[1].outcomes["hybrid"].plan == rule_plan("What is Caroline's identity?", NOW)
    result = summary(records, chosen, gains)
    assert result["questions"] == {TUNE: 2, REPORT: 1}
    assert result["triggers"] == {"hybrid": list(DOUBTS), TUNED: ["no_subject"]}
    assert result["modes"]["hybrid"][TUNE]["llm_calls_per_question"] == 0.5
    rows = question_rows(records)
    assert rows[0]["modes"]["hybrid"]["differs"] == ["time"] and "question" not in rows[0]


def test_the_tune_split_chooses_the_doubts_when_none_are_given():
    records = records_for([question("conv-a:q0", "What did Melanie paint recently?")], lambda qid: TUNE)
    llm = RecordedLLM(CountingLLM())
    chosen, gains = run_modes(records, llm, planner_asker(llm))
    assert set(gains) == set(DOUBTS) and gains["time_unresolved"]["questions"] == 1
    assert chosen == ()  # no recall without a store: nothing gained, nothing chosen


def test_ask_planner_reports_the_planners_calls_and_tokens():
    llm = RecordedLLM(CountingLLM())
    result = ask_planner(LlmPlanner(llm), llm, question("q", "What did Melanie paint recently?"))
    assert (result.calls, result.tokens, result.recall) == (1, 120, None) and result.plan.planner == "llm"
