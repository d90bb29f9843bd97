"""qdrant-client adapter specifics of BM25; the shared contract is in test_qdrant_edge_store.py."""

from __future__ import annotations

import logging
import warnings

import pytest
from qdrant_client import QdrantClient, models

from memstream.adapters.qdrant_store import QdrantStore
from memstream.ports import StorePoint

COLL, FULL, DIM = "cards", "memstream_cards", 4
X = [1.0, 0.0, 0.0, 0.0]


def pid(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


def _raw(path) -> QdrantClient:
    return QdrantClient(path=str(path))


def _close(client: QdrantClient) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client.close()


def test_points_carry_the_unnamed_dense_and_the_named_bm25_vector(tmp_path):
    s = QdrantStore(path=tmp_path / "q")
    s.ensure_collections([COLL], DIM)
    s.upsert(COLL, [StorePoint(pid(1), X, {"tenant_id": "t1"}, "walrus"), StorePoint(pid(2), X, {"tenant_id": "t1"})])
    s.close()
    raw = _raw(tmp_path / "q")
    try:
        params = raw.get_collection(FULL).config.params
        assert params.sparse_vectors["bm25"].modifier == models.Modifier.IDF
        assert isinstance(params.vectors, models.VectorParams)  # the dense vector is still the unnamed one
        with_text, without = raw.retrieve(FULL, [pid(1), pid(2)], with_vectors=True)
        assert set(with_text.vector) == {"", "bm25"} and len(with_text.vector["bm25"].indices) == 1
        assert without.vector == X  # a point without text: the bare dense list, as before BM25
    finally:
        _close(raw)


def test_a_collection_from_before_bm25_stays_dense_only(tmp_path, caplog):
    raw = _raw(tmp_path / "q")
    raw.create_collection(FULL, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    raw.upsert(FULL, [models.PointStruct(id=pid(1), vector=X, payload={"tenant_id": "t1"})])
    _close(raw)
    s = QdrantStore(path=tmp_path / "q")
    try:
        with pytest.raises(ValueError, match="predates BM25"):
            s.search_text(COLL, "t1", "walrus")
        with caplog.at_level(logging.WARNING, logger="memstream.adapters.qdrant_store"):
            s.ensure_collections([COLL], DIM)
        assert "predates BM25" in caplog.text
        # qdrant-client cannot add a vector to an existing collection: the text is dropped, the point kept
        s.upsert(COLL, [StorePoint(pid(2), X, {"tenant_id": "t1"}, "walrus")])
        assert s.count(COLL) == 2
        hits = s.search(COLL, "t1", X, limit=5, with_vectors=True)
        assert sorted(h.id for h in hits) == [pid(1), pid(2)] and all(h.vector == X for h in hits)
        with pytest.raises(ValueError, match="predates BM25"):
            s.search_text(COLL, "t1", "walrus")
    finally:
        s.close()
