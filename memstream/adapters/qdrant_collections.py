"""How :class:`memstream.adapters.qdrant_store.QdrantStore` makes its collections ready: created with
the server layout (in the active generation, behind its alias, on a server: ``generations``), or
checked and brought up to date (vector size, payload indexes), while a cluster settles."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

from qdrant_client import models
from qdrant_client.http.exceptions import UnexpectedResponse

from memstream.adapters import generations as gen
from memstream.adapters import qdrant_shared as shared
from memstream.adapters.bm25 import BM25_VECTOR
from memstream.ports import StoreUnavailable

log = logging.getLogger("memstream.adapters.qdrant_store")
T = TypeVar("T")


class ServerCollections:
    """The collection-making half of QdrantStore (its client, layout and prefix are the store's)."""

    _client: Any
    _layout: Any  # ServerLayout
    _prefix: str
    _aliased: bool
    embedded: bool

    def _has_bm25(self, full: str) -> bool:
        raise NotImplementedError

    def _prepare(self, collection: str, full: str, dim: int) -> None:
        self._settling(lambda: self._ensure(full, dim))

    def _each(self, call: Callable[[T], Any], items: Sequence[T]) -> None:
        """On a server, side by side: in a cluster each collection and payload index made is a
        consensus round (~0.1-0.3 s), and a worker's first start makes ~100 of them (11-12 s one by one
        on a 3-node cluster, 4-4.5 s side by side); rounds of different collections do not wait for each
        other. Embedded, one after another (its client is not thread-safe)."""
        if self.embedded or len(items) < 2:
            for item in items:
                call(item)
            return
        with ThreadPoolExecutor(min(len(items), 8), thread_name_prefix="qdrant-prepare") as pool:
            for done in [pool.submit(call, item) for item in items]:
                done.result()

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

    def _create_indexes(self, full: str) -> None:
        """The payload indexes the collection lacks (a collection made by an older version gets the
        ones added since)."""
        schema = models.PayloadSchemaType
        have = set(self._info(full).payload_schema or {})
        missing = [
            (field, kind)
            for fields, kind in (
                (shared.KEYWORD_FIELDS, schema.KEYWORD),
                (shared.FLOAT_FIELDS, schema.FLOAT),
                (shared.INT_FIELDS, schema.INTEGER),
                (shared.BOOL_FIELDS, schema.BOOL),
            )
            for field in fields
            if field not in have
        ]
        self._each(
            lambda made: self._client.create_payload_index(full, made[0], field_schema=_index_schema(*made)), missing
        )


def _index_schema(field: str, kind: models.PayloadSchemaType) -> models.PayloadSchemaType | models.KeywordIndexParams:
    """The tenant key is a tenant index: the server keeps each tenant's points together, so a
    tenant's filtered search reads its own points, not every tenant's."""
    if field == "tenant_id":
        return models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
    return kind
