"""``memstream bench fairness``: a tenant's live latencies while another imports its history and
floods the gateway (:mod:`memstream.bench.fairness`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from memstream.bench.cli_shared import JSON_OUT_AND_PNG, console, run_progress, write_json


def fairness(
    import_turns: int = typer.Option(20_000, min=1, help="Turns of tenant A's history import (each import phase)"),
    import_conversation_turns: int = typer.Option(200, min=1, help="Turns of one imported conversation"),
    phase: float = typer.Option(300.0, min=5, help="Seconds of each phase (baseline, bulk, live)"),
    b_rate: float = typer.Option(1.0, min=0.1, help="Tenant B's live turns per second"),
    probe_every: int = typer.Option(5, min=1, help="Every Nth turn of B is a fresh-turn probe"),
    question_every: float = typer.Option(5.0, min=0.5, help="Seconds between two questions of B"),
    a_turns_per_s: float = typer.Option(4.0, min=0.1, help="Tenant A's turn rate limit at the gateway"),
    stm_idle: float = typer.Option(5.0, min=1, help="MEMSTREAM_STM_IDLE_S of the worker"),
    probe_timeout: float = typer.Option(120.0, min=5, help="A probe or question unanswered by then counts as this"),
    llm: bool = typer.Option(False, "--llm", help="Extract with the local LLM server (default: extractive, no LLM)"),
    workdir: Path = typer.Option(Path(".data/bench/fairness"), help="Data folder of the deployment"),
    json_out: Optional[Path] = JSON_OUT_AND_PNG,
) -> None:
    """Tenant B streams live turns and asks questions: alone, then while tenant A imports history through
    the bulk lane and floods the gateway, then while A sends the same import as live turns. B's
    fresh-turn, turn-to-card and reply p50/p99 per phase and their p99 ratios to the baseline, A's
    import rate, 429s, LLM budget fallbacks, and lost and duplicated turns (one worker, extractive)."""
    from memstream.bench.fairness import PHASES, FairnessOptions, plot_fairness, run_fairness

    options = FairnessOptions(
        import_turns=import_turns,
        import_conversation_turns=import_conversation_turns,
        phase_s=phase,
        b_rate=b_rate,
        probe_every=probe_every,
        question_s=question_every,
        a_turns_per_s=a_turns_per_s,
        stm_idle_s=stm_idle,
        probe_timeout_s=probe_timeout,
        llm=llm,
        workdir=workdir,
    )
    with run_progress(None) as (_progress, _task, status):

        def on_status(text: str) -> None:
            status(text)
            if not console.is_terminal:  # a log file gets a line per step
                console.print(f"{time.strftime('%H:%M:%S')} {text}")

        result = run_fairness(options, status=on_status)
    table = Table(title=f"fairness: B's latencies (s) while A imports {import_turns} turns ({result['extraction']})")
    for column in ("phase", "fresh p50", "fresh p99", "card p50", "card p99", "reply p50", "reply p99"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    table.add_column("A import/s", justify="right")
    table.add_column("429s", justify="right")
    for name in PHASES:
        p = result["phases"][name]
        cells = [str(p[f"b_{figure}"][q]) for figure in ("fresh", "card", "reply") for q in ("p50_s", "p99_s")]
        table.add_row(name, *cells, str(p["a_import_rate_per_s"]), str(p["rate_limited_429"]))
    console.print(table)
    ratios = ", ".join(f"{k} {v}" for k, v in result.items() if "_p99_ratio_" in k)
    console.print(
        f"p99 ratios to the baseline: {ratios}; within 2x under the bulk import: {result['target_within_2x_bulk']}"
    )
    console.print(
        f"turns sent {result['turns_sent']}, lost {result['turns_lost']}, duplicated {result['turns_duplicated']}; "
        f"refused turns stored {result['refused_turns_stored']}; LLM budget fallbacks {result['llm_budget_fallbacks']}"
    )
    write_json(result, json_out)
    if json_out:
        console.print(f"plot: {plot_fairness(result, json_out.with_suffix('.png'))}")
