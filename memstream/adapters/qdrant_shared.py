"""What the two Qdrant adapters share (qdrant-client's :mod:`qdrant_store` and Qdrant Edge's
:mod:`qdrant_edge_store`): the payload schema, the conditions of the tenant filter, and the
tenant-scoped reads and writes, written once over a few engine primitives each adapter supplies.

The filter is built here as plain conditions and translated by each adapter into its engine's
types, so that which points a tenant's query can see is decided in one place. Importing this module
loads neither qdrant-client nor the Edge bindings."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, Mapping, Sequence, TypeVar

from memstream.ports import StoreFilter, StoreHit, StorePoint, Vector

COLLECTION_PREFIX = "memstream_"
KEYWORD_FIELDS = (
    "tenant_id",
    "conversation_id",
    "subject",
    "type",
    "role",
    "turn_id",
    "turn_ids",
    "card_id",
    "scene_id",
    "host_id",
    "session_id",
    "entity_triggers",  # graph expansion's entity edges filter on it (unindexed: 130 ms a search at 100k cards)
)
FLOAT_FIELDS = ("event_ts", "retired_ts", "created_ts")  # consolidation runs see the store as of their start
INT_FIELDS = ("seq",)
BOOL_FIELDS = ("retired", "fresh")  # consolidation: out of the current view; raw turns not yet flushed

SCROLL_PAGE = 256
# Hits of equal score come back in the engine's storage order, which a rebuild or a restore changes:
# a few more are fetched and equal scores ordered by point id, so the same points answer the same
# query however the store was built (tied texts beyond the margin at the cut still follow storage order).
TIE_MARGIN = 16


def with_tie_margin(limit: int) -> int:
    """The limit asked of the engine (a limit below 1 goes as it is, for the engine to refuse)."""
    return limit + TIE_MARGIN if limit > 0 else limit


def canonical_order(hits: list[StoreHit], limit: int) -> list[StoreHit]:
    """The best ``limit`` hits, equal scores ordered by point id."""
    return sorted(hits, key=lambda h: (-h.score, h.id))[:limit]


def dimension_mismatch(full: str, stored: object, dim: int) -> ValueError:
    """The error for a collection whose vectors another embedder made: upserts and searches would
    fail later, or (same size, another model) mix vectors that cannot be compared."""
    return ValueError(
        f"{full} holds {stored}-d vectors, not {dim}-d: the store was built with another embedder. "
        "Set MEMSTREAM_EMBEDDING_MODEL to the one it was built with, or use a new store "
        "(MEMSTREAM_DATA_DIR, or another Qdrant server)"
    )


def dense_of(vector: Any) -> list[float]:
    """The unnamed dense vector of a returned point: a bare list, or the "" entry when it has named ones too."""
    return list(vector[""] if isinstance(vector, dict) else vector)


def settable(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields for set_payload as a plain dict; moving a point to another tenant is refused."""
    if "tenant_id" in fields:
        raise ValueError("set_payload cannot change a point's tenant_id")
    return dict(fields)


# The conditions of a filter, engine-neutral.
@dataclass(frozen=True)
class Equals:
    key: str
    value: str | int | bool


@dataclass(frozen=True)
class AnyOf:
    key: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class IsNull:
    """Qdrant's IsNull: the key is present with a null value (or an array holding a null); a
    missing key does NOT match, in every engine."""

    key: str


@dataclass(frozen=True)
class Between:
    key: str
    lo: float | None
    hi: float | None


@dataclass(frozen=True)
class HasIds:
    ids: tuple[str, ...]


Condition = Equals | AnyOf | IsNull | Between | HasIds


@dataclass(frozen=True)
class Conditions:
    must: tuple[Condition, ...]
    must_not: tuple[Condition, ...]


def tenant_conditions(
    tenant_id: str | None, where: StoreFilter | None, *, has_id: str | Sequence[str] | None = None
) -> Conditions:
    """Every store query's filter: the tenant first (required), then ``where``, then the ids."""
    if not tenant_id:
        raise ValueError("every store query is scoped by a tenant_id")
    must: list[Condition] = [Equals("tenant_id", tenant_id)]
    must_not: list[Condition] = []
    if where is not None:
        must += [Equals(key, value) for key, value in where.equals.items()]
        must += [AnyOf(key, tuple(values)) for key, values in where.any_of.items()]
        must += [IsNull(key) for key in where.is_null]
        must += [Between(key, lo, hi) for key, (lo, hi) in where.range_ts.items()]
        must_not += [Equals(key, value) for key, value in where.not_equals.items()]
        must_not += [Between(key, lo, hi) for key, (lo, hi) in where.not_range_ts.items()]
    if has_id is not None:
        must.append(HasIds((has_id,) if isinstance(has_id, str) else tuple(has_id)))
    return Conditions(tuple(must), tuple(must_not))


