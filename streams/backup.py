"""``memstream backup``: every point of the serving store, vectors included, in one portable file,
with the record's end positions taken before the first point is read. A restore (``memstream
restore``, :mod:`memstream.streams.rebuild`) loads it into a new generation, applies the record from
those positions (what was written during and after the backup; a write seen both ways is the same
entry applied twice) and deletes what the record no longer holds (forgets issued after the backup),
so a restored backup is the store as the record says it is now, or as it was at the backup when the
record is gone too."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import orjson

from memstream.adapters import open_existing_store
from memstream.config import Settings
from memstream.ports import MemoryRecord
from memstream.processors.operations.fingerprint import built_with
from memstream.processors.operations.record import record_entry
from memstream.processors.write.index import COLLECTIONS
from memstream.schemas.record import StoredPoint
from memstream.streams.record_log import Offsets, RecordLog

MANIFEST = "manifest.json"  # written last: a folder without it is no (complete) backup
POINTS = "points.jsonl.gz"
FORMAT = 1


@dataclass
class BackupManifest:
    created_at: str
    topic_prefix: str
    record_offsets: Offsets | None  # None: there was no record to replay from
    embedder: str  # the model that made the vectors in the file
    counts: dict[str, int] = field(default_factory=dict)
    format: int = FORMAT

    @classmethod
    def read(cls, folder: Path) -> BackupManifest:
        path = folder / MANIFEST
        if not path.is_file():
            raise FileNotFoundError(f"{folder} holds no complete backup (no {MANIFEST})")
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: backup format {data.get('format')}, this memstream reads {FORMAT}")
        offsets = data["record_offsets"]
        data["record_offsets"] = None if offsets is None else {int(p): int(o) for p, o in offsets.items()}
        return cls(**data)


async def record_end(settings: Settings) -> Offsets | None:
    try:
        async with RecordLog(settings) as record:
            return await record.end_offsets()
    except LookupError:
        return None


def take_backup(settings: Settings, folder: Path, on_point: Callable[[], None] = lambda: None) -> BackupManifest:
    """Back the serving store up into ``folder`` (made; it must not hold a backup already)."""
    if (folder / MANIFEST).exists():
        raise FileExistsError(f"{folder} already holds a backup")
    folder.mkdir(parents=True, exist_ok=True)
    offsets = asyncio.run(record_end(settings))  # before any point is read: the replay starts here
    counts = dict.fromkeys(COLLECTIONS, 0)
    partial = folder / (POINTS + ".partial")
    with contextlib.closing(open_existing_store(settings)) as store:
        embedder = built_with(store)
        with gzip.open(partial, "wb", compresslevel=5) as out:
            for collection in COLLECTIONS:
                for hit in store.scan(collection, with_vectors=True):
                    point = StoredPoint(
                        tenant_id=hit.payload["tenant_id"],
                        collection=collection,
                        point_id=hit.id,
                        payload=dict(hit.payload),
                        vector=[float(x) for x in hit.vector or ()] or None,
                        embedder=embedder or None,
                    )
                    out.write(point.to_bytes() + b"\n")
                    counts[collection] += 1
                    on_point()
    partial.rename(folder / POINTS)
    created = datetime.now(timezone.utc).isoformat()
    manifest = BackupManifest(created, settings.topic_prefix, offsets, embedder, counts)
    (folder / MANIFEST).write_text(json.dumps(asdict(manifest), indent=2) + "\n")
    return manifest


def backup_points(folder: Path) -> Iterator[StoredPoint]:
    with gzip.open(folder / POINTS, "rb") as lines:
        for line in lines:
            if line.strip():
                yield StoredPoint.from_bytes(line)


async def recorded_state(settings: Settings) -> dict[str, bytes | None]:
    """What the record says of each key: a digest of the point's payload, or None for a tombstone
    (empty without a record)."""
    state: dict[str, bytes | None] = {}
    try:
        async with RecordLog(settings) as record:
            async for entries in record.read(None, await record.end_offsets(), batch=2000):
                for e in entries:
                    state[e.key] = None if e.point is None else payload_digest(e.point.payload)
    except LookupError:
        pass
    return state


def payload_digest(payload: Mapping[str, Any]) -> bytes:
    return hashlib.blake2b(orjson.dumps(dict(payload), option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


@dataclass
class SyncCounts:
    added: int = 0  # points the record had no entry for (or a tombstone)
    updated: int = 0  # points the record held with another payload
    removed: int = 0  # points the record held that the store no longer has: tombstoned


def sync_record(settings: Settings, record: MemoryRecord, on_point: Callable[[], None] = lambda: None) -> SyncCounts:
    """Make the record hold what the serving store holds: a store written before the record existed
    (or with MEMSTREAM_RECORD_ENABLED off), or by workers of such a version beside this one (a
    rollback: they rewrote and deleted points without recording). The store is taken as the truth,
    so its writers (index, consolidate) must be stopped meanwhile; the embedded store's lock says so."""
    said = asyncio.run(recorded_state(settings))
    counts = SyncCounts()
    seen: set[str] = set()
    batch: list[tuple[str, bytes | None]] = []

    def put(key: str, value: bytes | None) -> None:
        batch.append((key, value))
        on_point()
        if len(batch) >= 500:
            record.write(batch)
            batch.clear()

    with contextlib.closing(open_existing_store(settings)) as store:
        embedder = built_with(store)
        for collection in COLLECTIONS:
            for hit in store.scan(collection, with_vectors=settings.record_vectors):
                key, value = record_entry(collection, hit.id, hit.payload, hit.vector, embedder)
                seen.add(key)
                digest = said.get(key)
                if digest is None:
                    counts.added += 1
                elif digest != payload_digest(hit.payload):
                    counts.updated += 1
                else:
                    continue
                put(key, value)
    for key, digest in said.items():
        if digest is not None and key not in seen:
            counts.removed += 1
            put(key, None)
    record.write(batch)
    return counts
