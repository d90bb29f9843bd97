"""The user's cache of what memstream makes once and keeps: ONNX exports, unpacked packaged models,
patched native libraries (``$XDG_CACHE_HOME/memstream``, else ``~/.cache/memstream``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def cache_dir(kind: str) -> Path:
    """The folder for one kind of cached thing."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memstream" / kind


def made_once(target: Path, make: Callable[[Path], None]) -> Path:
    """``target`` (a file or a folder), made by ``make(path)`` the first time only. It is made in a
    temporary folder beside it and renamed into place, so no reader sees it half made; of concurrent
    first runs (two workers) the first rename wins and the others drop their copy."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        make(work / target.name)
        try:
            os.replace(work / target.name, target)
        except OSError:  # a folder another run renamed into place first
            if not target.exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
