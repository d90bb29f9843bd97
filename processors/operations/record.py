"""The durable record of the store, kept by the store's own writes: :class:`RecordedStore` puts each
mutation of a memory collection in the record (``memory.record``, compacted, one entry per point)
before it touches the store, so the store never holds a point the record lacks, and a store lost
or replaced is rebuilt from the record (``memstream rebuild``).

A delete's tombstone goes first too: a forget interrupted between the two leaves the point in the
store until its redelivery erases it again, and its text leaves the record either way."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Mapping, Sequence

from memstream.ports import MemoryRecord, StorePoint, VectorStore
from memstream.processors.write.index import COLLECTIONS
from memstream.schemas.record import StoredPoint, record_key

# The memory collections; ``meta`` (the embedder's fingerprint) belongs to one store and is made anew
# by whoever builds one.
RECORDED = frozenset(COLLECTIONS)


def record_entry(
    collection: str,
    point_id: str,
    payload: Mapping[str, Any],
    vector: Sequence[float] | None = None,
    embedder: str | None = None,
) -> tuple[str, bytes]:
    """The record's key and value for a point in this state."""
    point = StoredPoint(
        tenant_id=payload["tenant_id"],
        collection=collection,
        point_id=point_id,
        payload=dict(payload),
        vector=None if vector is None else [float(x) for x in vector],
        embedder=None if vector is None else embedder,
    )
    return point.key, point.to_bytes()


class RecordedStore:
    """The vector store with every write of a memory collection recorded first. Reads, and writes of
    the store's own ``meta``, go straight to the store. ``vectors``: keep the vectors (made by
    ``embedder``) in the record too."""

    def __init__(self, store: VectorStore, record: MemoryRecord, *, vectors: bool = False, embedder: str = ""):
        self._store = store
        self._record = record
        self._vectors = vectors
        self._embedder = embedder
        # set_payload records the point as it will be (read, merged, recorded, then set): one at a
        # time in this process, so two updates of one point cannot record each other's stale half.
        self._patch_lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _entry(self, collection: str, point_id: str, payload: Mapping[str, Any], vector: Any) -> tuple[str, bytes]:
        kept = vector if self._vectors and vector is not None else None
        return record_entry(collection, point_id, payload, kept, self._embedder)

    def upsert(self, collection: str, points: Sequence[StorePoint], *, only_new: bool = False) -> None:
        if collection in RECORDED and points:
            # An insert-only write leaves a point that exists as it is: only the new ones are recorded.
            written = self._absent(collection, points) if only_new else points
            if written:
                self._record.write([self._entry(collection, p.id, p.payload, p.vector) for p in written])
        self._store.upsert(collection, points, only_new=only_new)

    def _absent(self, collection: str, points: Sequence[StorePoint]) -> list[StorePoint]:
        by_tenant: dict[str, list[StorePoint]] = defaultdict(list)
        for p in points:
            by_tenant[p.payload["tenant_id"]].append(p)
        absent: list[StorePoint] = []
        for tenant, group in by_tenant.items():
            present = {hit.id for hit in self._store.retrieve(collection, tenant, [p.id for p in group])}
            absent += [p for p in group if p.id not in present]
        return absent

    def set_payload(self, collection: str, tenant_id: str, point_id: str, fields: Mapping[str, Any]) -> bool:
        if collection not in RECORDED or "tenant_id" in fields:  # the store refuses a tenant change itself
            return self._store.set_payload(collection, tenant_id, point_id, fields)
        with self._patch_lock:
            hits = self._store.retrieve(collection, tenant_id, [point_id], with_vectors=self._vectors)
            if not hits:
                return False
            self._record.write([self._entry(collection, point_id, {**hits[0].payload, **fields}, hits[0].vector)])
            return self._store.set_payload(collection, tenant_id, point_id, fields)

    def delete(self, collection: str, tenant_id: str, point_ids: Sequence[str]) -> int:
        if collection in RECORDED and point_ids:
            self._record.write([(record_key(tenant_id, collection, i), None) for i in dict.fromkeys(point_ids)])
        return self._store.delete(collection, tenant_id, point_ids)

    def close(self) -> None:
        try:
            self._record.close()
        finally:
            self._store.close()
