"""A store remembers its embedder: the real MiniLM on a real embedded store (both engines)."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from memstream.adapters.qdrant_edge_store import QdrantEdgeStore
from memstream.adapters.qdrant_store import QdrantStore
from memstream.adapters.st_embedder import SentenceTransformerEmbedder
from memstream.config import Settings
from memstream.processors.operations.fingerprint import META, SYSTEM_TENANT, EmbedderMismatch, check_embedder
from memstream.processors.write.index import COLLECTIONS
from memstream.schemas import Query
from memstream.streams.services import Services


class RotatedEmbedder:
    """Another model of the same size: MiniLM's vectors in another basis. Its own neighbours are
    MiniLM's, but its vectors cannot be compared with MiniLM's."""

    def __init__(self, inner: SentenceTransformerEmbedder):
        self.inner, self.dim, self.name = inner, inner.dim, "rotated-MiniLM"
        self.rotation, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(inner.dim, inner.dim)))

    def embed(self, texts):
        return (self.inner.embed(texts) @ self.rotation.T).astype(np.float32)

    def clear_cache(self) -> None:
        self.inner.clear_cache()


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


def _open(kind: str, path, dim: int):
    store = QdrantStore(path=path) if kind == "local" else QdrantEdgeStore(path)
    store.ensure_collections((*COLLECTIONS, META), dim)
    return store


@pytest.mark.parametrize("kind", ["local", "edge"])
def test_the_first_embedder_is_kept_and_another_of_the_same_size_is_refused(kind, tmp_path, minilm):
    store = _open(kind, tmp_path / "q", minilm.dim)
    try:
        assert check_embedder(store, minilm) is None  # a new store takes this embedder's fingerprint
        assert check_embedder(store, minilm) == pytest.approx(1.0, abs=1e-4)
    finally:
        store.close()
    store = _open(kind, tmp_path / "q", minilm.dim)  # reopened: the fingerprint persisted
    try:
        with pytest.raises(
            EmbedderMismatch, match="built with the embedder 'all-MiniLM-L6-v2', not 'rotated-MiniLM'"
        ) as no:
            check_embedder(store, RotatedEmbedder(minilm))
        # ... and says what to run to move to the new model, or how to keep the old one.
        assert "run `memstream rebuild`" in str(no.value) and "`memstream rebuild --switch`" in str(no.value)
        assert "set MEMSTREAM_EMBEDDING_MODEL to it" in str(no.value)
        assert check_embedder(store, minilm) == pytest.approx(1.0, abs=1e-4)  # the refusal changed nothing
        assert store.count(META) == 1
    finally:
        store.close()


def test_the_int8_backend_of_the_same_model_is_the_same_embedder(tmp_path, minilm):
    store = _open("edge", tmp_path / "q", minilm.dim)
    try:
        check_embedder(store, minilm)
        assert check_embedder(store, SentenceTransformerEmbedder(backend="onnx-int8")) > 0.99
    finally:
        store.close()


def test_no_message_can_name_the_tenant_the_fingerprint_is_kept_under():
    with pytest.raises(ValueError, match="tenant_id"):
        Query(
            tenant_id=SYSTEM_TENANT,
            conversation_id="c",
            correlation_id="x",
            reply_topic="r",
            question="q?",
            sent_at=datetime.now(timezone.utc),
        )


def test_a_worker_refuses_a_store_built_with_another_model_and_lets_go_of_it(tmp_path, minilm):
    # No record: its Kafka producer is not what this checks, and `make check` runs with no broker.
    settings = Settings(data_dir=tmp_path, record_enabled=False)
    first = Services(settings)
    first.__dict__["embedder"] = RotatedEmbedder(minilm)  # the store is built by another model ...
    first.store.close()
    worker = Services(settings)  # ... and opened by a worker with the default one
    with pytest.raises(EmbedderMismatch):
        worker.store
    again = Services(settings)  # the folder lock was released: the right embedder opens it
    again.__dict__["embedder"] = RotatedEmbedder(minilm)
    again.store.close()
