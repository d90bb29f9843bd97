"""``memstream rebuild``: a new generation of the store built from the durable record beside the one
that serves, then (when asked) made the one readers and writers use, in one atomic switch.

The build reads the record up to its end as the build starts, applying each batch to the new
generation and saving its position there. Before a switch the new generation's point counts must
equal the record's (up to the same positions), else the switch is refused. After the switch the
record's tail is applied again: writes that reached the old generation between the build's end and
the switch. On a server writers go on during that (they write the new generation through its
aliases at once); a tail entry applied after a newer write of the same point would undo it, so the
tail is read again until one read holds no point the previous one applied (a quiet moment for
those points). An embedded store is one process's: its switch waits for the worker to stop
(exclusive_store) and the tail needs one read."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from memstream.adapters import open_store
from memstream.adapters.generations import (
    StoreLocked,
    active_generation,
    exclusive_store,
    store_generations,
    switch_generation,
)
from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.ports import Embedder, VectorStore
from memstream.processors.operations.fingerprint import META, check_embedder
from memstream.processors.operations.rebuild import (
    BuildProgress,
    apply_entries,
    count_mismatches,
    live_counts,
    load_progress,
    save_progress,
)
from memstream.processors.write.index import COLLECTIONS
from memstream.schemas.record import StoredPoint
from memstream.streams.backup import BackupManifest, backup_points
from memstream.streams.record_log import RecordLog

log = logging.getLogger(__name__)
MAX_TAIL_READS = 50


class RebuildRefused(RuntimeError):
    """The new generation is not the record's (its counts differ): it is not switched to."""


@dataclass
class RebuildReport:
    generation: int
    previous: int
    resumed: bool
    applied: int
    points: dict[str, int]
    record: dict[str, int]
    switched: bool = False
    tail_reads: int = 0
    tail_applied: int = 0
    seconds: float = 0.0
    mismatches: dict[str, tuple[int, int]] = field(default_factory=dict)
    restored_from: str | None = None
    reconciled: int = 0  # a restore: the backup's points deleted because the record no longer holds them


Progress = Callable[[int, int], None]  # (entries read, entries to read)


