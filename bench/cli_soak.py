"""``memstream bench soak``: state that stays bounded over a long steady run (:mod:`memstream.bench.soak`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from memstream.bench.cli_shared import JSON_OUT_AND_PNG, console, run_progress, write_json


def soak(
    minutes: float = typer.Option(60.0, min=0.5, help="How long turns stream in"),
    rate: float = typer.Option(8.0, min=0.1, help="Turns per second, every conversation together"),
    conversations: int = typer.Option(
        20_000, min=1, help="Short conversations of a few turns each; used up, they come back as a new session"
    ),
    active: int = typer.Option(40, min=1, help="Short conversations speaking at once"),
    long_conversations: int = typer.Option(4, min=0, help="Conversations that speak throughout"),
    evict_idle: float = typer.Option(
        180.0, min=1, help="MEMSTREAM_STATE_EVICT_IDLE_S of the worker (at least --stm-idle and --sleep-idle)"
    ),
    stm_idle: float = typer.Option(15.0, min=1, help="MEMSTREAM_STM_IDLE_S of the worker"),
    sleep_idle: float = typer.Option(60.0, min=1, help="MEMSTREAM_SLEEP_IDLE_S of the worker"),
    retention: float = typer.Option(
        600.0, min=60, help="MEMSTREAM_TOPIC_RETENTION_S: topics keep records this long, changelogs compact as often"
    ),
    sample_every: float = typer.Option(15.0, min=1, help="Seconds between two samples"),
    probe_every: float = typer.Option(10.0, min=1, help="Seconds between two fresh-turn probes"),
    question_every: float = typer.Option(5.0, min=0.5, help="Seconds between two questions"),
    flat_ratio: float = typer.Option(
        1.25, min=1.0, help="Flat: the last window's figure at most this times the first's"
    ),
    store: str = typer.Option(
        "server", help="server: a Qdrant node of the run's own (the worker's RSS without the memories); embedded"
    ),
    workdir: Path = typer.Option(Path(".data/bench/soak"), help="Data folder of the broker and the deployment"),
    json_out: Optional[Path] = JSON_OUT_AND_PNG,
) -> None:
    """A steady stream of many short conversations and a few long ones into one worker (extractive) on
    a broker of the run's own, quiet conversations evicted after --evict-idle: worker RSS, table folder,
    changelog bytes, consumer lag, live table entries, fresh-turn p99 and reply p99 in the first and the
    last sixth of the run (10 minutes of 60), and whether each stayed flat."""
    from memstream.bench.soak import SoakOptions, plot_soak, run_soak

    options = SoakOptions(
        minutes=minutes,
        rate=rate,
        conversations=conversations,
        active=active,
        long_conversations=long_conversations,
        evict_idle_s=evict_idle,
        stm_idle_s=stm_idle,
        sleep_idle_s=sleep_idle,
        retention_s=retention,
        sample_s=sample_every,
        probe_s=probe_every,
        question_s=question_every,
        flat_ratio=flat_ratio,
        store=store,
        workdir=workdir,
    )
    with run_progress(minutes * 60) as (progress, task, status):
        started = time.monotonic()

        def on_status(text: str) -> None:
            status(text)
            progress.update(task, completed=min(minutes * 60, time.monotonic() - started))
            if not console.is_terminal:  # a log file gets a line per sample
                console.print(f"{time.strftime('%H:%M:%S')} {text}")

        result = run_soak(options, status=on_status)
    flatness = result["flatness"]
    table = Table(
        title=f"soak: {result['turns']} turns, {result['conversations_started']} conversations, "
        f"{result['evicted_total']:.0f} entries evicted"
    )
    for column in ("figure", "first", "last", "flat"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for name, figure in flatness.items():
        if isinstance(figure, dict):
            table.add_row(name, str(figure["first"]), str(figure["last"]), str(figure["flat"]))
    console.print(table)
    console.print(
        f"windows {flatness['first_window_s']} and {flatness['last_window_s']} s; live entries at most "
        f"{result['live_entries_max']:.0f}; reply errors {result['reply_errors']}"
    )
    write_json(result, json_out)
    if json_out:
        console.print(f"plot: {plot_soak(result, json_out.with_suffix('.png'))}")
