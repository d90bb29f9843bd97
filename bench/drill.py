"""``memstream bench drill``: the disaster drill. On a Qdrant server (by default a 3-node cluster,
with a 3-broker Kafka cluster of the run's own) and on the embedded store, with questions asked
throughout (:mod:`memstream.bench.drill_questions`):

1. LoCoMo conversations stream in; a backup is taken halfway; the rest streams in; one speaker of
   one conversation is forgotten. The store is read point by point (every collection, every
   tenant): the snapshot every recovery is held to, and the gold-turn recall of LoCoMo questions.
2. The disaster: every collection deleted (server: the workers keep running, questions get an
   error reply, writes would wait), or the worker stopped and the store folder deleted (embedded:
   questions wait in their topic).
3. Recovery (a) ``memstream rebuild --switch`` from the durable record; then the same disaster
   again and recovery (b) ``memstream restore`` of the backup (the backup's points, the record
   replayed from the backup's positions, what the record no longer holds deleted).
4. After each: the snapshot again (``points_lost``: points missing or with another payload), the
   forgotten speaker's points (``forgotten_remaining``, also in the record's live view and, once
   the log cleaner ran, in its raw versions), the same questions (``recall_equal``).

Recovery time per 10,000 points is each recovery's seconds over the points it rebuilt. Last, the
store is moved to another embedding model (``--reembed-model``: built beside while the worker
serves, switched with it stopped, the worker started with that model) and recall compared.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from memstream.adapters import open_store
from memstream.adapters.packaged_models import MINILM, MPNET, ModelNotInstalled, model_path
from memstream.bench import clusters
from memstream.bench.cases import BenchQuestion, locomo_set
from memstream.bench.chaos import Nodes
from memstream.bench.deployment import Deployment
from memstream.bench.dev_data import locomo_dev_if_present
from memstream.bench.drill_questions import Asker, ask_recall, recall_changes
from memstream.bench.erasure_record import wait_compacted
from memstream.bench.report import source_commit
from memstream.bench.scoring import spread
from memstream.config import Settings, absolute_path
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.ports import Embedder
from memstream.processors.write.index import COLLECTIONS
from memstream.schemas import Turn
from memstream.schemas.base import base_turn_id
from memstream.streams import runtime
from memstream.streams.backup import BackupManifest, take_backup
from memstream.streams.rebuild import Rebuild, RebuildReport
from memstream.streams.record_log import live_points
from memstream.streams.services import Services

TENANT = "drill"
STORES = ("server", "embedded")
WAYS = ("rebuild", "restore")
# Windows flush after 3 idle seconds (every turn is in the store when the snapshot is taken), and no
# idle consolidation rewrites memories between the snapshot and the recoveries.
WORKER_ENV = {"MEMSTREAM_STM_IDLE_S": "3", "MEMSTREAM_STM_TICK_S": "1", "MEMSTREAM_SLEEP_IDLE_S": "86400"}
Snapshot = dict[tuple[str, str], dict[str, Any]]  # (collection, point id) -> payload


@dataclass(frozen=True)
class DrillOptions:
    data: Path | None = None  # LoCoMo JSON; default: ../shared's dev set when present, else the packaged one
    conversations: int = 3  # the first N conversations of the file
    sessions: int | None = None  # of each conversation (None: all)
    questions: int = 60  # LoCoMo questions whose recall is compared (their gold turns all streamed)
    stores: tuple[str, ...] = STORES
    cluster: bool = True  # a 3-broker Kafka cluster and a 3-node Qdrant cluster of the run's own
    qdrant_url: str | None = None  # without cluster: this Qdrant server (none: one node of the run's own)
    outage_s: float = 10.0  # seconds the store stays gone before a recovery starts (and questions go on after it)
    ask_every_s: float = 0.5
    ask_timeout_s: float = 600.0  # embedded: questions asked while the worker is stopped wait for it
    compaction_timeout_s: float = 300.0
    reembed_model: str | None = MPNET  # None: no re-embed
    reembed_backend: str | None = None  # MEMSTREAM_EMBEDDING_BACKEND of the re-embed (None: the default)
    workdir: Path = Path(".data/bench/drill")


@dataclass
class DrillData:
    streams: dict[str, list[Turn]]  # conversation -> its turns in order
    questions: list[BenchQuestion]
    forget: tuple[str, str]  # (conversation, speaker)
    gone: set[str] = field(default_factory=set)  # the forgotten turn ids

    @property
    def halves(self) -> tuple[list[Turn], list[Turn]]:
        """The turns before the backup (the first half of each conversation), and after it."""
        cut = {c: len(turns) // 2 for c, turns in self.streams.items()}
        return (
            [t for c, turns in self.streams.items() for t in turns[: cut[c]]],
            [t for c, turns in self.streams.items() for t in turns[cut[c] :]],
        )


def drill_data(options: DrillOptions) -> DrillData:
    """The conversations, the recall questions (gold turns all streamed and none forgotten), and the
    speaker forgotten: the first speaker of the last conversation."""
    path = options.data or locomo_dev_if_present() or demo_conversation_path()
    samples = load_locomo(path)[: options.conversations]
    streams = {s.sample_id: list(locomo_turns(s, tenant_id=TENANT, max_sessions=options.sessions)) for s in samples}
    conversation = samples[-1].sample_id
    speaker = streams[conversation][0].speaker
    gone = {t.turn_id for t in streams[conversation] if t.speaker == speaker}
    streamed = {t.turn_id for turns in streams.values() for t in turns}
    asked = locomo_set(path, conversations=list(streams)).questions
    kept = [q for q in asked if set(q.gold_turns) <= streamed and not set(q.gold_turns) & gone]
    return DrillData(streams, spread(kept, options.questions), (conversation, speaker), gone)


def snapshot(settings: Settings) -> Snapshot:
    """Every point of every memory collection, every tenant (the embedded store: its workers stopped)."""
    with contextlib.closing(open_store(settings)) as store:
        return {(c, h.id): dict(h.payload) for c in COLLECTIONS for h in store.scan(c, with_vectors=False)}


def compare(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """Points of ``before`` missing from ``after`` or with another payload (lost), and points only ``after`` has."""
    missing = [k for k in before if k not in after]
    changed = [k for k in before if k in after and after[k] != before[k]]
    by_collection = {c: sum(k[0] == c for k in missing + changed) for c in COLLECTIONS}
    return {
        "points_before": len(before),
        "points_after": len(after),
        "points_lost": len(missing) + len(changed),
        "missing": len(missing),
        "changed_payload": len(changed),
        "extra": sum(k not in before for k in after),
        "lost_by_collection": {c: n for c, n in by_collection.items() if n},
    }


def derives_from_forgotten(payload: Mapping[str, Any], conversation: str, gone: set[str]) -> bool:
    """The point names a forgotten turn (or a chunk of one) of the forgotten speaker's conversation."""
    if payload.get("conversation_id") != conversation:
        return False
    named = set(payload.get("turn_ids") or ()) | ({payload["turn_id"]} if payload.get("turn_id") else set())
    return any(t in gone or base_turn_id(t) in gone for t in named)


