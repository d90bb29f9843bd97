"""The ``memstream`` command line: one module per group of commands, each registering its commands
on the app in ``_app``."""

from __future__ import annotations

import sys

from . import capacity, gateway, memory, models, pipeline, store  # noqa: F401 - they register their commands
from ._app import cli
from .bench import run_bench


def main() -> None:
    if sys.argv[1:2] == ["bench"]:
        sys.exit(run_bench(sys.argv[2:]))
    cli()


__all__ = ["cli", "main"]
