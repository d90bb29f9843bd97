"""Operating the store: `rebuild` (a new generation from the durable record, switched to when asked)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from memstream.adapters.generations import StoreLocked, drop_generation
from memstream.streams.rebuild import Rebuild, RebuildRefused
from memstream.streams.services import Services

from ._app import _progress, _settings, cli, console


@cli.command()
def rebuild(
    switch: bool = typer.Option(
        False,
        "--switch",
        help="Once the new generation holds what the record holds, make it the one workers read and write "
        "(atomically; an embedded store's worker must be stopped for it)",
    ),
    drop_old: bool = typer.Option(False, "--drop-old", help="After the switch, delete the previous generation"),
    drop_legacy: bool = typer.Option(
        False,
        "--drop-legacy",
        help="A server store made before generations: delete its collections at the switch (not atomic)",
    ),
    metrics_port: int = typer.Option(0, "--metrics-port", help="Serve the rebuild's Prometheus metrics here"),
    batch: int = typer.Option(256, min=1, help="Record entries applied (and the position saved) at a time"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the report as JSON here"),
) -> None:
    """Build the store anew from its durable record (memory.record) with the configured embedder, beside
    the generation that serves; resumable (run it again after a kill). Also how the embedding model is
    changed: run it with the new MEMSTREAM_EMBEDDING_MODEL, then start the workers with that model."""
    s = _settings()
    services = Services(s)
    services.metrics.serve(metrics_port, s.metrics_host)
    with _progress("rebuild") as progress:
        task = progress.add_task("record entries", total=None)
        run = Rebuild(
            s,
            services.embedder,
            metrics=services.metrics,
            on_progress=lambda done, total: progress.update(task, completed=done, total=total),
            batch=batch,
        )
        try:
            report = run.run(switch=switch, drop_legacy=drop_legacy)
        except (RebuildRefused, StoreLocked, LookupError, ValueError) as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
    dropped = drop_generation(s, report.previous) if drop_old and report.switched else 0
    table = Table(title=f"generation {report.generation} ({'resumed' if report.resumed else 'new'})")
    table.add_column("collection")
    table.add_column("points", justify="right")
    table.add_column("in the record", justify="right")
    for collection, n in report.points.items():
        table.add_row(collection, str(n), str(report.record.get(collection, 0)))
    console.print(table)
    state = f"switched from generation {report.previous}" if report.switched else "built, not switched (--switch)"
    console.print(f"{report.applied} record entries applied in {report.seconds:.1f}s; {state}")
    if dropped:
        console.print(f"generation {report.previous} deleted ({dropped} collections)")
    if json_out is not None:
        json_out.write_text(json.dumps(dataclasses.asdict(report) | {"dropped": dropped}, indent=2) + "\n")
