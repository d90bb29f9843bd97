"""What the ``memstream bench`` commands share: the console, progress bars, figure tables, the JSON
result file, and the options many of them declare."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Callable, Iterator, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from memstream.bench.dev_data import LOCOMO_DEV

console = Console()

# `--json`: where a command writes its result (typer reads these declarations; they are never mutated).
JSON_HELP = "Write the result here"
JSON_OUT = typer.Option(None, "--json", help=JSON_HELP)
JSON_OUT_AND_PNG = typer.Option(None, "--json", help=f"{JSON_HELP} (and a PNG beside it)")
LOCOMO_JSON = typer.Option(LOCOMO_DEV, help="LoCoMo JSON")  # `--data`, the dev set by default


def exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the workers, servers and brokers a run started are stopped."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


@contextlib.contextmanager
def run_progress(
    total: Optional[float], kafka_log_level: Optional[int] = logging.ERROR
) -> Iterator[tuple[Progress, TaskID, Callable[[str], None]]]:
    """A long run under a progress bar: SIGTERM unwinds it (``exit_on_sigterm``), aiokafka's
    per-connection errors stay quiet (the run counts them; None leaves its level), and
    ``status(text)`` names its step."""
    if kafka_log_level is not None:
        logging.getLogger("aiokafka").setLevel(kafka_log_level)
    exit_on_sigterm()
    with progress_bar() as progress:
        task = progress.add_task("starting", total=total)
        yield progress, task, lambda text: progress.update(task, description=text)


def print_figures(title: str, result: dict, keys: tuple[str, ...]) -> None:
    """A two-column table of these figures of a result."""
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key in keys:
        table.add_row(key, str(result[key]))
    console.print(table)


def write_json(result: dict, out: Optional[Path]) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"JSON written to {out}")


def comma_list(text: Optional[str]) -> list[str]:
    """``"a, b,"`` -> ``["a", "b"]`` (an option of comma-separated ids; none given: none)."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def comma_ints(text: str) -> list[int]:
    """``"5,10,"`` -> ``[5, 10]`` (``''``: none)."""
    return [int(part) for part in comma_list(text)]
