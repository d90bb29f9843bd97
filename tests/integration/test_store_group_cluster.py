"""Scale-out of both stage groups, proven on the same turns (issue 35, section 2): two ingest workers
(``compress,segment,stm,extract``) on a 3-broker Kafka cluster and two store workers
(``index,consolidate,query``) on a 3-node Qdrant cluster (3 shards, 2 replicas each) write exactly
the points -- the same ids, the same payloads -- that one all-stages worker with the embedded store
writes on the single broker. While they run, ``memstream export`` and queries read the server (no
folder lock); a consolidate command runs each conversation once across the two store workers; a
forget leaves no copy on any replica. Extractive mode (no LLM): both runs are deterministic."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import httpx
import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from memstream.adapters import open_store
from memstream.adapters.qdrant_store import QdrantStore
from memstream.bench.chaos import changed_payloads, score_delivery, store_points
from memstream.bench.deployment import Deployment
from memstream.config import Settings
from memstream.datasets import LocomoSample
from memstream.ports import StoreFilter
from memstream.processors.write.index import CARDS, COLLECTIONS, PROFILES, SCENES, TRIGGERS, TURNS
from memstream.schemas import Turn, memory_writes
from memstream.schemas.topics import DRAIN_TOPICS, Topic
from memstream.streams import runtime
from tests.qdrant_servers import QdrantNodes

from .conftest import first_sessions, handled, metric_total

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

INGEST = "compress,segment,stm,extract"
STORE = "index,consolidate,query"
TENANT = "acme"
# Windows and buffers flush when full or by drain's forced flush, never on an idle tick a busy
# 2-core machine could move between two turns (which would cut other flushes, so other writes);
# no sleep-time consolidation (the test commands it).
ENV = {
    "MEMSTREAM_STM_IDLE_S": "600",
    "MEMSTREAM_STM_TICK_S": "1",
    "MEMSTREAM_SLEEP_IDLE_S": "86400",
    "MEMSTREAM_LOG_LEVEL": "info",
}
# Payload fields that may differ between two runs on the same turns: none. Two reference runs on
# these turns stored identical payloads (changed_payloads with nothing ignored: {}): every field is a
# function of the turns (ids hash tenant, conversation, provenance and content; times are the turns'
# event times); no write stamps its own wall-clock time (consolidation does, and runs after this).
VOLATILE: frozenset[str] = frozenset()


def spread_conversations(base: str, partitions: int) -> list[str]:
    """Copies of ``base`` whose keys land one on each partition (the SDK's partitioner), so every
    worker of each group holds some."""
    partitioner, ids = DefaultPartitioner(), list(range(partitions))
    chosen: dict[int, str] = {}
    for i in range(1000):
        conversation = f"{base}-{i}"
        chosen.setdefault(partitioner(f"{TENANT}/{conversation}".encode(), ids, ids), conversation)
        if len(chosen) == partitions:
            return [chosen[p] for p in ids]
    raise AssertionError("no spread found")


@dataclass
class Runs:
    sample: LocomoSample
    turns: list[Turn]
    conversations: list[str]
    reference: dict[str, dict[str, dict[str, Any]]]
    scaled: Deployment
    qdrant: QdrantNodes
    ingest: list[runtime.WorkerProcess]
    store: list[runtime.WorkerProcess]
    timings: dict[str, float] = field(default_factory=dict)

    def points(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Every point the scaled deployment has in the Qdrant cluster (read while its workers run)."""
        store = open_store(self.scaled.settings)
        try:
            return store_points(store, [TENANT], COLLECTIONS)
        finally:
            store.close()


def sizes(points: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {c: len(p) for c, p in points.items()}


@pytest.fixture(scope="module")
def runs(kafka: Settings, kafka_cluster: Settings, qdrant_cluster: QdrantNodes, tmp_path_factory) -> Iterator[Runs]:
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    base_conversation, session_turns, sample = first_sessions(2, tenant=TENANT)
    conversations = spread_conversations(base_conversation, kafka.topic_partitions)
    turns = [t.model_copy(update={"conversation_id": c}) for c in conversations for t in session_turns]

    def run_reference() -> dict[str, dict[str, dict[str, Any]]]:
        """One worker of every stage, the embedded store, the single broker."""
        reference = Deployment(kafka, tmp_path_factory.mktemp("reference"), ENV)
        try:
            reference.start_worker("all")
            reference.produce(turns)
            reference.drain(timeout_s=300)
        finally:
            reference.stop_workers()
        with reference.store() as store:
            points = store_points(store, [TENANT], COLLECTIONS)
        timings["reference_s"] = time.monotonic() - t0
        return points

    # The reference runs beside the scaled run: they share neither broker nor store.
    pool = ThreadPoolExecutor(1, "reference")
    reference = pool.submit(run_reference)

    # The scaled run: two workers per group on the Kafka cluster, the store groups' on the Qdrant cluster.
    t1 = time.monotonic()
    prefix = f"t{uuid.uuid4().hex[:10]}"
    scaled_env = {
        **ENV,
        # Deployment passes the bootstrap of its base settings on, not their topic replication.
        "MEMSTREAM_TOPIC_REPLICATION_FACTOR": str(kafka_cluster.topic_replication_factor),
        "MEMSTREAM_TOPIC_MIN_INSYNC_REPLICAS": str(kafka_cluster.topic_min_insync_replicas),
        "MEMSTREAM_QDRANT_URL": qdrant_cluster.url,
        "MEMSTREAM_QDRANT_COLLECTION_PREFIX": f"{prefix}_",
        "MEMSTREAM_QDRANT_SHARDS": "3",
        "MEMSTREAM_QDRANT_REPLICATION_FACTOR": "2",
    }
    scaled = Deployment(kafka_cluster, tmp_path_factory.mktemp("scaled"), scaled_env, prefix=prefix)
    try:
        store_workers = [scaled.start_worker(f"store-{i}", stages=STORE, wait=False) for i in (1, 2)]
        ingest_workers = [scaled.start_worker(f"ingest-{i}", stages=INGEST, wait=False) for i in (1, 2)]
        scaled.wait_ready()
        timings["scaled_start_s"] = time.monotonic() - t1
        t2 = time.monotonic()
        scaled.produce(turns)
        scaled.drain(timeout_s=300)
        timings["scaled_ingest_s"] = time.monotonic() - t2
        yield Runs(
            sample,
            turns,
            conversations,
            reference.result(),
            scaled,
            qdrant_cluster,
            ingest_workers,
            store_workers,
            timings,
        )
    finally:
        pool.shutdown()
        scaled.stop_workers()
        print(f"\ntimings: { {k: round(v, 1) for k, v in timings.items()} }")


def test_two_workers_of_each_group_on_the_clusters_write_exactly_the_reference_points(runs: Runs) -> None:
    for w in runs.ingest:
        assert handled(w.metrics_port, "segment") > 0, f"{w.log_path.name} got no partition of the turns"
    for w in runs.store:
        assert handled(w.metrics_port, "index") > 0, f"{w.log_path.name} indexed nothing"
    assert runs.scaled.lag(DRAIN_TOPICS) == {t: 0 for t in DRAIN_TOPICS}

    points = runs.points()
    writes = memory_writes(v for _, v in runs.scaled.read_topic(Topic.CARDS, timeout_s=60))
    delivery = score_delivery(
        runs.turns,
        {c: set(p) for c, p in points.items()},
        {c: set(p) for c, p in runs.reference.items()},
        writes,
        COLLECTIONS,
    )
    print(f"reference points: {sizes(runs.reference)}; scaled: {sizes(points)}; {delivery}")
    assert all(runs.reference[c] for c in (TURNS, CARDS, SCENES, TRIGGERS)), sizes(runs.reference)
    assert sizes(runs.reference)[TURNS] == len(runs.turns)
    assert (delivery.lost, delivery.duplicated, delivery.extra_points, delivery.missing_points) == (0, 0, 0, 0), (
        delivery
    )
    assert changed_payloads(points, runs.reference, VOLATILE) == {}


def test_export_and_queries_read_the_server_while_the_workers_run(runs: Runs, tmp_path: Path) -> None:
    assert all(w.alive() for w in runs.ingest + runs.store)
    out = tmp_path / "export.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "memstream.streams.cli", "export", "--tenant", TENANT, "--out", str(out)],
        env={**os.environ, **runs.scaled.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    exported: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in COLLECTIONS}
    for line in out.read_bytes().splitlines():
        record = orjson.loads(line)
        exported[record.pop("collection")][record.pop("id")] = record
    assert exported == runs.reference  # every point, as the reference stored it

    # One question per conversation: each goes to its conversation's partition, so both store
    # workers answer some.
    ids = {t.turn_id for t in runs.turns}
    questions = [q.question for q in runs.sample.qa if q.evidence and set(q.evidence) <= ids]
    before = [handled(w.metrics_port, "query") for w in runs.store]
    for conversation, question in zip(runs.conversations, questions):
        reply = runs.scaled.ask(question, tenant=TENANT, conversation=conversation, answer=False, timeout_s=60)
        assert reply.ok, reply.error
        assert reply.evidence, question
        assert {e.point_id for e in reply.evidence} <= {p for c in COLLECTIONS for p in runs.reference[c]}
    after = [handled(w.metrics_port, "query") for w in runs.store]
    assert all(a > b for a, b in zip(after, before)), f"queries handled per store worker: {before} -> {after}"


def test_a_consolidate_command_runs_each_conversation_once_across_the_store_workers(runs: Runs) -> None:
    def runs_by_worker() -> list[float]:
        return [metric_total(w.metrics_port, "memstream_consolidation_runs_total") for w in runs.store]

    assert runs_by_worker() == [0.0, 0.0]
    control_before = runs.scaled.message_count(Topic.CONTROL)
    sent = runs.scaled.consolidate(tenant=TENANT)  # a broadcast: one copy per partition of control
    assert sent == runs.scaled.settings.topic_partitions
    deadline = time.monotonic() + 90
    while sum(runs_by_worker()) < len(runs.conversations) and time.monotonic() < deadline:
        time.sleep(0.5)
    runs.scaled.drain(timeout_s=120, topics=(Topic.CONTROL, Topic.UPDATES), flush=False)
    time.sleep(2)  # a keyed copy produced last would have been counted by now
    by_worker = runs_by_worker()
    logged = Counter(
        line.split("consolidated ", 1)[1].split(":", 1)[0]
        for w in runs.store
        for line in w.log_text().splitlines()
        if "consolidated " in line
    )
    fanned_out = runs.scaled.message_count(Topic.CONTROL) - control_before - sent
    print(
        f"consolidation runs per store worker: {by_worker}; per conversation: {dict(logged)}; "
        f"keyed commands the {sent} broadcast copies fanned out: {fanned_out}"
    )
    assert logged == {f"{TENANT}/{c}": 1 for c in runs.conversations}
    assert by_worker[0] > 0 and by_worker[1] > 0, "each store worker consolidates its own partitions' conversations"
    assert sum(by_worker) == len(runs.conversations)
    assert sum(
        metric_total(w.metrics_port, "memstream_consolidation_runs_total", reason="command") for w in runs.store
    ) == len(runs.conversations)


def replica_counts(urls: list[str], collection: str) -> dict[int, list[int]]:
    """Each shard of ``collection``: the points its replicas hold, read from every node's own shards."""
    out: dict[int, list[int]] = {}
    for url in urls:
        result = httpx.get(f"{url}/collections/{collection}/cluster", timeout=10).raise_for_status().json()["result"]
        for shard in result["local_shards"]:
            assert shard["state"] == "Active", (url, shard)
            out.setdefault(shard["shard_id"], []).append(shard["points_count"])
    return out


def test_a_forget_reaches_every_replica_on_every_node(runs: Runs) -> None:
    conversation, speaker = runs.conversations[0], runs.turns[0].speaker
    forgotten = {t.turn_id for t in runs.turns if t.conversation_id == conversation and t.speaker == speaker}
    before = runs.points()
    outcome = runs.scaled.forget(tenant=TENANT, conversation=conversation, speaker=speaker, timeout_s=120)
    assert outcome.done
    after = runs.points()
    print(f"forget {speaker} in {conversation}: {outcome.counts}; points {sizes(before)} -> {sizes(after)}")
    assert sum(sizes(after).values()) < sum(sizes(before).values())

    def of(points: dict[str, dict[str, Any]], conv: str) -> dict[str, Any]:
        return {i: p for i, p in points.items() if p["conversation_id"] == conv}

    for collection in COLLECTIONS:
        # Nothing left cites a forgotten turn; a trigger's card or scene is still there.
        left = of(after[collection], conversation)
        assert not [i for i, p in left.items() if set(p.get("turn_ids", [])) & forgotten], collection
        if collection == TRIGGERS:
            hosts = set(after[CARDS]) | set(after[SCENES])
            assert {p["host_id"] for p in left.values()} <= hosts
        for other in runs.conversations[1:]:  # the other conversations are untouched
            assert of(after[collection], other).keys() == of(before[collection], other).keys(), (collection, other)

    # Every node, asked on its own (each prefers its local replicas): no forgotten turn anywhere.
    cited = StoreFilter(equals={"conversation_id": conversation}, any_of={"turn_ids": sorted(forgotten)})
    for url in runs.qdrant.urls:
        node = QdrantStore(url=url, prefix=runs.scaled.settings.qdrant_collection_prefix)
        try:
            for collection in (TURNS, CARDS, SCENES, PROFILES):
                assert node.count(collection, TENANT, where=cited) == 0, (url, collection)
        finally:
            node.close()

    # Every replica of every shard: its own point count, from the node holding it. The two replicas of
    # each shard agree, and the shards add up to what the cluster answers, so no replica kept a
    # forgotten point (writes are acknowledged by one replica: the other may need a moment).
    prefix = runs.scaled.settings.qdrant_collection_prefix
    for collection in COLLECTIONS:
        deadline = time.monotonic() + 15
        while True:
            shards = replica_counts(runs.qdrant.urls, prefix + collection)
            if all(len(set(counts)) == 1 for counts in shards.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(shards) == 3 and all(len(counts) == 2 for counts in shards.values()), (collection, shards)
        assert all(len(set(counts)) == 1 for counts in shards.values()), (collection, shards)
        assert sum(counts[0] for counts in shards.values()) == len(after[collection]), (collection, shards)
