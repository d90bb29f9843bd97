"""How `memstream ask` shows a plan (pure formatting)."""

from datetime import datetime, timezone

from memstream.schemas import Plan
from memstream.streams.cli.memory import plan_line
from tests import factories


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


def test_memstream_ask_shows_a_memorys_bidi_controls_isolated(monkeypatch):
    from rich.console import Console

    from memstream.streams.cli import memory as cli

    rlo, fsi, pdf, pdi = "\u202e", "\u2068", "\u202c", "\u2069"
    reply = factories.reply(factories.evidence("Ana: " + rlo + "tac"), answer="the " + rlo + "tac", answer_mode="llm")
    console = Console(width=200, record=True, color_system=None)
    monkeypatch.setattr(cli, "console", console)
    cli.print_reply(reply, "What?")
    shown = console.export_text()
    assert fsi + "the " + rlo + "tac" + pdf + pdi in shown
    assert fsi + "Ana: " + rlo + "tac" + pdf + pdi in shown
    assert shown.count(rlo) == 2  # kept, each closed inside its own isolate
