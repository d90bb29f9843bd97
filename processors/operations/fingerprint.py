"""Which embedder a store's vectors come from, kept in the store itself.

Vectors of two models cannot be compared, even at one size: a store built with one model and
searched with another returns noise without failing (a size mismatch is refused earlier, by the
store). The fingerprint is the vector of a fixed text, kept in the ``meta`` collection under a
tenant no message can name. Whoever opens the store compares it with its own embedder's. The
backends of one model agree (cosine above 0.99, int8 included); two models agree on nothing.
"""

from __future__ import annotations

import numpy as np

from memstream.ports import Embedder, StorePoint, VectorStore
from memstream.processors.ids import point_id

META = "meta"
SYSTEM_TENANT = "_memstream"  # schemas' ID_PATTERN starts with a letter or digit: no message can name it
FINGERPRINT_TEXT = "Fingerprint of an embedder: the quick brown fox jumps over the lazy dog at noon."
FINGERPRINT_ID = point_id("embedder-fingerprint", SYSTEM_TENANT, "", [], FINGERPRINT_TEXT)
SAME_MODEL = 0.9  # one model's backends: > 0.99; two models: the cosine of unrelated spaces


class EmbedderMismatch(ValueError):
    """The store's vectors were made by another embedder than the one opening it."""


def check_embedder(store: VectorStore, embedder: Embedder) -> float | None:
    """Refuse an embedder other than the store's; a store without a fingerprint takes this one's.

    Returns the cosine of the two fingerprints (None when this call wrote the first). The ``meta``
    collection must exist (``ensure_collections`` with the embedder's size)."""
    vector = np.asarray(embedder.embed([FINGERPRINT_TEXT])[0], dtype=np.float32)
    kept = store.scroll(META, SYSTEM_TENANT, limit=1, with_vectors=True)
    if not kept:
        payload = {"tenant_id": SYSTEM_TENANT, "kind": "embedder_fingerprint", "model": embedder.name}
        store.upsert(META, [StorePoint(FINGERPRINT_ID, vector.tolist(), payload)])
        return None
    cosine = float(vector @ np.asarray(kept[0].vector, dtype=np.float32))
    if cosine < SAME_MODEL:
        built_with = kept[0].payload.get("model", "another model")
        raise EmbedderMismatch(
            f"the store was built with the embedder {built_with!r}, not {embedder.name!r} "
            f"(their vectors of one text agree to a cosine of {cosine:.2f}). To move the store to "
            f"{embedder.name!r}, run `memstream rebuild` with this configuration (it re-embeds every memory from "
            "the record beside the serving store), stop the workers, run `memstream rebuild --switch`, then start "
            f"them with {embedder.name!r}. To keep {built_with!r}, set MEMSTREAM_EMBEDDING_MODEL to it."
        )
    return cosine


def built_with(store: VectorStore) -> str:
    """The name of the model the store's vectors come from ("" for a store without a fingerprint)."""
    kept = store.scroll(META, SYSTEM_TENANT, limit=1)
    return str(kept[0].payload.get("model", "")) if kept else ""
