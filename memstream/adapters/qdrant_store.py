"""VectorStore port over qdrant-client: a Qdrant server by URL, or the embedded local store.

Every read is filtered by ``tenant_id`` here, below the processors, so no caller can forget it.
The embedded store locks its folder to one process: scaled deployments use a Qdrant server.

On a server (one node or a cluster; ``QdrantNodes`` fails over between the URLs given) collections
are made with the :class:`ServerLayout`: automatic sharding over ``shards`` shards, each held by
``replication_factor`` nodes, a write acknowledged once ``write_consistency`` replicas have it. Tenants
share the collections: the ``tenant_id`` payload index is a tenant index (``is_tenant``: a tenant's
points are stored together), every read filters on it (docs/capacity.md: why not a shard per tenant).

BM25: every collection has the unnamed dense vector ("") plus a named sparse vector ``bm25`` with
the IDF modifier; points upserted with text carry both (``{"": dense, "bm25": sparse}``). Qdrant
cannot add a vector to an existing collection, so a collection created before BM25 support stays
dense-only: texts upserted into it are not indexed (a warning at ensure_collections) and
search_text on it raises a ValueError.

Generations (:mod:`memstream.adapters.generations`): a worker's store (``generation=None``) addresses
``<prefix><name>``, on a server an alias of the active generation's collection: a collection it
lacks is created in the active generation, with its alias (a store made before generations, whose
collections are named ``<prefix><name>`` themselves, stays as it is). ``generation=N`` addresses
generation N's own collections, for building it beside the active one.

set_payload: Qdrant's set_payload merges like the server's ``merge_map``, where a null value REMOVES
the key (local mode does the same). Fields holding a None are therefore written by overwrite_payload
with the point's payload read and merged first: atomic within this store (its lock), but against a
Qdrant server another writer's change to the same point between the read and the write is lost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from memstream.adapters import generations as gen
from memstream.adapters import qdrant_shared as shared
from memstream.adapters.bm25 import BM25_VECTOR, Bm25Encoder
from memstream.adapters.qdrant_nodes import QdrantNodes, split_urls
from memstream.ports import StoreHit, StorePoint, StoreUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerLayout:
    """How a server makes a collection memstream creates (an existing one keeps its own)."""

    shards: int | None = None  # None: the server's default, one per node at creation
    replication_factor: int = 2  # nodes holding each shard; a single node holds the one copy it can
    write_consistency: int = 1  # replicas that must acknowledge a write: 1 keeps writing with a node down


class QdrantStore(shared.TenantScopedStore[str, models.Filter]):
    def __init__(
        self,
        *,
        url: str | None = None,
        api_key: str | None = None,
        path: Path | None = None,
        layout: ServerLayout | None = None,
        prefix: str = shared.COLLECTION_PREFIX,
        generation: int | None = None,
    ):
        self._client: Any
        self._layout = layout or ServerLayout()
        self._prefix = prefix  # a server's: collections are named by ``generations``' rule
        self._generation = generation  # None: the active one (through aliases on a server)
        self._aliased = bool(url) and generation is None
        # The read-merge-write of set_payload is atomic within this process (see the module notes).
        self._patch_lock = threading.RLock()
        self._lock: contextlib.AbstractContextManager[Any]
        if url:
            self._client = QdrantNodes(split_urls(url), api_key=api_key)
            self.location = url
            self.embedded = False
            self._lock = contextlib.nullcontext()  # the HTTP client is thread-safe; the server orders writes
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
        self._lexical: dict[str, bool] = {}  # collection -> has the bm25 sparse vector (asked once)
        self._bm25 = Bm25Encoder()
        self._sparse_name = BM25_VECTOR

    @property
    def client(self) -> Any:
        """qdrant-client (QdrantNodes on a server), for managing generations."""
        return self._client

    def _name(self, collection: str) -> str:
        if self._generation is None:
            return self._prefix + collection
        return gen.collection_prefix(self._prefix, self._generation) + collection

    def drop_collection(self, collection: str) -> bool:
        """Delete the collection (False: there was none)."""
        full = self._name(collection)
        with self._lock:
            if not self._client.collection_exists(full):
                return False
            self._client.delete_collection(full)
            self._ready.discard(full)
            self._lexical.pop(full, None)
            return True

    def _prepare(self, collection: str, full: str, dim: int) -> None:
        self._settling(lambda: self._ensure(full, dim))

    def _ensure(self, full: str, dim: int) -> None:
        if not self._client.collection_exists(full):
            self._create_active(full, dim) if self._aliased else self._create(full, dim)
        else:
            vectors = self._info(full).config.params.vectors
            stored = vectors.size if isinstance(vectors, models.VectorParams) else None
            if stored != dim:
                raise shared.dimension_mismatch(full, stored, dim)
            if not self._has_bm25(full):
                log.warning(
                    "%s predates BM25 support: texts are not indexed and search_text fails; "
                    "recreate the collection to search it lexically",
                    full,
                )
        if not self.embedded:  # payload indexes only exist on a server
            self._create_indexes(full)

    def _settling(self, call: Callable[[], None], wait_s: float = 30.0) -> None:
        """``call`` (idempotent), again while a collection just made settles in a cluster: consensus
        commits it before every node has it (404 for a moment) and before its shards serve (every
        node answering 500, which QdrantNodes reports as StoreUnavailable). Embedded: once."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return call()
            except (StoreUnavailable, UnexpectedResponse) as exc:
                settling = isinstance(exc, StoreUnavailable) or exc.status_code == 404
                if self.embedded or not settling or time.monotonic() >= deadline:
                    raise
                log.info("collection settling in the cluster, asking again: %s", exc)
                time.sleep(0.3)

    def _create(self, full: str, dim: int) -> None:
        layout = {}
        if not self.embedded:
            layout = {
                "shard_number": self._layout.shards,
                "replication_factor": self._layout.replication_factor,
                "write_consistency_factor": self._layout.write_consistency,
            }
        try:
            self._client.create_collection(
                full,
                vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE),
                sparse_vectors_config={BM25_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                **layout,
            )
        except Exception:
            # Workers of a scaled store group start together: another one may have made it meanwhile
            # (in a cluster, its creation reaches this node a moment later).
            deadline = time.monotonic() + 30.0
            while not self._client.collection_exists(full):
                if self.embedded or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
            vectors = self._info(full).config.params.vectors
            if not isinstance(vectors, models.VectorParams) or vectors.size != dim:
                raise shared.dimension_mismatch(full, getattr(vectors, "size", None), dim) from None

    def _create_active(self, alias: str, dim: int) -> None:
        """A worker's missing collection, made in the active generation (workers starting together
        agree on it: the one whose aliases exist, else 1) and its name aliased to it; in a store made
        before generations, made under its own name as before."""
        sets = gen.server_sets(self._client, self._prefix)
        active, name = sets.active, alias[len(self._prefix) :]
        if active == 0:
            return self._create(alias, dim)
        self._create(gen.collection_prefix(self._prefix, active) + name, dim)
        if not self._client.collection_exists(alias):  # another worker may have aliased it meanwhile
            gen.point_aliases(self._client, self._prefix, active, {name}, replace=set())
        log.info("made %s, generation %d of %s", alias, active, self._prefix)
        return None

    def _info(self, full: str, wait_s: float = 30.0) -> models.CollectionInfo:
        """The collection's description. In a cluster a collection another worker just created is
        committed by consensus before every node has it: a node may say it exists and still answer
        404 for a moment, so a server is asked again for up to ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self._client.get_collection(full)
            except UnexpectedResponse as exc:
                if self.embedded or exc.status_code != 404 or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def _has_bm25(self, full: str) -> bool:
        known = self._lexical.get(full)
        if known is None:
            sparse = self._info(full).config.params.sparse_vectors or {}
            known = self._lexical[full] = BM25_VECTOR in sparse
        return known

    def _create_indexes(self, full: str) -> None:
        """The payload indexes the collection lacks (a collection made by an older version gets the
        ones added since)."""
        schema = models.PayloadSchemaType
        have = set(self._info(full).payload_schema or {})
        for fields, kind in (
            (shared.KEYWORD_FIELDS, schema.KEYWORD),
            (shared.FLOAT_FIELDS, schema.FLOAT),
            (shared.INT_FIELDS, schema.INTEGER),
            (shared.BOOL_FIELDS, schema.BOOL),
        ):
            for field in fields:
                if field not in have:
                    self._client.create_payload_index(full, field, field_schema=_index_schema(field, kind))

    def upsert(self, collection: str, points: Sequence[StorePoint], *, only_new: bool = False) -> None:
        if not points:
            return
        mode = models.UpdateMode.INSERT_ONLY if only_new else None  # Qdrant 1.16 or later
        full = self._name(collection)
        with self._lock:
            lexical = any(p.text for p in points) and self._has_bm25(full)
            structs = [
                models.PointStruct(id=p.id, vector=self.point_vector(p, lexical), payload=dict(p.payload))
                for p in points
            ]
            self._client.upsert(full, points=structs, wait=True, update_mode=mode)

    # -- the primitives of TenantScopedStore's search and search_text --------------------------
    def _sparse(self, indices: list[int], values: list[float]) -> models.SparseVector:
        return models.SparseVector(indices=indices, values=values)

    def _check_lexical(self, collection: str) -> None:
        full = self._name(collection)
        with self._lock:
            if not self._has_bm25(full):
                raise ValueError(
                    f"{full} predates BM25 support (no {BM25_VECTOR} sparse vector): recreate it to search it lexically"
                )

    def _nearest(
        self, collection: str, flt: models.Filter, query: Any, using: str | None, limit: int, with_vectors: bool
    ) -> list[StoreHit]:
        with self._lock:
            result = self._client.query_points(
                self._name(collection),
                query=query,
                using=using,
                query_filter=flt,
                limit=limit,
                with_payload=True,
                with_vectors=with_vectors,
            )
        return [_hit(p, float(p.score), with_vectors) for p in result.points]

    # -- the primitives of TenantScopedStore (scroll, count, set_payload, delete) ---------------
    def _filter(self, conditions: shared.Conditions) -> models.Filter:
        return models.Filter(
            must=[_condition(c) for c in conditions.must],
            must_not=[_condition(c) for c in conditions.must_not] or None,
        )

    def _open(self, collection: str) -> str | None:
        full = self._name(collection)
        return full if self._client.collection_exists(full) else None

    def _require(self, collection: str) -> str:
        return self._name(collection)  # the client says so when it is missing

    def _count_matching(self, full: str, flt: models.Filter | None) -> int:
        return int(self._client.count(full, count_filter=flt, exact=True).count)

    def _page(
        self, full: str, flt: models.Filter, offset: Any, limit: int, with_vectors: bool
    ) -> tuple[list[StoreHit], Any]:
        points, offset = self._client.scroll(
            full, scroll_filter=flt, limit=limit, offset=offset, with_payload=True, with_vectors=with_vectors
        )
        return [_hit(p, 1.0, with_vectors) for p in points], offset

    def _set_matching(self, full: str, flt: models.Filter, fields: dict[str, Any]) -> None:
        self._client.set_payload(full, payload=fields, points=flt, wait=True)

    def _overwrite_matching(self, full: str, flt: models.Filter, payload: dict[str, Any]) -> None:
        self._client.overwrite_payload(full, payload=payload, points=flt, wait=True)

    def _delete_matching(self, full: str, flt: models.Filter) -> None:
        self._client.delete(full, points_selector=models.FilterSelector(filter=flt), wait=True)

    def close(self) -> None:
        with self._lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._client.close()


def _index_schema(field: str, kind: models.PayloadSchemaType) -> models.PayloadSchemaType | models.KeywordIndexParams:
    """The tenant key is a tenant index: the server keeps each tenant's points together, so a
    tenant's filtered search reads its own points, not every tenant's."""
    if field == "tenant_id":
        return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
    return kind


def _hit(p: models.ScoredPoint | models.Record, score: float, with_vectors: bool) -> StoreHit:
    return StoreHit(str(p.id), score, p.payload or {}, shared.dense_of(p.vector) if with_vectors else None)


def _condition(c: shared.Condition) -> models.Condition:
    match c:
        case shared.Equals(key, value):
            return models.FieldCondition(key=key, match=models.MatchValue(value=value))
        case shared.AnyOf(key, values):
            return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))
        case shared.IsNull(key):
            return models.IsNullCondition(is_null=models.PayloadField(key=key))
        case shared.Between(key, lo, hi):
            return models.FieldCondition(key=key, range=models.Range(gte=lo, lte=hi))
        case shared.HasIds(ids):
            return models.HasIdCondition(has_id=list(ids))
    raise TypeError(f"not a filter condition: {c!r}")
