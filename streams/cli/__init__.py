"""The ``memstream`` command line: one module per group of commands, each registering its commands
on the app in ``_app``. They are imported when the app is first needed: ``memstream worker`` (the
supervisor) and the worker it starts run without them, so a worker serves sooner."""

from __future__ import annotations

import sys
from typing import Any

# The supervisor and its worker, as `memstream worker` runs them (streams/runtime/processes.py).
SUPERVISOR_ARGS = ["worker"]
WORKER_ARGS = ["worker", "--no-supervise"]


def _cli() -> Any:
    from . import capacity, gateway, memory, models, pipeline, store  # noqa: F401 - they register their commands
    from ._app import cli

    return cli


def __getattr__(name: str) -> Any:
    if name == "cli":
        return _cli()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    args = sys.argv[1:]
    if args == SUPERVISOR_ARGS:
        from ..runtime.processes import supervise_worker

        sys.exit(supervise_worker())
    if args == WORKER_ARGS:
        from memstream.config import Settings

        from ..runtime.worker import run_worker

        run_worker(Settings())
        return
    if args[:1] == ["bench"]:
        from .bench import run_bench

        sys.exit(run_bench(args[1:]))
    _cli()()


__all__ = ["cli", "main"]
