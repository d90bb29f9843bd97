"""Real adapters behind the ports (OpenAI-compatible LLM, sentence-transformers, Qdrant, llmlingua)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memstream.config import Settings
    from memstream.ports import VectorStore


def open_store(settings: Settings) -> VectorStore:
    """The configured vector store: a Qdrant server by URL, else the embedded engine under data_dir."""
    if settings.qdrant_url:
        from .qdrant_store import QdrantStore

        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return QdrantStore(url=settings.qdrant_url, api_key=api_key)
    if settings.qdrant_embedded == "edge":
        from .qdrant_edge_store import QdrantEdgeStore

        return QdrantEdgeStore(settings.store_path)
    from .qdrant_store import QdrantStore

    return QdrantStore(path=settings.store_path)
