"""Real adapters behind the ports (OpenAI-compatible LLM, sentence-transformers, Qdrant, llmlingua)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memstream.config import Settings
    from memstream.ports import VectorStore

from .qdrant_shared import COLLECTION_PREFIX as _PREFIX  # loads no Qdrant library


class StoreNotFound(FileNotFoundError):
    """A command that reads the embedded store found none where the settings point."""


def open_store(settings: Settings, *, generation: int | None = None) -> VectorStore:
    """The configured vector store: a Qdrant server by URL, else the embedded engine under data_dir
    (created when missing: what a worker opens). ``generation`` None: the active generation of the
    collection set, as workers use it; N: that generation's own collections, for building it beside
    the active one (:mod:`memstream.adapters.generations`)."""
    from .generations import open_store_generation

    return open_store_generation(settings, generation)


def embedded_collections(path: Path) -> set[str]:
    """The memstream collections in an embedded store folder, of either engine (read from its files,
    without opening it): Qdrant Edge keeps one folder per collection, qdrant-client's local mode
    lists them in meta.json."""
    found = {p.name for p in path.glob(_PREFIX + "*") if (p / "edge_config.json").is_file()}
    try:
        meta = json.loads((path / "meta.json").read_text())
        found |= {name for name in meta.get("collections", {}) if name.startswith(_PREFIX)}
    except (OSError, ValueError, AttributeError):
        pass
    return found


def store_problem(settings: Settings) -> str | None:
    """Why reading the configured embedded store would find nothing (None: it holds memstream
    collections, or the store is a Qdrant server)."""
    if settings.qdrant_url:
        return None
    path = settings.store_path
    hint = (
        "workers write it under their MEMSTREAM_DATA_DIR (default: .data in the directory they started in): "
        "run this from that directory, or set MEMSTREAM_DATA_DIR (or MEMSTREAM_QDRANT_PATH) to the folder they used"
    )
    if not path.is_dir():
        return f"no memstream store at {path}: {hint}"
    if not embedded_collections(path):
        return f"{path} holds no memstream collection (no worker has written there): {hint}"
    return None


def open_existing_store(settings: Settings) -> VectorStore:
    """The configured store, for reading what workers wrote: an embedded store that is missing or
    holds no memstream collection raises StoreNotFound (naming the path) instead of being created
    empty, which would read as zero memories."""
    problem = store_problem(settings)
    if problem:
        raise StoreNotFound(problem)
    return open_store(settings)


def store_locked(settings: Settings) -> bool:
    """The embedded store's folder lock is held by another process (a running worker); a Qdrant
    server is never locked. Tested with a non-blocking lock taken and released at once."""
    import fcntl

    if settings.qdrant_url:
        return False
    lock = settings.store_path / ".lock"
    if not lock.is_file():
        return False
    with lock.open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False
