"""Operating the store: `rebuild` (a new generation from the durable record, switched to when asked),
`backup` and `restore` (a backup, then the record from the backup's positions)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from memstream.adapters import StoreNotFound
from memstream.adapters.generations import StoreLocked, drop_generation
from memstream.adapters.kafka_record import KafkaRecord
from memstream.streams.backup import sync_record, take_backup
from memstream.streams.rebuild import Rebuild, RebuildRefused, RebuildReport
from memstream.streams.services import Services
from memstream.streams.topics import ensure_topics

from ._app import _progress, _settings, cli, console

SWITCH_HELP = (
    "Once the new generation holds what the record holds, make it the one workers read and write "
    "(atomically; an embedded store's worker must be stopped for it)"
)


@cli.command()
def rebuild(
    switch: bool = typer.Option(False, "--switch", help=SWITCH_HELP),
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
    _build(None, switch, drop_old, drop_legacy, metrics_port, batch, json_out)


@cli.command()
def restore(
    folder: Path = typer.Argument(..., help="A folder `memstream backup` wrote"),
    switch: bool = typer.Option(False, "--switch", help=SWITCH_HELP),
    drop_old: bool = typer.Option(False, "--drop-old", help="After the switch, delete the previous generation"),
    drop_legacy: bool = typer.Option(False, "--drop-legacy", help="As for rebuild"),
    metrics_port: int = typer.Option(0, "--metrics-port", help="Serve the restore's Prometheus metrics here"),
    batch: int = typer.Option(256, min=1, help="Points applied (and the position saved) at a time"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the report as JSON here"),
) -> None:
    """A new generation from a backup, then the record from the positions the backup was taken at (what
    was written since; forgets issued since are applied again), beside the generation that serves."""
    _build(folder, switch, drop_old, drop_legacy, metrics_port, batch, json_out)


@cli.command()
def backup(
    out: Optional[Path] = typer.Option(None, "--out", help="Folder to write (default: <data dir>/backups/<UTC time>)"),
) -> None:
    """Back the serving store up (every point, vectors included) with the record's positions, for
    `memstream restore`. A Qdrant server is backed up while it serves; the embedded store once its
    worker has stopped (it is one process's)."""
    s = _settings()
    folder = out or s.data_dir / "backups" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    with _progress("backup") as progress:
        task = progress.add_task("points", total=None)
        try:
            manifest = take_backup(s, folder, on_point=lambda: progress.advance(task))
        except (StoreNotFound, FileExistsError, RuntimeError) as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
    where = "no record to replay from" if manifest.record_offsets is None else "with the record's positions"
    console.print(f"backed up {sum(manifest.counts.values())} points to {folder} ({where})")


record_app = typer.Typer(no_args_is_help=True, help="The store's durable record (memory.record)")
cli.add_typer(record_app, name="record")


@record_app.command("sync")
def record_sync() -> None:
    """Make the record hold what the serving store holds: once after upgrading from a version without
    the record (or running with MEMSTREAM_RECORD_ENABLED=false), and after a rollback to such a
    version. The store is taken as the truth: stop the workers that write it (index, consolidate)
    meanwhile (the embedded store's worker must be stopped anyway)."""
    s = _settings()
    asyncio.run(ensure_topics(s))  # the record compacted, not made by a first write with the broker's defaults
    record = KafkaRecord(s)
    with _progress("record sync") as progress:
        task = progress.add_task("points", total=None)
        try:
            counts = sync_record(s, record, on_point=lambda: progress.advance(task))
        except (StoreNotFound, RuntimeError) as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
        finally:
            record.close()
    console.print(f"{record.topic}: {counts.added} points added, {counts.updated} updated, {counts.removed} tombstoned")


def _build(
    backup_folder: Path | None,
    switch: bool,
    drop_old: bool,
    drop_legacy: bool,
    metrics_port: int,
    batch: int,
    json_out: Path | None,
) -> None:
    s = _settings()
    services = Services(s)
    services.metrics.serve(metrics_port, s.metrics_host)
    with _progress("restore" if backup_folder else "rebuild") as progress:
        task = progress.add_task("entries", total=None)
        run = Rebuild(
            s,
            services.embedder,
            metrics=services.metrics,
            on_progress=lambda done, total: progress.update(task, completed=done, total=total),
            batch=batch,
        )
        try:
            report = run.run(switch=switch, drop_legacy=drop_legacy, backup=backup_folder)
        except (RebuildRefused, StoreLocked, LookupError, ValueError, FileNotFoundError) as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
    dropped = drop_generation(s, report.previous) if drop_old and report.switched else 0
    _print_report(report, dropped)
    if json_out is not None:
        json_out.write_text(json.dumps(dataclasses.asdict(report) | {"dropped": dropped}, indent=2) + "\n")


def _print_report(report: RebuildReport, dropped: int) -> None:
    table = Table(title=f"generation {report.generation} ({'resumed' if report.resumed else 'new'})")
    table.add_column("collection")
    table.add_column("points", justify="right")
    table.add_column("in the record", justify="right")
    for collection, n in report.points.items():
        table.add_row(collection, str(n), str(report.record.get(collection, 0)))
    console.print(table)
    state = f"switched from generation {report.previous}" if report.switched else "built, not switched (--switch)"
    console.print(f"{report.applied} record entries applied in {report.seconds:.1f}s; {state}")
    if report.restored_from:
        console.print(f"restored from {report.restored_from}; {report.reconciled} of its points forgotten since")
    if dropped:
        console.print(f"generation {report.previous} deleted ({dropped} collections)")
