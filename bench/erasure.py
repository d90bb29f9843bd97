"""``memstream bench erasure``: forgets of every scope kind while conversations stream in, then a
count of every copy that is left.

Conversations (LoCoMo dev and the packaged one) stream under several tenants with the same ids and
texts. Half of each is in when the worker is stopped for a backup of the store (windows and buffers
hold their newest turns: a long idle time, and they stay in the tables' changelogs) and started
again. Each forget (one speaker of a conversation, a list of turn ids, a whole conversation, a
whole tenant) is sent while the rest of the turns stream in, and timed until every part replied.
Then a worker is killed (kill -9), a new one replays every turn and flushes, and the bench counts
what still derives from a forgotten turn: store points (raw turns, cards, scenes, profile items,
orphaned triggers) and table entries (windows, buffers, pending cards). That is
``remaining_copies``; it must be 0. It also checks nothing else was erased (``kept_turns``).

The durable record and the backup (:mod:`memstream.bench.erasure_record`): the record's live view
(``record_remaining``), the backup restored into a new generation beside the serving one
(``restored_backup_remaining``: the forgets issued after the backup re-applied), and the record's
raw versions that hold forgotten text, before and after the log cleaner compacted them
(``record_forgotten_versions_*``). Each must be 0 (the one before compaction need not).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

import orjson

from memstream.adapters import open_store
from memstream.bench.deployment import Deployment
from memstream.bench.dev_data import locomo_dev_if_present
from memstream.bench.erasure_record import (
    COMPACT_SOON,
    backup_between,
    record_copies,
    restore_beside,
    wait_compacted,
)
from memstream.config import Settings, absolute_path
from memstream.datasets import LocomoSample, demo_conversation_path, load_locomo, locomo_turns
from memstream.ports import StoreFilter, VectorStore
from memstream.processors.forgetting.forget import ForgetScope, remaining
from memstream.processors.write.index import CARDS, PROFILES, SCENES, TRIGGERS, TURNS
from memstream.schemas import Forget, Turn
from memstream.streams import runtime
from memstream.streams.record_log import live_points

HOLD = {
    "MEMSTREAM_STM_IDLE_S": "600",
    "MEMSTREAM_STM_TICK_S": "1",
    "MEMSTREAM_SLEEP_IDLE_S": "86400",
    # A small flush budget: the first half of each conversation makes cards, scenes and triggers
    # before the backup and the forgets (at the default 1,536 its buffers hold all of it).
    "MEMSTREAM_STM_TOKENS": "256",
}
FLUSH = {**HOLD, "MEMSTREAM_STM_IDLE_S": "3"}


@dataclass(frozen=True)
class ErasureOptions:
    data: Path | None = None  # LoCoMo JSON; default: ../shared dev data when present
    conversations: int = 2  # LoCoMo conversations (plus the packaged one)
    sessions: int | None = 2  # of each LoCoMo conversation (None: all)
    tenants: int = 3  # every conversation streams under each tenant
    workdir: Path = Path(".data/bench/erasure")
    compaction_timeout_s: float = 300.0  # the most to wait for the log cleaner to compact the record


def erasure_turns(options: ErasureOptions) -> dict[tuple[str, str], list[Turn]]:
    """(tenant, conversation) -> its turns in order."""
    path = options.data or locomo_dev_if_present()
    samples: list[tuple[LocomoSample, int | None]] = []
    if path is not None:
        samples += [(s, options.sessions) for s in load_locomo(path)[: options.conversations]]
    samples.append((load_locomo(demo_conversation_path())[0], None))
    out: dict[tuple[str, str], list[Turn]] = {}
    for i in range(options.tenants):
        tenant = "erasure" if i == 0 else f"erasure.{i}"  # overlapping tenant names
        for sample, sessions in samples:
            out[(tenant, sample.sample_id)] = list(locomo_turns(sample, tenant_id=tenant, max_sessions=sessions))
    return out


def plan_forgets(streams: dict[tuple[str, str], list[Turn]]) -> list[dict[str, Any]]:
    """One forget of each scope kind, on distinct conversations (a whole tenant: the last one)."""
    keys = sorted(streams)
    tenants = sorted({t for t, _ in keys})
    first = [k for k in keys if k[0] == tenants[0]]
    second = [k for k in keys if len(tenants) > 1 and k[0] == tenants[1]]
    plans: list[dict[str, Any]] = []
    tenant, conversation = first[0]
    plans.append(
        {"kind": "speaker", "tenant": tenant, "conversation": conversation, "speaker": streams[first[0]][0].speaker}
    )
    if len(first) > 1:
        tenant, conversation = first[1]
        ids = [t.turn_id for t in streams[first[1]][::7][:5]]
        plans.append({"kind": "turn_ids", "tenant": tenant, "conversation": conversation, "turn_ids": ids})
    if second:
        tenant, conversation = second[0]
        plans.append({"kind": "conversation", "tenant": tenant, "conversation": conversation})
    if len(tenants) > 2:
        plans.append({"kind": "tenant", "tenant": tenants[-1]})
    return plans


def _scope(plan: dict[str, Any], requested_at: datetime) -> ForgetScope:
    return ForgetScope.of(
        Forget(
            forget_id="scope",
            tenant_id=plan["tenant"],
            conversation_id=plan.get("conversation"),
            speaker=plan.get("speaker"),
            turn_ids=plan.get("turn_ids", []),
            requested_at=requested_at,
            reply_topic="unused",
        )
    )


def forgotten_ids(
    streams: dict[tuple[str, str], list[Turn]], scopes: Iterable[ForgetScope]
) -> dict[tuple[str, str], set[str]]:
    scopes = list(scopes)
    return {key: {t.turn_id for t in turns if any(s.covers_turn(t) for s in scopes)} for key, turns in streams.items()}


def count_remaining(store: VectorStore, gone: dict[tuple[str, str], set[str]]) -> dict[str, int]:
    """Points of ``store`` that still derive from a forgotten turn, per collection (triggers: those
    of a conversation with forgotten turns whose card or scene is gone)."""
    out = {c: 0 for c in (TURNS, CARDS, SCENES, PROFILES, TRIGGERS)}
    for (tenant, conversation), ids in gone.items():
        if not ids:
            continue
        for c, n in remaining(store, tenant, {conversation: ids}).items():
            out[c] += n
        conv = StoreFilter(equals={"conversation_id": conversation})
        hosts = {h.id for c in (CARDS, SCENES) for h in store.scroll(c, tenant, where=conv, limit=100_000)}
        triggers = store.scroll(TRIGGERS, tenant, where=conv, limit=100_000)
        out[TRIGGERS] += sum(1 for h in triggers if h.payload.get("host_id") not in hosts)
    return out


def count_held(dep: Deployment, gone: dict[tuple[str, str], set[str]]) -> int:
    """Forgotten turns still in a window or a buffer (the tables' changelogs, workers stopped)."""
    tables = latest_tables(dep)
    held_total = 0
    for (tenant, conversation), ids in gone.items():
        key = f"{tenant}/{conversation}"
        window = tables["segmenter"].get(key) or {}
        buffer = tables["stm"].get(key) or {}
        held = [t["turn"]["turn_id"] for t in window.get("pending", [])]
        held += [t["turn"]["turn_id"] for g in buffer.get("groups", []) for t in g["turns"]]
        held_total += sum(1 for tid in held if tid in ids)
    return held_total


def latest_tables(dep: Deployment) -> dict[str, dict[str, Any]]:
    """The newest changelog record per key of the segmenter and STM tables (what a restart recovers)."""
    out: dict[str, dict[str, Any]] = {}
    for table in ("segmenter", "stm"):
        latest: dict[str, Any] = {}
        for key, value in dep.read_topic(f"{dep.group}-{table}-changelog", prefixed=False):
            if key:
                latest[orjson.loads(key)] = orjson.loads(value) if value else None
        out[table] = latest
    return out


def kept_turns(
    store: VectorStore, streams: dict[tuple[str, str], list[Turn]], gone: dict[tuple[str, str], set[str]]
) -> tuple[int, int]:
    """Raw turns that must still be stored (not forgotten), and how many ``store`` holds."""
    expected = found = 0
    for (tenant, conversation), turns in streams.items():
        keep = {t.turn_id for t in turns} - gone.get((tenant, conversation), set())
        expected += len(keep)
        hits = store.scroll(TURNS, tenant, where=StoreFilter(equals={"conversation_id": conversation}), limit=100_000)
        found += len({h.payload["turn_id"] for h in hits} & keep)
    return expected, found


def forget_while_streaming(
    dep: Deployment, plans: list[dict[str, Any]], turns: list[Turn], status: Callable[[str], None]
) -> tuple[list[dict[str, Any]], list[ForgetScope], set[str]]:
    """Each forget sent while a share of ``turns`` streams in, timed until every part replied:
    (results, the scopes, the topics the replies said keep raw text)."""
    chunks = [turns[i :: len(plans)] for i in range(len(plans))]
    results, scopes, retained = [], [], set()
    for plan, chunk in zip(plans, chunks):
        status(f"forget {plan['kind']} while {len(chunk)} turns stream in")
        streaming = threading.Thread(target=dep.produce, args=(chunk,))
        requested_at = datetime.now(timezone.utc)
        streaming.start()
        started = time.perf_counter()
        outcome = dep.forget(
            tenant=plan["tenant"],
            conversation=plan.get("conversation"),
            speaker=plan.get("speaker"),
            turn_ids=plan.get("turn_ids", []),
        )
        latency_ms = (time.perf_counter() - started) * 1000
        streaming.join()
        scopes.append(_scope(plan, requested_at))
        retained |= set(outcome.retained)
        results.append({**plan, "parts": outcome.parts, "latency_ms": round(latency_ms, 1), "counts": outcome.counts})
    return results, scopes, retained


def check_record_and_backup(
    dep: Deployment,
    backup: Path,
    streams: dict[tuple[str, str], list[Turn]],
    gone: dict[tuple[str, str], set[str]],
    options: ErasureOptions,
    status: Callable[[str], None],
) -> dict[str, Any]:
    """Workers stopped: the record's live view, the backup taken before the forgets restored beside
    the serving store, and the record's raw versions before and after the log cleaner ran."""
    status("counting copies in the record")
    record = count_sum(record_copies(asyncio.run(live_points(dep.settings)).values(), gone))
    status("restoring the backup into a new generation")
    report = restore_beside(dep, backup)
    with contextlib.closing(open_store(dep.settings, generation=report.generation)) as store:
        restored = count_sum(count_remaining(store, gone))
        _, restored_kept = kept_turns(store, streams, gone)
    status("waiting for the record to be compacted")
    before, after, waited, config = wait_compacted(dep, gone, options.compaction_timeout_s)
    return {
        "record_remaining": record[0],
        "record_remaining_by_collection": record[1],
        "restored_backup_remaining": restored[0],
        "restored_backup_remaining_by_collection": restored[1],
        "restored_reconciled": report.reconciled,
        "restored_generation": report.generation,
        "restored_kept_turns_found": restored_kept,
        "record_forgotten_versions_before_compaction": before,
        "record_forgotten_versions_after_compaction": after,
        "compaction_wait_s": waited,
        "compaction_config": {k: config[k] for k in COMPACT_SOON},
    }


def count_sum(counts: dict[str, int]) -> tuple[int, dict[str, int]]:
    return sum(counts.values()), counts


def fresh_workdir(workdir: Path) -> None:
    """A deployment folder of an earlier run removed: its store (and a restored generation, which a
    restore would take up again) must not mix with this run's."""
    old = workdir / "deployment"
    if (old / Deployment.MANIFEST).exists():
        shutil.rmtree(old)


def run_erasure_bench(options: ErasureOptions, *, status: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    base = Settings()
    streams = erasure_turns(options)
    plans = plan_forgets(streams)
    halves = {k: len(v) // 2 for k, v in streams.items()}
    first_half = [t for k, v in streams.items() for t in v[: halves[k]]]
    second_half = [t for k, v in streams.items() for t in v[halves[k] :]]
    backup = absolute_path(options.workdir / "backup")
    fresh_workdir(options.workdir)
    with runtime.KAFKA.session(base):
        dep = Deployment(base, options.workdir / "deployment", {**HOLD, "MEMSTREAM_LOG_LEVEL": "info"})
        try:
            status("starting a worker")
            dep.start_worker("erasure")
            status(f"streaming the first half ({len(first_half)} turns)")
            dep.produce(first_half)
            dep.drain(timeout_s=1800, flush=False)  # windows and buffers keep their turns for the forgets
            status("worker stopped for a backup, then started again")
            manifest = backup_between(dep, backup, lambda: dep.start_worker("erasure-after-backup"))
            [worker] = dep.workers
            results, scopes, retained = forget_while_streaming(dep, plans, second_half, status)
            dep.drain(timeout_s=1800, flush=False)
            status("kill -9, then a worker that replays every turn and flushes")
            worker.kill()
            dep.workers = []
            dep.start_worker("after-crash", env=FLUSH)
            dep.produce([t for v in streams.values() for t in v])
            dep.drain(timeout_s=1800)
            time.sleep(6)
            dep.drain(timeout_s=1800)
            dep.stop_workers()
            status("counting copies")
            gone = forgotten_ids(streams, scopes)
            with dep.store() as store:
                remaining = {**count_remaining(store, gone), "window_or_buffer": count_held(dep, gone)}
                expected, found = kept_turns(store, streams, gone)
            dead_letters = len(dep.dead_letters())
            durable = check_record_and_backup(dep, backup, streams, gone, options, status)
        finally:
            dep.stop_workers()
    latencies = [r["latency_ms"] for r in results]
    return {
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
        "turns": sum(len(v) for v in streams.values()),
        "forgotten_turns": sum(len(v) for v in gone.values()),
        "forgets": results,
        "remaining_copies": sum(remaining.values()),
        "remaining_by_place": remaining,
        "kept_turns_expected": expected,
        "kept_turns_found": found,
        "forget_latency_ms_median": round(statistics.median(latencies), 1) if latencies else None,
        "forget_latency_ms_max": max(latencies) if latencies else None,
        "retained_topics": sorted(retained),
        "topic_retention_s": dep.settings.topic_retention_s,
        "dead_letters": dead_letters,
        "backup_points": sum(manifest.counts.values()),
        **durable,
    }
