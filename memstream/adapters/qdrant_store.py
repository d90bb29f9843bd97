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
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from memstream.adapters import generations as gen
from memstream.adapters import qdrant_shared as shared
from memstream.adapters.bm25 import BM25_VECTOR, Bm25Encoder
from memstream.adapters.qdrant_collections import ServerCollections
from memstream.adapters.qdrant_nodes import QdrantNodes, split_urls
from memstream.ports import StoreHit, StorePoint, StoreUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerLayout:
    """How a server makes a collection memstream creates (an existing one keeps its own)."""

    shards: int | None = None  # None: the server's default, one per node at creation
    replication_factor: int = 2  # nodes holding each shard; a single node holds the one copy it can
    write_consistency: int = 1  # replicas that must acknowledge a write: 1 keeps writing with a node down


class QdrantStore(ServerCollections, shared.TenantScopedStore[str, models.Filter]):
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

    def _has_bm25(self, full: str) -> bool:
        known = self._lexical.get(full)
        if known is None:
            sparse = self._info(full).config.params.sparse_vectors or {}
            known = self._lexical[full] = BM25_VECTOR in sparse
        return known

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
            with self._present(full):
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
        with self._lock, self._present(self._name(collection)):
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
        if self._client.collection_exists(full):
            return full
        if not self.embedded and full in self._ready:
            raise self._gone(full)
        return None

    def _gone(self, full: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"{full} is gone from the server (deleted?): held until it is back (memstream rebuild or restore)"
        )

    @contextlib.contextmanager
    def _present(self, full: str) -> Iterator[None]:
        """A collection this store made ready that the server no longer has is an outage (a disaster
        the operator recovers from), not bad input: the stages hold their messages until it is back."""
        try:
            yield
        except UnexpectedResponse as exc:
            if exc.status_code == 404 and not self.embedded and full in self._ready:
                raise self._gone(full) from exc
            raise

    def _require(self, collection: str) -> str:
        return self._name(collection)  # the client says so when it is missing

    def _count_matching(self, full: str, flt: models.Filter | None) -> int:
        with self._present(full):
            return int(self._client.count(full, count_filter=flt, exact=True).count)

    def _page(
        self, full: str, flt: models.Filter, offset: Any, limit: int, with_vectors: bool
    ) -> tuple[list[StoreHit], Any]:
        with self._present(full):
            points, offset = self._client.scroll(
                full, scroll_filter=flt, limit=limit, offset=offset, with_payload=True, with_vectors=with_vectors
            )
        return [_hit(p, 1.0, with_vectors) for p in points], offset

    def _set_matching(self, full: str, flt: models.Filter, fields: dict[str, Any]) -> None:
        with self._present(full):
            self._client.set_payload(full, payload=fields, points=flt, wait=True)

    def _overwrite_matching(self, full: str, flt: models.Filter, payload: dict[str, Any]) -> None:
        with self._present(full):
            self._client.overwrite_payload(full, payload=payload, points=flt, wait=True)

    def _delete_matching(self, full: str, flt: models.Filter) -> None:
        with self._present(full):
            self._client.delete(full, points_selector=models.FilterSelector(filter=flt), wait=True)

    def close(self) -> None:
        with self._lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._client.close()


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