Handle = TypeVar("Handle")  # what the engine calls a collection: a name, an open shard
Filter = TypeVar("Filter")  # the engine's filter type
T = TypeVar("T")


class TenantScopedStore(Generic[Handle, Filter]):
    """scroll, count, set_payload and delete of the VectorStore port, each scoped by the engine's
    own filter on the tenant (not a check in Python), over the primitives below."""

    _lock: contextlib.AbstractContextManager[Any]
    _patch_lock: contextlib.AbstractContextManager[Any]  # across set_payload's read and write
    _bm25: Any  # memstream.adapters.bm25.Bm25Encoder (its module loads the Edge bindings)
    _sparse_name: str  # the BM25 sparse vector's name in a collection (bm25.BM25_VECTOR)
    _ready: set[str]  # collections (full names) ensure_collections has made ready

    # -- primitives ---------------------------------------------------------------------------
    def _name(self, collection: str) -> str:
        """The collection's name in the engine (prefixed)."""
        raise NotImplementedError

    def _prepare(self, collection: str, full: str, dim: int) -> None:
        """Make the collection ready for ``dim``-d vectors: created, or checked and brought up to date."""
        raise NotImplementedError

    def _each(self, call: Callable[[T], Any], items: Sequence[T]) -> None:
        """``call`` on every item: one after another here; a server's store runs them side by side."""
        for item in items:
            call(item)

    def _filter(self, conditions: Conditions) -> Filter:
        raise NotImplementedError

    def _open(self, collection: str) -> Handle | None:
        """The collection, or None where it does not exist."""
        raise NotImplementedError

    def _require(self, collection: str) -> Handle:
        """The collection, for a read that fails on a missing one."""
        raise NotImplementedError

    def _count_matching(self, handle: Handle, flt: Filter | None) -> int:
        raise NotImplementedError

    def _page(
        self, handle: Handle, flt: Filter, offset: Any, limit: int, with_vectors: bool
    ) -> tuple[list[StoreHit], Any]:
        """One page of a scroll (scores 1.0) and the offset of the next (None: the last page)."""
        raise NotImplementedError

    def _set_matching(self, handle: Handle, flt: Filter, fields: dict[str, Any]) -> None:
        raise NotImplementedError

    def _overwrite_matching(self, handle: Handle, flt: Filter, payload: dict[str, Any]) -> None:
        raise NotImplementedError

    def _delete_matching(self, handle: Handle, flt: Filter) -> None:
        raise NotImplementedError

    def _sparse(self, indices: list[int], values: list[float]) -> Any:
        """The engine's sparse vector."""
        raise NotImplementedError

    def _check_lexical(self, collection: str) -> None:
        """Raise ValueError where the collection has no BM25 sparse vector (made before BM25 support)."""
        raise NotImplementedError

    def _nearest(
        self, collection: str, flt: Filter, query: Any, using: str | None, limit: int, with_vectors: bool
    ) -> list[StoreHit]:
        """The points nearest ``query`` (dense, or the sparse vector named ``using``) that pass ``flt``."""
        raise NotImplementedError

    def point_vector(self, p: StorePoint, lexical: bool = True) -> list[float] | dict[str, Any]:
        """A point's dense vector, with its BM25 sparse vector where it has text with terms (and the
        collection has the sparse vector: ``lexical``)."""
        dense = list(map(float, p.vector))
        if lexical and p.text:
            indices, values = self._bm25.document(p.text)
            if indices:  # a text of stopwords only has no terms to index
                return {"": dense, self._sparse_name: self._sparse(indices, values)}
        return dense  # no bm25 vector: the point is simply not lexically searchable

    # -- the port -----------------------------------------------------------------------------
    def ensure_collections(self, names: Sequence[str], dim: int) -> None:
        with self._lock:
            pending = {self._name(name): name for name in names if self._name(name) not in self._ready}

            def prepare(full: str) -> None:
                self._prepare(pending[full], full, dim)
                self._ready.add(full)

            self._each(prepare, list(pending))

    def tenant_filter(
        self, tenant_id: str | None, where: StoreFilter | None, *, has_id: str | Sequence[str] | None = None
    ) -> Filter:
        return self._filter(tenant_conditions(tenant_id, where, has_id=has_id))

    def search(
        self,
        collection: str,
        tenant_id: str,
        vector: Vector,
        *,
        where: StoreFilter | None = None,
        limit: int = 10,
        with_vectors: bool = False,
    ) -> list[StoreHit]:
        flt = self.tenant_filter(tenant_id, where)
        hits = self._nearest(collection, flt, list(map(float, vector)), None, with_tie_margin(limit), with_vectors)
        return canonical_order(hits, limit)

    def search_text(
        self,
        collection: str,
        tenant_id: str,
        text: str,
        *,
        where: StoreFilter | None = None,
        limit: int = 10,
        with_vectors: bool = False,
    ) -> list[StoreHit]:
        flt = self.tenant_filter(tenant_id, where)
        self._check_lexical(collection)
        indices, values = self._bm25.query(text)
        if not indices:  # stopwords or punctuation only: nothing can match
            return []
        query = self._sparse(indices, values)
        return canonical_order(
            self._nearest(collection, flt, query, self._sparse_name, with_tie_margin(limit), with_vectors), limit
        )

    def scroll(
        self,
        collection: str,
        tenant_id: str,
        *,
        where: StoreFilter | None = None,
        limit: int = 1000,
        with_vectors: bool = False,
    ) -> list[StoreHit]:
        flt = self.tenant_filter(tenant_id, where)
        out: list[StoreHit] = []
        offset = None
        with self._lock:
            handle = self._require(collection)
            while len(out) < limit:
                page, offset = self._page(handle, flt, offset, min(SCROLL_PAGE, limit - len(out)), with_vectors)
                out += page
                if offset is None:
                    break
        return out

    def count(self, collection: str, tenant_id: str | None = None, *, where: StoreFilter | None = None) -> int:
        # Without a tenant the count is of the whole collection (``where`` unused): operators' figures.
        flt = self.tenant_filter(tenant_id, where) if tenant_id is not None else None
        with self._lock:
            handle = self._open(collection)
            return 0 if handle is None else self._count_matching(handle, flt)

    def scan(self, collection: str, *, with_vectors: bool = False) -> Iterator[StoreHit]:
        offset = None
        while True:
            with self._lock:  # a page at a time: writers go on between pages
                handle = self._open(collection)
                if handle is None:
                    return
                page, offset = self._page(handle, None, offset, SCROLL_PAGE, with_vectors)  # type: ignore[arg-type]
            yield from page
            if offset is None:
                return

    def retrieve(
        self, collection: str, tenant_id: str, point_ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[StoreHit]:
        ids = list(dict.fromkeys(point_ids))
        if not ids:
            return []
        flt = self.tenant_filter(tenant_id, None, has_id=ids)  # ids of another tenant are not found
        out: list[StoreHit] = []
        offset = None
        with self._lock:
            handle = self._open(collection)
            if handle is None:
                return []
            while True:
                page, offset = self._page(handle, flt, offset, SCROLL_PAGE, with_vectors)
                out += page
                if offset is None:
                    return out

    def set_payload(self, collection: str, tenant_id: str, point_id: str, fields: Mapping[str, Any]) -> bool:
        fields = settable(fields)
        flt = self.tenant_filter(tenant_id, None, has_id=point_id)
        with self._lock, self._patch_lock:  # held across the read and the write: the answer and the update agree
            handle = self._open(collection)
            if handle is None:
                return False
            if any(v is None for v in fields.values()):
                # A set would drop a None key (merge semantics): overwrite the merged payload to store a JSON null.
                points, _ = self._page(handle, flt, None, 1, False)
                if not points:
                    return False
                self._overwrite_matching(handle, flt, {**points[0].payload, **fields})
                return True
            if not self._count_matching(handle, flt):
                return False
            if fields:
                self._set_matching(handle, flt, fields)
            return True

    def delete(self, collection: str, tenant_id: str, point_ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(point_ids))
        if not ids:
            return 0
        flt = self.tenant_filter(tenant_id, None, has_id=ids)  # ids of another tenant stay
        with self._lock:
            handle = self._open(collection)
            if handle is None:
                return 0
            n = self._count_matching(handle, flt)
            if n:
                self._delete_matching(handle, flt)
            return n
