"""The durable record of the store (``memory.record``, compacted): one message per stored point,
keyed ``<tenant>/<collection>/<point id>``, holding what rebuilds the point (its payload: the texts
it is embedded and indexed by are read from it); a tombstone (no value) for a point deleted or
forgotten. The vector store is a view of it (``memstream rebuild``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import ID_PATTERN, Payload

COLLECTION_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"


def record_key(tenant_id: str, collection: str, point_id: str) -> str:
    return f"{tenant_id}/{collection}/{point_id}"


def parse_record_key(key: str) -> tuple[str, str, str]:
    """``(tenant, collection, point id)`` of a record key (a tombstone has only its key)."""
    parts = key.split("/")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"not a record key <tenant>/<collection>/<point id>: {key!r}")
    return parts[0], parts[1], parts[2]


class StoredPoint(Payload):
    """A point as the store holds it: its payload; its vector only where the record keeps vectors
    (``MEMSTREAM_RECORD_VECTORS``; a rebuild embeds the point's text otherwise)."""

    kind: Literal["stored_point"] = "stored_point"
    tenant_id: str = Field(pattern=ID_PATTERN)
    collection: str = Field(pattern=COLLECTION_PATTERN)
    point_id: str = Field(min_length=1, max_length=64)
    payload: dict[str, Any]
    vector: list[float] | None = None
    embedder: str | None = Field(None, description="The model that made `vector`")

    @property
    def key(self) -> str:
        return record_key(self.tenant_id, self.collection, self.point_id)
