"""Paths in the settings: read once against the directory of the process reading them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator


def absolute_path(path: Path) -> Path:
    """``path`` with ``~`` expanded and made absolute against the current directory (symlinks kept)."""
    return Path(os.path.abspath(path.expanduser()))


def default_data_dir() -> Path:
    return Path.cwd() / ".data"


# Made absolute once, against the directory of the process reading the settings: the processes it
# starts get these paths, whatever their own working directory.
AbsolutePath = Annotated[Path, AfterValidator(absolute_path)]