def forgotten_points(payloads: Iterable[Mapping[str, Any]], data: DrillData) -> int:
    return sum(derives_from_forgotten(p, data.forget[0], data.gone) for p in payloads)


def per_10k(seconds: float, points: int) -> float | None:
    return round(seconds / points * 10_000, 1) if points else None


class StoreDrill:
    """The drill on one store: the deployment, its worker, the questions asked throughout, the
    backup, the snapshot and each recovery's figures."""

    def __init__(self, kind: str, base: Settings, env: Mapping[str, str], data: DrillData, options: DrillOptions):
        self.kind, self.data, self.options = kind, data, options
        folder = absolute_path(options.workdir / kind)
        if folder.exists():  # an earlier run's store and backup must not mix with this one's
            shutil.rmtree(folder)
        self.dep = Deployment(base, folder / "deployment", {**WORKER_ENV, **env})
        self.backup = folder / "backup"
        self.status: Callable[[str], None] = lambda text: None
        self.last_recall: dict[str, Any] = {}  # of the latest recovery: the re-embed's "before"

    @property
    def embedded(self) -> bool:
        return not self.dep.settings.qdrant_url

    def embedder(self) -> Embedder:
        """A fresh embedder, as a recovery run by an operator has: no texts in its cache yet (one
        shared by both recoveries made the second one's embedding partly free)."""
        return Services(self.dep.settings).embedder

    def recall(self) -> dict[str, Any]:
        return ask_recall(self.dep.settings, self.data.questions, tenant=TENANT, timeout_s=self.options.ask_timeout_s)

    def run(self, status: Callable[[str], None]) -> dict[str, Any]:
        self.status = lambda text: status(f"{self.kind}: {text}")
        try:
            self.status("starting a worker")
            self.dep.start_worker("drill")
            asker = Asker(
                self.dep.settings,
                self.data.questions,
                tenant=TENANT,
                every_s=self.options.ask_every_s,
                timeout_s=self.options.ask_timeout_s,
            ).start()
            try:
                manifest, forget = self._prepare()
                recall_before = self.recall()
                if self.embedded:  # the disaster begins: only its stopped worker lets the store be read
                    asker.set_phase("disaster:rebuild")
                    self.dep.stop_workers()
                before = snapshot(self.dep.settings)
                ways = {way: self._recover(way, asker, before, recall_before) for way in WAYS}
                reembed = self._reembed(asker)
                erasure = self._erasure(before, ways)
            finally:
                asker.stop()
        finally:
            self.dep.stop_workers()
        questions = asker.summary()
        return {
            "store": self._describe(),
            "turns": sum(len(t) for t in self.data.streams.values()),
            "points": len(before),
            "backup_points": sum(manifest.counts.values()),
            "forget": forget,
            "recall_before": {k: v for k, v in recall_before.items() if k != "found"},
            "recoveries": ways,
            "points_lost": sum(w["points_lost"] for w in ways.values()),
            "questions_unanswered": questions["unanswered"] + questions["send_error"],
            "questions_error_replies": questions["error_reply"],
            "forgotten_remaining": sum(erasure["remaining"].values()),
            "erasure": erasure,
            "recall_equal": all(w["recall_changed"] == 0 for w in ways.values()),
            "recall_lower": sum(w["recall_lower"] for w in ways.values()),
            "reembed": reembed,
            "dead_letters": len(self.dep.dead_letters()),
            "questions": questions,
        }

    def _prepare(self) -> tuple[BackupManifest, dict[str, Any]]:
        """Half the turns, a backup, the rest, and one speaker forgotten, every write in the store."""
        first, rest = self.data.halves
        self.status(f"streaming {len(first)} turns")
        self.dep.produce(first)
        self.dep.drain(timeout_s=1800)
        self.status("taking a backup")
        if self.embedded:  # the worker holds the store: stopped for the backup (its windows are in their changelogs)
            self.dep.stop_workers()
            manifest = take_backup(self.dep.settings, self.backup)
            self.dep.start_worker("drill-after-backup")
        else:
            manifest = take_backup(self.dep.settings, self.backup)
        self.status(f"streaming {len(rest)} more turns")
        self.dep.produce(rest)
        self.dep.drain(timeout_s=1800)
        conversation, speaker = self.data.forget
        self.status(f"forgetting {speaker} of {conversation}")
        started = time.monotonic()
        outcome = self.dep.forget(tenant=TENANT, conversation=conversation, speaker=speaker)
        self.dep.drain(timeout_s=1800)
        return manifest, {
            "conversation": conversation,
            "speaker": speaker,
            "turns": len(self.data.gone),
            "counts": outcome.counts,
            "seconds": round(time.monotonic() - started, 1),
        }

    def _destroy(self) -> int:
        """The disaster: every collection of the deployment deleted (server), or the store's folder
        (embedded, its worker stopped). Returns how many collections or folders went."""
        if self.embedded:
            path = self.dep.settings.store_path
            gone = len([p for p in path.iterdir() if p.is_dir()]) if path.exists() else 0
            shutil.rmtree(path, ignore_errors=True)
            return gone
        from qdrant_client import QdrantClient

        prefix = self.dep.settings.qdrant_collection_prefix
        url = (self.dep.settings.qdrant_url or "").split(",")[0]  # one node: the cluster deletes everywhere
        client = QdrantClient(url=url, check_compatibility=False)
        try:
            names = [c.name for c in client.get_collections().collections if c.name.startswith(prefix)]
            for name in names:
                client.delete_collection(name)
        finally:
            client.close()
        return len(names)

    def _recover(self, way: str, asker: Asker, before: Snapshot, recall_before: dict[str, Any]) -> dict[str, Any]:
        """The disaster, ``outage_s`` of it, then recovery ``way``; the store compared with ``before``."""
        if self.embedded and self.dep.workers:
            asker.set_phase(f"disaster:{way}")
            self.dep.stop_workers()
        elif not self.embedded:
            asker.set_phase(f"disaster:{way}")
        self.status(f"disaster: the store is deleted ({way} follows)")
        gone_at = time.monotonic()
        destroyed = self._destroy()
        time.sleep(self.options.outage_s)
        asker.set_phase(f"recovery:{way}")
        self.status(f"recovering by {way}")
        backup = self.backup if way == "restore" else None
        report: RebuildReport = Rebuild(self.dep.settings, self.embedder()).run(switch=True, backup=backup)
        after = snapshot(self.dep.settings) if self.embedded else {}
        if self.embedded:
            self.dep.start_worker(f"drill-after-{way}")
        serving_s = time.monotonic() - gone_at
        asker.set_phase(f"after:{way}")
        after = after or snapshot(self.dep.settings)
        recall = self.last_recall = self.recall()
        time.sleep(self.options.outage_s)  # questions go on a while after the recovery too
        points = sum(report.points.values())
        return {
            "collections_deleted": destroyed,
            "seconds": round(report.seconds, 2),
            "points_rebuilt": points,
            "seconds_per_10k_points": per_10k(report.seconds, points),
            "outage_s": round(serving_s, 1),  # from the deletion until the store served again
            "generation": report.generation,
            "applied": report.applied,
            "reconciled": report.reconciled,
            **compare(before, after),
            "forgotten_points": forgotten_points(after.values(), self.data),
            "recall": {k: v for k, v in recall.items() if k != "found"},
            **recall_changes(recall_before, recall),
        }

    def _reembed(self, asker: Asker) -> dict[str, Any]:
        """The store moved to another embedding model: built beside it while the worker serves, the
        tail and the switch with the worker stopped, the worker started with that model."""
        model = self.options.reembed_model
        if not model:
            return {"skipped": True, "reason": "no --reembed-model"}
        try:
            model_path(model)
        except ModelNotInstalled as exc:
            return {"skipped": True, "reason": str(exc)}
        env = {"MEMSTREAM_EMBEDDING_MODEL": model}
        if self.options.reembed_backend:
            env["MEMSTREAM_EMBEDDING_BACKEND"] = self.options.reembed_backend
        settings = Settings.model_validate(
            {k.removeprefix("MEMSTREAM_").lower(): v for k, v in {**self.dep.env, **env}.items()}
        )
        asker.set_phase("reembed")
        self.status(f"re-embedding with {model}")
        embedder = Services(settings).embedder
        started = time.monotonic()
        built = Rebuild(settings, embedder).run()
        self.dep.stop_workers()
        report = Rebuild(settings, embedder).run(switch=True)
        self.dep.start_worker("drill-reembedded", env=env)
        seconds = time.monotonic() - started
        asker.set_phase("after:reembed")
        recall = ask_recall(settings, self.data.questions, tenant=TENANT, timeout_s=self.options.ask_timeout_s)
        points = sum(report.points.values())
        return {
            "skipped": False,
            "model": embedder.name,
            "from_model": self.dep.settings.embedding_model or MINILM,
            "seconds": round(seconds, 1),
            "build_s": round(built.seconds, 1),
            "switch_s": round(report.seconds, 1),
            "points": points,
            "seconds_per_10k_points": per_10k(seconds, points),
            "generation": report.generation,
            "recall_before": self.last_recall["recall"],
            "recall_after": recall["recall"],
            **recall_changes(self.last_recall, recall),
        }

    def _erasure(self, before: Snapshot, ways: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Where the forgotten speaker's text could remain: the store after each recovery (after the
        restore: the backup taken before the forget, restored), the record's live view, and its raw
        versions once the log cleaner compacted them."""
        self.status("the forgotten speaker in the record (waiting for the log cleaner)")
        live = asyncio.run(live_points(self.dep.settings)).values()
        gone = {(TENANT, self.data.forget[0]): self.data.gone}
        versions, left, waited, _ = wait_compacted(self.dep, gone, self.options.compaction_timeout_s)
        remaining = {
            "store_after_rebuild": ways["rebuild"]["forgotten_points"],
            "store_after_restore": ways["restore"]["forgotten_points"],
            "record_live": forgotten_points((p.payload for p in live), self.data),
            "record_after_compaction": left,
        }
        return {
            "remaining": remaining,
            "store_before_disaster": forgotten_points(before.values(), self.data),
            "record_versions_before_compaction": versions,
            "compaction_wait_s": waited,
        }

    def _describe(self) -> str:
        s = self.dep.settings
        if self.embedded:
            return f"embedded ({s.qdrant_embedded})"
        nodes = len((s.qdrant_url or "").split(","))
        return f"Qdrant server, {nodes} node(s), {s.qdrant_shards or nodes} shard(s) x {s.qdrant_replication_factor}"


@contextlib.contextmanager
def drill_services(options: DrillOptions, status: Callable[[str], None]) -> Iterator[tuple[Settings, dict[str, str]]]:
    """The brokers and the Qdrant server the drill runs on: (the deployments' base settings, the
    server store's environment); stopped on the way out when the drill started them."""
    workdir = absolute_path(options.workdir)
    # An earlier run's nodes go: their state names other ports.
    for old in ("kafka-cluster", "qdrant-cluster", "qdrant-node"):
        shutil.rmtree(workdir / old, ignore_errors=True)
    with contextlib.ExitStack() as running:
        if options.cluster:
            nodes = Nodes(workdir, status)
            status("starting 3 Kafka brokers and 3 Qdrant nodes")
            running.callback(nodes.stop)
            nodes.start()
            yield nodes.settings(), {**nodes.env(), "MEMSTREAM_QDRANT_COLLECTION_PREFIX": _prefix()}
            return
        base = Settings()
        running.enter_context(runtime.KAFKA.session(base))
        url = options.qdrant_url
        if url is None and "server" in options.stores:
            port = clusters.free_base_port(34333, [0, 1, 2])
            node = clusters.LocalCluster("qdrant", workdir / "qdrant-node", port, 1)
            status("starting a Qdrant node")
            running.callback(node.stop)
            node.start()
            url = node.address
        yield base, {"MEMSTREAM_QDRANT_URL": url or "", "MEMSTREAM_QDRANT_COLLECTION_PREFIX": _prefix()}


def _prefix() -> str:
    return f"drill{uuid.uuid4().hex[:8]}_"


def run_drill(options: DrillOptions, *, status: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    data = drill_data(options)
    runs: dict[str, dict[str, Any]] = {}
    with drill_services(options, status) as (base, server_env):
        for kind in options.stores:
            env = server_env if kind == "server" else {}
            runs[kind] = StoreDrill(kind, base, env, data, options).run(status)
    return {
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
        "commit": source_commit(),
        "cpus": os.cpu_count(),
        "conversations": list(data.streams),
        "turns": sum(len(t) for t in data.streams.values()),
        "recall_questions": len(data.questions),
        "points_lost": sum(r["points_lost"] for r in runs.values()),
        "questions_unanswered": sum(r["questions_unanswered"] for r in runs.values()),
        "questions_error_replies": sum(r["questions_error_replies"] for r in runs.values()),
        "forgotten_remaining": sum(r["forgotten_remaining"] for r in runs.values()),
        "recall_equal": all(r["recall_equal"] for r in runs.values()),
        "recall_lower": sum(r["recall_lower"] for r in runs.values()),
        "recovery_s_per_10k_points": {
            kind: {way: r["recoveries"][way]["seconds_per_10k_points"] for way in WAYS} for kind, r in runs.items()
        },
        "reembed": {kind: r["reembed"] for kind, r in runs.items()},
        "stores": runs,
    }
