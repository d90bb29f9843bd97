"""`memstream bench`: the benchmarks, loaded only when asked for (a source checkout has them)."""

from __future__ import annotations

import os
from importlib.metadata import entry_points

import typer

from .. import runtime
from ._app import cli, console

COMMANDS = "memstream.commands"  # entry-point group of commands mounted on `memstream` by name


@cli.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench() -> None:
    """Benchmarks (`memstream bench --help`): from a source checkout, which has the bench package."""
    raise typer.Exit(run_bench(["--help"]))


def run_bench(args: list[str]) -> int:
    """The benchmarks are not part of the production CLI, which never imports them: they are a
    command plugin (the ``memstream.commands`` entry point ``bench``, pyproject.toml), loaded only
    when asked for."""
    found = entry_points(group=COMMANDS, name="bench")
    try:
        bench_app = next(iter(found)).load()
    except (StopIteration, ImportError):
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
