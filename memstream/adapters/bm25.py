"""Text -> BM25 sparse vectors, shared by both store adapters.

Qdrant's way of BM25: each document is stored as a sparse vector of term-frequency weights
(token hash -> saturated, length-normalised TF), each query as 1.0 per unique token, and the
collection's sparse vector carries the IDF modifier, so the engine applies IDF at query time from
its own document counts. The tokenizer and weights are ``qdrant_edge.Bm25`` (English stopwords
and stemming by default; its config mirrors Qdrant's server-side ``Bm25Config``), used by both
adapters so a collection's indices never depend on which adapter wrote them.
"""

from __future__ import annotations

import qdrant_edge as qe

BM25_VECTOR = "bm25"  # name of the sparse vector on every collection

SparseParts = tuple[list[int], list[float]]  # (indices, values); both empty when no token survives


class Bm25Encoder:
    """One per store; ``config`` defaults to Qdrant's (k=1.2, b=0.75, avg_len=256, English)."""

    def __init__(self, config: qe.Bm25Config | None = None):
        self._model = qe.Bm25(config)

    def document(self, text: str) -> SparseParts:
        return _parts(self._model.embed_document(text))

    def query(self, text: str) -> SparseParts:
        return _parts(self._model.embed_query(text))


def _parts(vector: qe.SparseVector) -> SparseParts:
    return list(vector.indices), [float(v) for v in vector.values]
