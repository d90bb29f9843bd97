"""VectorStore port over qdrant-client: a Qdrant server by URL, or the embedded local store.

Every read is filtered by ``tenant_id`` here, below the processors, so no caller can forget it.
The embedded store locks its folder to one process: scaled deployments use a Qdrant server.
"""

from __future__ import annotations

import logging
import threading
import warnings
from pathlib import Path
from typing import Sequence

from qdrant_client import QdrantClient, models

from memstream.ports import StoreFilter, StoreHit, StorePoint

log = logging.getLogger(__name__)

COLLECTION_PREFIX = "memstream_"
_KEYWORD_FIELDS = ("tenant_id", "conversation_id", "subject", "type", "turn_id", "turn_ids", "host_id", "session_id")
_FLOAT_FIELDS = ("event_ts",)
_INT_FIELDS = ("seq",)


class QdrantStore:
    def __init__(self, *, url: str | None = None, api_key: str | None = None, path: Path | None = None):
        if url:
            self._client = QdrantClient(url=url, api_key=api_key, timeout=30)
            self.location = url
            self.embedded = False
        else:
            if path is None:
                raise ValueError("an embedded Qdrant store needs a path")
            path.mkdir(parents=True, exist_ok=True)
            self._client = QdrantClient(path=str(path))
            self.location = str(path)
            self.embedded = True
        # qdrant-client's local mode is not safe across threads; a lock costs little here.
        self._lock = threading.RLock()
        self._ready: set[str] = set()

    @staticmethod
    def _name(collection: str) -> str:
        return COLLECTION_PREFIX + collection

    def ensure_collections(self, names: Sequence[str], dim: int) -> None:
        with self._lock:
            for name in names:
                full = self._name(name)
                if full in self._ready:
                    continue
                if not self._client.collection_exists(full):
                    self._client.create_collection(
                        full, vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE)
                    )
                    if not self.embedded:  # payload indexes only exist on a server
                        self._create_indexes(full)
                self._ready.add(full)

    def _create_indexes(self, full: str) -> None:
        schema = models.PayloadSchemaType
        for field in _KEYWORD_FIELDS:
            self._client.create_payload_index(full, field, field_schema=schema.KEYWORD)
        for field in _FLOAT_FIELDS:
            self._client.create_payload_index(full, field, field_schema=schema.FLOAT)
        for field in _INT_FIELDS:
            self._client.create_payload_index(full, field, field_schema=schema.INTEGER)

    def upsert(self, collection: str, points: Sequence[StorePoint]) -> None:
        if not points:
            return
        structs = [models.PointStruct(id=p.id, vector=list(map(float, p.vector)), payload=dict(p.payload)) for p in points]
        with self._lock:
            self._client.upsert(self._name(collection), points=structs, wait=True)

    def search(self, collection: str, tenant_id: str, vector: Sequence[float], *,
               where: StoreFilter | None = None, limit: int = 10) -> list[StoreHit]:
        with self._lock:
            result = self._client.query_points(
                self._name(collection), query=list(map(float, vector)), query_filter=_filter(tenant_id, where),
                limit=limit, with_payload=True,
            )
        return [StoreHit(str(p.id), float(p.score), p.payload or {}) for p in result.points]

    def scroll(self, collection: str, tenant_id: str, *, where: StoreFilter | None = None,
               limit: int = 1000) -> list[StoreHit]:
        out: list[StoreHit] = []
        offset = None
        with self._lock:
            while len(out) < limit:
                points, offset = self._client.scroll(
                    self._name(collection), scroll_filter=_filter(tenant_id, where),
                    limit=min(256, limit - len(out)), offset=offset, with_payload=True,
                )
                out += [StoreHit(str(p.id), 1.0, p.payload or {}) for p in points]
                if offset is None:
                    break
        return out

    def count(self, collection: str, tenant_id: str | None = None, *, where: StoreFilter | None = None) -> int:
        full = self._name(collection)
        with self._lock:
            if not self._client.collection_exists(full):
                return 0
            flt = _filter(tenant_id, where) if tenant_id is not None else None
            return int(self._client.count(full, count_filter=flt, exact=True).count)

    def close(self) -> None:
        with self._lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._client.close()


def _filter(tenant_id: str, where: StoreFilter | None) -> models.Filter:
    if not tenant_id:
        raise ValueError("every store query is scoped by a tenant_id")
    must: list[models.Condition] = [models.FieldCondition(key="tenant_id", match=models.MatchValue(value=tenant_id))]
    if where is not None:
        for key, value in where.equals.items():
            must.append(models.FieldCondition(key=key, match=models.MatchValue(value=value)))
        for key, values in where.any_of.items():
            must.append(models.FieldCondition(key=key, match=models.MatchAny(any=list(values))))
        for key in where.is_null:
            must.append(models.IsNullCondition(is_null=models.PayloadField(key=key)))
        for key, (lo, hi) in where.range_ts.items():
            must.append(models.FieldCondition(key=key, range=models.Range(gte=lo, lte=hi)))
    return models.Filter(must=must)
