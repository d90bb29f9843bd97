"""``memstream bench drill``: the disaster drill (:mod:`memstream.bench.drill`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from memstream.bench.cli_shared import JSON_OUT_AND_PNG, comma_list, console, run_progress, write_json
from memstream.bench.dev_data import LOCOMO_DEV


def drill(
    data: Path = typer.Option(
        LOCOMO_DEV, help="LoCoMo JSON (the dev set beside the checkout; without it, the packaged conversation)"
    ),
    conversations: int = typer.Option(3, min=1, help="The first N conversations of the file"),
    sessions: int = typer.Option(0, min=0, help="Sessions of each conversation (0 = all)"),
    questions: int = typer.Option(60, min=1, help="LoCoMo questions whose gold-turn recall is compared"),
    stores: str = typer.Option("server,embedded", help="Comma-separated: server, embedded"),
    cluster: bool = typer.Option(
        True,
        "--cluster/--no-cluster",
        help="A 3-broker Kafka cluster and a 3-node Qdrant cluster of the run's own (--no-cluster: the "
        "configured broker and --qdrant-url, or one Qdrant node of the run's own)",
    ),
    qdrant_url: Optional[str] = typer.Option(None, help="--no-cluster: the Qdrant server of the server store"),
    outage: float = typer.Option(10.0, min=0, help="Seconds the store stays gone before each recovery starts"),
    ask_timeout: float = typer.Option(
        600.0, min=1, help="Seconds a question waits for its reply (embedded: the worker is stopped while it is gone)"
    ),
    compaction_timeout: float = typer.Option(
        300.0, min=0, help="Seconds to wait for the log cleaner to compact the forgotten speaker out of the record"
    ),
    reembed_model: str = typer.Option(
        "all-mpnet-base-v2", help="Model the store is moved to last ('' = none; not installed: skipped, said so)"
    ),
    reembed_backend: Optional[str] = typer.Option(None, help="MEMSTREAM_EMBEDDING_BACKEND of the re-embed"),
    workdir: Path = typer.Option(Path(".data/bench/drill"), help="Data folder of the clusters and deployments"),
    json_out: Optional[Path] = JSON_OUT_AND_PNG,
) -> None:
    """The disaster drill, with questions asked throughout: conversations in, a backup, more, a speaker
    forgotten; every collection deleted; recovered by rebuild from the record, then (deleted again) by
    restore of the backup; points lost, questions unanswered, the forgotten speaker left anywhere,
    recall before and after, recovery seconds per 10,000 points; then a re-embed with another model."""
    from memstream.bench.drill import STORES, DrillOptions, run_drill
    from memstream.bench.drill_questions import plot_questions

    chosen = tuple(comma_list(stores))
    if not chosen or set(chosen) - set(STORES):
        raise typer.BadParameter(f"--stores takes {', '.join(STORES)}, not {stores!r}")
    options = DrillOptions(
        data=data if data.exists() or data != LOCOMO_DEV else None,
        conversations=conversations,
        sessions=sessions or None,
        questions=questions,
        stores=chosen,
        cluster=cluster,
        qdrant_url=qdrant_url,
        outage_s=outage,
        ask_timeout_s=ask_timeout,
        compaction_timeout_s=compaction_timeout,
        reembed_model=reembed_model or None,
        reembed_backend=reembed_backend,
        workdir=workdir,
    )
    with run_progress(None) as (_, _, status):

        def on_status(text: str) -> None:
            status(text)
            if not console.is_terminal:  # a log file gets a line per step (a live bar draws nothing there)
                console.print(f"{time.strftime('%H:%M:%S')} {text}")

        result = run_drill(options, status=on_status)
    table = Table(title=f"disaster drill: {result['turns']} turns, {result['recall_questions']} recall questions")
    for column in ("store", "way", "seconds", "points", "s / 10k points", "lost", "forgotten", "recall"):
        table.add_column(column, justify="left" if column in ("store", "way") else "right")
    for kind, run in result["stores"].items():
        table.add_row(kind, "before", "", str(run["points"]), "", "", "", str(run["recall_before"]["recall"]))
        for way, r in run["recoveries"].items():
            table.add_row(
                kind,
                way,
                str(r["seconds"]),
                str(r["points_rebuilt"]),
                str(r["seconds_per_10k_points"]),
                str(r["points_lost"]),
                str(r["forgotten_points"]),
                str(r["recall"]["recall"]),
            )
    console.print(table)
    console.print(
        f"points lost {result['points_lost']}, questions unanswered {result['questions_unanswered']} "
        f"(error replies while the store was gone: {result['questions_error_replies']}), forgotten remaining "
        f"{result['forgotten_remaining']}, recall equal: {result['recall_equal']}"
    )
    for kind, reembed in result["reembed"].items():
        if reembed["skipped"]:
            console.print(f"{kind}: re-embed skipped: {reembed['reason']}")
        else:
            console.print(
                f"{kind}: re-embedded with {reembed['model']} in {reembed['seconds']} s; recall "
                f"{reembed['recall_before']} -> {reembed['recall_after']}"
            )
    write_json(result, json_out)
    if json_out:
        console.print(f"plot: {plot_questions(result, json_out.with_suffix('.png'))}")
