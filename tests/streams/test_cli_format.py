"""How `memstream ask` shows a plan (pure formatting)."""

from datetime import datetime, timezone

from memstream.schemas import Plan
from memstream.streams.cli import plan_line


def test_the_plan_line_shows_every_decision_the_planner_made():
    plan = Plan(
        planner="rules",
        entities=["Melanie", "Caroline"],
        participants="ambiguous",
        operation="lookup",
        time_from=datetime(2023, 5, 1, tzinfo=timezone.utc),
        time_to=datetime(2023, 5, 31, tzinfo=timezone.utc),
        distributed=True,
        fidelity=False,
        rewrites=["What does Melanie like?", "What does Caroline like?"],
        profile="compose",
    )
    line = plan_line(plan)
    for part in (
        "(rules)",
        "lookup",
        "participants ambiguous",
        "distributed yes",
        "fidelity no",
        "entities Melanie, Caroline",
        "time 2023-05-01 → 2023-05-31",
        "rewrites: What does Melanie like? | What does Caroline like?",
    ):
        assert part in line, part
    assert "time" not in plan_line(Plan(planner="llm", profile="lookup"))
