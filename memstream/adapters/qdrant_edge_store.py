"""VectorStore port over Qdrant Edge (``qdrant-edge-py``): Qdrant's engine in-process.

Same contract as :mod:`memstream.adapters.qdrant_store` (collections prefixed ``memstream_``, every
read filtered by ``tenant_id``, the same :class:`StoreFilter` semantics), but with the real engine:
payload indexes, HNSW, a write-ahead log. One Edge shard per collection, each in its own folder
under ``path``. Like qdrant-client's local mode, the folder is locked to one process (``.lock``);
a store of a generation other than the active one (:mod:`memstream.adapters.generations`) holds
that generation's lock only, so it can be built beside a serving worker.

Engine notes (qdrant-edge-py 0.9):
- Upserts are applied synchronously (visible to the next read) and written to the WAL, so they
  survive a crash without flush(); close() flushes the segments to disk.
- HNSW graphs are only built by :meth:`optimize` (the engine runs no background optimizer);
  until then a search is exact over the points that pass the payload-indexed filter.
- ``MatchValue(True)`` is read as the integer 1 by the bindings; booleans go through ``numpy.bool_``.
- BM25: a named sparse vector ``bm25`` with the IDF modifier next to the unnamed dense vector ("").
  Loading a shard with a config that lacks a stored vector fails as "incompatible", so a shard is
  loaded with its sparse vectors omitted (inherited) and a pre-BM25 shard gets the sparse vector
  added by ensure_collections (``create_sparse_vector``): its old points stay dense-only until
  re-upserted with text. search_text on a shard not yet migrated raises a ValueError.
- ``set_payload_by_filter`` merges like the server's ``merge_map``: a null value REMOVES the key.
  set_payload therefore writes fields holding a None with ``overwrite_payload_by_filter`` (the point's
  payload read and merged under the store lock), which keeps an explicit null.
- ``HasIdCondition`` takes a ``set`` of ids (a list is a TypeError); a string id must parse as a UUID.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import qdrant_edge as qe

from memstream.adapters import generations as gen
from memstream.adapters import qdrant_shared as shared
from memstream.adapters.bm25 import BM25_VECTOR, Bm25Encoder
from memstream.ports import StoreHit, StorePoint

log = logging.getLogger(__name__)

_CONFIG_FILE = "edge_config.json"  # written by EdgeShard.create: its presence means "load, don't create"
_INDEXES = (
    [(f, qe.PayloadSchemaType.Keyword) for f in shared.KEYWORD_FIELDS]
    + [(f, qe.PayloadSchemaType.Float) for f in shared.FLOAT_FIELDS]
    + [(f, qe.PayloadSchemaType.Integer) for f in shared.INT_FIELDS]
    + [(f, qe.PayloadSchemaType.Bool) for f in shared.BOOL_FIELDS]
)


class QdrantEdgeStore(shared.TenantScopedStore[qe.EdgeShard, qe.Filter]):
    embedded = True

    def __init__(
        self,
        path: Path,
        *,
        prefix: str = shared.COLLECTION_PREFIX,
        locks: Sequence[str] = (gen.WORKER_LOCK,),
        max_search_threads: int | None = None,
    ):
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.location = str(path)
        self._prefix = prefix
        self._max_search_threads = max_search_threads
        # Fail at once, as qdrant-client's local mode does, rather than on the first collection touched.
        # Same main lock file as qdrant-client local mode: the two adapters never share a folder at once.
        self._lock_files: list[Any] = []  # held until close()
        try:
            for name in locks:
                what = (
                    f"Storage folder {path} is already accessed by another process or store instance; "
                    "an embedded Qdrant Edge store is single-process (use a Qdrant server to scale out)"
                    if name == gen.WORKER_LOCK
                    else f"{prefix}* in {path} is open in another process or store instance"
                )
                self._lock_files.append(gen.take_lock(path / name, what))
        except gen.StoreLocked:
            self._release_locks()
            raise
        if (path / "meta.json").exists():
            log.warning("%s also holds qdrant-client local-mode data, which Qdrant Edge does not read", path)
        self._lock = threading.RLock()
        self._patch_lock = contextlib.nullcontext()  # _lock (held across set_payload) is enough in one process
        self._shards: dict[str, qe.EdgeShard] = {}
        self._ready: set[str] = set()  # ensured: dim checked, payload indexes in place
        self._lexical: set[str] = set()  # open shards that have the bm25 sparse vector
        self._bm25 = Bm25Encoder()
        self._sparse_name = BM25_VECTOR
        self._closed = False

    def _name(self, collection: str) -> str:
        return self._prefix + collection

    def _release_locks(self) -> None:
        while self._lock_files:
            gen.release_lock(self._lock_files.pop())

    def drop_collection(self, collection: str) -> bool:
        """Delete the collection's shard and its folder (False: there was none)."""
        full = self._name(collection)
        with self._lock:
            shard = self._shards.pop(full, None)
            if shard is not None:
                shard.close()
            self._ready.discard(full)
            self._lexical.discard(full)
            folder = self.path / full
            if not folder.is_dir():
                return False
            shutil.rmtree(folder)
            return True

    def _config(self, dim: int, *, sparse: bool) -> qe.EdgeConfig:
        # sparse=False leaves the sparse vectors unspecified: load() then inherits the stored ones.
        bm25 = {BM25_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)} if sparse else None
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine),
            sparse_vectors=bm25,
            max_search_threads=self._max_search_threads,
        )

    def _saved_config(self, full: str) -> dict:
        return json.loads((self.path / full / _CONFIG_FILE).read_text())

    def _shard(self, collection: str, *, dim: int | None = None) -> qe.EdgeShard | None:
        """The open shard; loaded from disk if it exists, created only when ``dim`` is given."""
        full = self._name(collection)
        shard = self._shards.get(full)
        if shard is not None:
            return shard
        if self._closed:
            raise RuntimeError("the store is closed")
        folder = self.path / full
        if (folder / _CONFIG_FILE).exists():
            # With dim, load() checks the stored vectors match (a mismatch raises instead of failing later)
            # and applies max_search_threads; without, the shard keeps the config it was saved with.
            config = self._config(dim, sparse=False) if dim is not None else None
            shard = qe.EdgeShard.load(str(folder), config)
        elif dim is not None:
            shard = qe.EdgeShard.create(str(folder), self._config(dim, sparse=True))
        else:
            return None
        self._shards[full] = shard
        if BM25_VECTOR in self._saved_config(full).get("sparse_vectors", {}):
            self._lexical.add(full)
        return shard

    def _open(self, collection: str) -> qe.EdgeShard | None:
        return self._shard(collection)

    def _require(self, collection: str) -> qe.EdgeShard:
        shard = self._shard(collection)
        if shard is None:
            raise ValueError(f"Collection {self._name(collection)} not found")
        return shard

    def _prepare(self, collection: str, full: str, dim: int) -> None:
        saved = self.path / full / _CONFIG_FILE
        if saved.exists():  # a clear error, also for a shard a read has already opened
            stored = json.loads(saved.read_text()).get("vectors", {}).get("", {}).get("size")
            if stored != dim:
                raise shared.dimension_mismatch(full, stored, dim)
        shard = self._shard(collection, dim=dim)
        assert shard is not None
        have = shard.info().payload_schema
        for field, schema in _INDEXES:
            if field not in have:
                shard.update(qe.UpdateOperation.create_field_index(field, schema))
        if full not in self._lexical:  # a shard created before BM25 support: add the vector
            shard.update(qe.UpdateOperation.create_sparse_vector(BM25_VECTOR, modifier=qe.Modifier.Idf))
            self._lexical.add(full)
            log.info(
                "added the %s sparse vector to %s; its older points are not lexically "
                "searchable until upserted again with text",
                BM25_VECTOR,
                full,
            )

    def upsert(self, collection: str, points: Sequence[StorePoint], *, only_new: bool = False) -> None:
        if not points:
            return
        structs = [qe.Point(p.id, self.point_vector(p), dict(p.payload)) for p in points]  # type: ignore[arg-type]  # stubs too narrow
        mode = qe.UpdateMode.InsertOnly if only_new else None
        with self._lock:
            self._require(collection).update(qe.UpdateOperation.upsert_points(structs, update_mode=mode))

    # -- the primitives of TenantScopedStore's search and search_text --------------------------
    def _sparse(self, indices: list[int], values: list[float]) -> qe.SparseVector:
        return qe.SparseVector(indices, values)

    def _check_lexical(self, collection: str) -> None:
        with self._lock:
            self._require(collection)  # opened, so _lexical knows whether it has the sparse vector
            full = self._name(collection)
            if full not in self._lexical:
                raise ValueError(
                    f"{full} predates BM25 support: call ensure_collections to add its "
                    f"{BM25_VECTOR} sparse vector, then re-upsert the points with text"
                )

    def _nearest(
        self, collection: str, flt: qe.Filter, query: Any, using: str | None, limit: int, with_vectors: bool
    ) -> list[StoreHit]:
        if limit < 1:  # as qdrant-client does; Edge would silently answer nothing
            raise ValueError(f"limit value {limit} is invalid. Must be 1 or larger.")
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(query, using=using) if using else qe.Query.Nearest(query),
            filter=flt,
            with_payload=True,
            with_vector=[""] if with_vectors else False,  # the dense vector only
        )
        with self._lock:
            points = self._require(collection).query(request)
        return [
            StoreHit(str(p.id), float(p.score), p.payload or {}, shared.dense_of(p.vector) if with_vectors else None)
            for p in points
        ]

    # -- the primitives of TenantScopedStore (scroll, count, set_payload, delete) ---------------
    def _filter(self, conditions: shared.Conditions) -> qe.Filter:
        must_not = [_condition(c) for c in conditions.must_not]
        return qe.Filter(must=[_condition(c) for c in conditions.must], must_not=must_not or None)  # type: ignore[arg-type]  # list invariance

    def _count_matching(self, shard: qe.EdgeShard, flt: qe.Filter | None) -> int:
        return int(shard.count(qe.CountRequest(exact=True, filter=flt)))

    def _page(
        self, shard: qe.EdgeShard, flt: qe.Filter, offset: Any, limit: int, with_vectors: bool
    ) -> tuple[list[StoreHit], Any]:
        request = qe.ScrollRequest(
            offset=offset, limit=limit, filter=flt, with_payload=True, with_vector=[""] if with_vectors else False
        )
        points, offset = shard.scroll(request)
        hits = [
            StoreHit(str(p.id), 1.0, p.payload or {}, shared.dense_of(p.vector) if with_vectors else None)
            for p in points
        ]
        return hits, offset

    def _set_matching(self, shard: qe.EdgeShard, flt: qe.Filter, fields: dict[str, Any]) -> None:
        shard.update(qe.UpdateOperation.set_payload_by_filter(flt, fields))

    def _overwrite_matching(self, shard: qe.EdgeShard, flt: qe.Filter, payload: dict[str, Any]) -> None:
        shard.update(qe.UpdateOperation.overwrite_payload_by_filter(flt, payload))

    def _delete_matching(self, shard: qe.EdgeShard, flt: qe.Filter) -> None:
        shard.update(qe.UpdateOperation.delete_points_by_filter(flt))

    def optimize(self, collections: Sequence[str] | None = None) -> bool:
        """Build HNSW graphs / merge segments now, blocking reads and writes until done.

        Edge has no background optimizer: call this after a bulk load or at a quiet time.
        Returns True if any segment was rebuilt.
        """
        with self._lock:
            if collections is None:
                shards = list(self._shards.values())
            else:
                shards = [s for s in (self._shard(c) for c in collections) if s is not None]
            changed = False
            for shard in shards:
                changed = shard.optimize() or changed
            return changed

    def flush(self) -> None:
        """Write pending segment changes to disk (the WAL already makes upserts durable)."""
        with self._lock:
            for shard in self._shards.values():
                shard.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                for full, shard in self._shards.items():
                    try:
                        shard.flush()
                    finally:
                        shard.close()
                    log.debug("closed %s", full)
            finally:
                self._shards.clear()
                self._ready.clear()
                self._lexical.clear()
                self._release_locks()


def _match_value(value: str | int | bool) -> qe.MatchValue:
    # The bindings try str, then int, then bool: a Python bool would be read as 0/1 and then
    # match integers, not booleans. numpy.bool_ is not an int, so it reaches the bool variant.
    return qe.MatchValue(np.bool_(value) if isinstance(value, bool) else value)  # type: ignore[arg-type]  # see above


def _condition(c: shared.Condition) -> Any:
    match c:
        case shared.Equals(key, value):
            return qe.FieldCondition(key, match=_match_value(value))
        case shared.AnyOf(key, values):
            return qe.FieldCondition(key, match=qe.MatchAny(list(values)))  # type: ignore[arg-type]  # one type a key
        case shared.IsNull(key):
            return qe.IsNullCondition(key)
        case shared.Between(key, lo, hi):
            return qe.FieldCondition(key, range=qe.RangeFloat(gte=lo, lte=hi))
        case shared.HasIds(ids):
            return qe.HasIdCondition(set(ids))  # a set: a list is a TypeError
    raise TypeError(f"not a filter condition: {c!r}")
