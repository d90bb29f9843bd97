"""Real embedded Qdrant stores, in a test's temp folder, holding the writes a test indexed."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from memstream.adapters.qdrant_edge_store import QdrantEdgeStore
from memstream.processors.write.index import COLLECTIONS, index_write
from memstream.schemas import MemoryWrite
from tests.fakes import HashEmbedder


@contextmanager
def edge_store(folder: Path, *writes: MemoryWrite, embedder=None) -> Iterator[QdrantEdgeStore]:
    """Every collection at the embedder's size (HashEmbedder's unless given), each write indexed in turn;
    closed on the way out."""
    embedder = embedder or HashEmbedder()
    store = QdrantEdgeStore(folder)
    try:
        store.ensure_collections(COLLECTIONS, embedder.dim)
        for write in writes:
            index_write(write, embedder, store)
        yield store
    finally:
        store.close()
