"""`memstream bench`: the benchmarks, loaded only when asked for (a source checkout has them)."""

from __future__ import annotations

import os

import typer

from .. import runtime
from ._app import cli, console


@cli.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench() -> None:
    """Benchmarks (`memstream bench --help`): from a source checkout, which has the bench package."""
    raise typer.Exit(run_bench(["--help"]))


def run_bench(args: list[str]) -> int:
    """The benchmarks are not part of the production CLI: imported only when asked for."""
    try:
        from memstream.bench.cli import bench as bench_app
    except ImportError:
        console.print("[red]the benchmarks need a source checkout of memstream (the bench package)[/]")
        return 2
    try:
        bench_app(args=args, prog_name="memstream bench")
    except SystemExit as exc:
        return int(exc.code or 0)
    except FileNotFoundError as exc:
        shared = runtime.REPO_ROOT.parent / "shared"
        if not str(exc.filename or "").startswith(str(shared) + os.sep):
            raise
        # A default data set: they sit beside a source checkout (../shared), never beside an installed package.
        console.print(
            f"[red]{exc.filename} not found: the benchmarks' default data sets sit beside a source checkout "
            "(../shared); give the data file with --data[/]",
            soft_wrap=True,
            highlight=False,
        )
        return 2
    return 0