class Rebuild:
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        *,
        metrics: Metrics | None = None,
        on_progress: Progress | None = None,
        batch: int = 256,
    ):
        self.settings = settings
        self.embedder = embedder
        self.metrics = metrics or Metrics()
        self.on_progress = on_progress or (lambda done, total: None)
        self.batch = batch

    def target(self) -> tuple[int, int]:
        """(the active generation, the one to build): a build left unfinished is taken up again."""
        active = active_generation(self.settings)
        later = [g for g in store_generations(self.settings) if g > active]
        return active, max(later) if later else active + 1

    def run(self, *, switch: bool = False, drop_legacy: bool = False, backup: Path | None = None) -> RebuildReport:
        """Build (and with ``switch``, switch to) a new generation: from the record, or from ``backup``
        and then the record from the backup's positions (a restore)."""
        started = time.monotonic()
        active, generation = self.target()
        manifest = BackupManifest.read(backup) if backup is not None else None
        with contextlib.closing(open_store(self.settings, generation=generation)) as store:
            store.ensure_collections((*COLLECTIONS, META), self.embedder.dim)
            check_embedder(store, self.embedder)  # a half-built generation of another model is refused
            progress = load_progress(store)
            resumed = progress is not None
            if progress is None:
                progress = BuildProgress(embedder=self.embedder.name)
                if backup is not None and manifest is not None:
                    self._load_backup(store, backup, manifest, progress)
            reconciled = 0
            try:
                alive: dict[str, bool] | None = asyncio.run(self._build(store, progress))
            except LookupError:
                if manifest is None:
                    raise
                log.warning("no record to replay: the store is restored as it was at the backup")
                alive = None
            if backup is not None and alive is not None:
                reconciled = self._reconcile(store, backup, alive)
            expected = live_counts(alive) if alive is not None else dict(manifest.counts if manifest else {})
            report = RebuildReport(
                generation, active, resumed, progress.applied, {c: store.count(c) for c in COLLECTIONS}, expected
            )
            report.restored_from, report.reconciled = (str(backup) if backup else None), reconciled
            report.mismatches = count_mismatches(store, expected)
            if switch:
                if report.mismatches:
                    raise RebuildRefused(_mismatch_text(generation, report.mismatches))
                self._switch(store, progress, report, drop_legacy, tail=alive is not None)
        report.seconds = time.monotonic() - started
        return report

    def _load_backup(self, store: VectorStore, backup: Path, manifest: BackupManifest, progress: BuildProgress) -> None:
        """A backup's points (their vectors kept where the configured model made them), then the
        record's positions at the backup as where the build goes on."""
        total = sum(manifest.counts.values())
        self.on_progress(0, total)
        batch: list[StoredPoint] = []
        done = 0
        for point in backup_points(backup):
            batch.append(point)
            if len(batch) == self.batch:
                done += self._apply_base(store, batch)
                self.on_progress(done, total)
        done += self._apply_base(store, batch)
        progress.offsets = dict(manifest.record_offsets or {})
        progress.applied = 0
        save_progress(store, progress, self.embedder.dim)

    def _apply_base(self, store: VectorStore, batch: list[StoredPoint]) -> int:
        applied = apply_entries(store, self.embedder, [(p.key, p) for p in batch])
        self._count(applied.upserted, 0, 0, 0.0)
        n = len(batch)
        batch.clear()
        return n

    def _reconcile(self, store: VectorStore, backup: Path, alive: dict[str, bool]) -> int:
        """Delete the backup's points the record no longer holds: forgotten (or deleted) since the
        backup, their tombstones maybe compacted away since."""
        gone = [(p.key, None) for p in backup_points(backup) if not alive.get(p.key)]
        applied = apply_entries(store, self.embedder, gone)
        self._count(0, applied.deleted, 0, 0.0)
        return applied.deleted

    async def _build(self, store: VectorStore, progress: BuildProgress) -> dict[str, bool]:
        """Apply the record up to its end now; returns whether each key the record holds there is
        alive (its last entry a point, not a tombstone)."""
        async with RecordLog(self.settings) as record:
            end = await record.end_offsets()
            start = progress.offsets or await record.start_offsets()
            total = sum(max(0, end[p] - start.get(p, 0)) for p in end)
            done, began = 0, time.monotonic()
            self.on_progress(0, total)
            async for entries in record.read(start, end, batch=self.batch):
                applied = apply_entries(store, self.embedder, [(e.key, e.point) for e in entries])
                for e in entries:
                    progress.offsets[e.partition] = e.offset + 1
                progress.applied += len(entries)
                save_progress(store, progress, self.embedder.dim)
                done = sum(max(0, progress.offsets.get(p, start.get(p, 0)) - start.get(p, 0)) for p in end)
                self._count(applied.upserted, applied.deleted, total - done, done / max(time.monotonic() - began, 1e-6))
                self.on_progress(done, total)
            progress.offsets = {p: max(progress.offsets.get(p, 0), end[p]) for p in end}  # compacted gaps
            save_progress(store, progress, self.embedder.dim)
            self.on_progress(total, total)
            alive: dict[str, bool] = {}
            async for entries in record.read(None, end, batch=2000):
                for e in entries:
                    alive[e.key] = e.point is not None
        return alive

    def _count(self, upserted: int, deleted: int, remaining: int, rate: float) -> None:
        self.metrics.rebuild_points.labels("upsert").inc(upserted)
        self.metrics.rebuild_points.labels("delete").inc(deleted)
        self.metrics.rebuild_remaining.set(remaining)
        self.metrics.rebuild_rate.set(rate)

    def _switch(
        self, store: VectorStore, progress: BuildProgress, report: RebuildReport, drop_legacy: bool, *, tail: bool
    ) -> None:
        """Switch to the new generation; ``tail``: apply what the record gained meanwhile (a restore
        without a record has none)."""
        if self.settings.qdrant_url:
            switch_generation(self.settings, report.generation, drop_legacy=drop_legacy)
            report.switched = True
            if tail:
                report.tail_reads, report.tail_applied = asyncio.run(self._tail(store, progress, until_quiet=True))
            return
        try:
            with exclusive_store(self.settings):  # no worker writes the old generation from here on
                if tail:
                    report.tail_reads, report.tail_applied = asyncio.run(self._tail(store, progress, until_quiet=False))
                store.close()  # switched to closed, as workers open it next (closing again later is a no-op)
                switch_generation(self.settings, report.generation, drop_legacy=drop_legacy)
                report.switched = True
        except StoreLocked as exc:
            raise StoreLocked(
                f"{exc} (generation {report.generation} is built and kept: run this again then)"
            ) from None

    async def _tail(self, store: VectorStore, progress: BuildProgress, *, until_quiet: bool) -> tuple[int, int]:
        """Apply what the record gained since the build; with ``until_quiet``, again until a read holds
        no point the previous read applied. Returns (reads, entries applied)."""
        reads = applied_total = 0
        previous: set[str] | None = None
        async with RecordLog(self.settings) as record:
            while reads < MAX_TAIL_READS:
                end = await record.end_offsets()
                entries = [e async for batch in record.read(progress.offsets, end, batch=self.batch) for e in batch]
                reads += 1
                keys = {e.key for e in entries}
                if previous is not None and not keys & previous:
                    break  # these were written to the new generation directly, after the switch
                applied = apply_entries(store, self.embedder, [(e.key, e.point) for e in entries])
                applied_total += len(entries)
                progress.offsets = {p: max(progress.offsets.get(p, 0), end[p]) for p in end}
                save_progress(store, progress, self.embedder.dim)
                if not until_quiet or not entries:
                    break
                previous = applied.keys
                await asyncio.sleep(0.2)
            else:
                log.warning("the record's tail kept rewriting the same points: stopped after %d reads", reads)
        return reads, applied_total


def _mismatch_text(generation: int, mismatches: dict[str, tuple[int, int]]) -> str:
    parts = ", ".join(f"{c}: {have} in the store, {want} in the record" for c, (have, want) in mismatches.items())
    return f"generation {generation} does not hold what the record holds ({parts}): not switching to it"
