"""A store built from the durable record: entries applied as the record ends up (the latest state of
each point in a batch; a tombstone deletes), each point embedded again with the configured embedder
(unless the record kept a vector of that same model), and the position reached kept in the new
store itself after each batch, so a build killed at any moment goes on from there."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from memstream.ports import Embedder, StorePoint, VectorStore
from memstream.processors.ids import point_id
from memstream.processors.operations.fingerprint import META
from memstream.processors.write.index import COLLECTIONS, embedding_text, lexical_text
from memstream.schemas.record import StoredPoint, parse_record_key

# The build's position lives in ``meta`` under a tenant of its own (no message can name it, and the
# embedder fingerprint's tenant stays the fingerprint's alone).
PROGRESS_TENANT = "_rebuild"
PROGRESS_ID = point_id("rebuild-progress", PROGRESS_TENANT, "", [], "progress")


@dataclass
class Applied:
    upserted: int = 0
    deleted: int = 0
    keys: set[str] = field(default_factory=set)


def apply_entries(store: VectorStore, embedder: Embedder, entries: Sequence[tuple[str, StoredPoint | None]]) -> Applied:
    """Bring ``store`` to the state these record entries (key, point or None) end in."""
    latest: dict[str, StoredPoint | None] = {}
    for key, point in entries:
        latest[key] = point
    upserts: dict[str, list[StoredPoint]] = defaultdict(list)
    deletes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, point in latest.items():
        if point is None:
            tenant, collection, pid = parse_record_key(key)
            deletes[(collection, tenant)].append(pid)
        else:
            upserts[point.collection].append(point)
    applied = Applied(keys=set(latest))
    for collection, points in upserts.items():
        vectors = _vectors(collection, points, embedder)
        store.upsert(
            collection,
            [
                StorePoint(p.point_id, v, p.payload, lexical_text(collection, p.payload))
                for p, v in zip(points, vectors)
            ],
        )
        applied.upserted += len(points)
    for (collection, tenant), ids in deletes.items():
        store.delete(collection, tenant, ids)
        applied.deleted += len(ids)
    return applied


def _vectors(collection: str, points: Sequence[StoredPoint], embedder: Embedder) -> list[Any]:
    """Each point's vector: the record's where the same model made it, else embedded now."""
    vectors: list[Any] = [p.vector if p.vector is not None and p.embedder == embedder.name else None for p in points]
    todo = [i for i, v in enumerate(vectors) if v is None]
    if todo:
        made = embedder.embed([embedding_text(collection, points[i].payload) for i in todo])
        for i, vector in zip(todo, made):
            vectors[i] = vector
    return vectors


@dataclass
class BuildProgress:
    """Where a build is in the record: the next offset of each partition, and what it applied."""

    offsets: dict[int, int] = field(default_factory=dict)
    applied: int = 0
    embedder: str = ""


def load_progress(store: VectorStore) -> BuildProgress | None:
    hits = store.scroll(META, PROGRESS_TENANT, limit=1)
    if not hits:
        return None
    payload = hits[0].payload
    offsets = {int(p): int(o) for p, o in payload.get("offsets", {}).items()}
    return BuildProgress(offsets, int(payload.get("applied", 0)), str(payload.get("embedder", "")))


def save_progress(store: VectorStore, progress: BuildProgress, dim: int) -> None:
    payload = {
        "tenant_id": PROGRESS_TENANT,
        "kind": "rebuild_progress",
        "offsets": {str(p): o for p, o in progress.offsets.items()},
        "applied": progress.applied,
        "embedder": progress.embedder,
    }
    unit = [1.0] + [0.0] * (dim - 1)  # meta's points need a vector; this one is never searched
    store.upsert(META, [StorePoint(PROGRESS_ID, unit, payload)])


def live_counts(latest: Mapping[str, bool]) -> dict[str, int]:
    """Points per collection the record holds: ``latest`` maps each key to whether its last entry is
    a point (False: a tombstone)."""
    counts = dict.fromkeys(COLLECTIONS, 0)
    for key, alive in latest.items():
        if alive:
            collection = parse_record_key(key)[1]
            counts[collection] = counts.get(collection, 0) + 1
    return counts


def count_mismatches(store: VectorStore, expected: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """Collections whose point count differs from the record's: collection -> (store, record)."""
    out = {}
    for collection in sorted(set(COLLECTIONS) | set(expected)):
        have = store.count(collection)
        if have != expected.get(collection, 0):
            out[collection] = (have, expected.get(collection, 0))
    return out
