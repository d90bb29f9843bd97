from datetime import datetime, timezone

import pytest

from processors.query import cap_to_budget, choose_profile, rrf_fuse, rule_plan

NOW = datetime(2023, 8, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "question, profile, operation",
    [
        ("What is Caroline's identity?", "lookup", "lookup"),
        ("When did Melanie paint a sunrise?", "lookup", "temporal_select"),
        ("How many times has Melanie gone to the beach?", "compose", "aggregate"),
        ("What activities do both Melanie and Caroline enjoy?", "compose", "lookup"),
        ("What exactly did I write about the vase?", "replay", "lookup"),
        ("Quote what you said word for word about taxes", "replay", "lookup"),
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


def test_planner_finds_entities_and_participants():
    plan = rule_plan("Where did Melanie go camping with Caroline?", NOW)
    assert {"Melanie", "Caroline"} <= set(plan.entities)
    assert rule_plan("What did you recommend to me?", NOW).participants == "user"
    assert rule_plan("What did you recommend?", NOW).participants == "assistant"


def test_rrf_rewards_agreement():
    fused = rrf_fuse([["a", "b", "c"], ["b", "a", "d"]])
    assert max(fused, key=fused.get) in {"a", "b"}
    assert fused["a"] == fused["b"] > fused["c"] > 0
    assert fused["d"] == fused["c"]


def test_budget_capping_keeps_order_and_at_least_one():
    texts = ["one two three", "four five six", "seven eight nine"]
    assert cap_to_budget(texts, 6) == 2
    assert cap_to_budget(texts, 100) == 3
    assert cap_to_budget(["a very long text indeed"], 1) == 1
