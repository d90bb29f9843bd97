"""The store on a 3-node Qdrant cluster: collections laid out as configured, and a node lost. The
store keeps answering through the other nodes (the client fails over between the URLs), a delete
made while a node is down reaches its replicas once it is back, and every replica of every shard
agrees. Needs a Qdrant binary (``make test-cluster``)."""

from __future__ import annotations

import json
import time
from urllib.request import urlopen

import numpy as np
import pytest

from memstream.adapters.qdrant_store import QdrantStore, ServerLayout
from memstream.ports import StorePoint

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

DIM = 4


def pid(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


def point(i: int, tenant: str) -> StorePoint:
    v = np.random.default_rng(i).normal(size=DIM)
    return StorePoint(pid(i), (v / np.linalg.norm(v)).tolist(), {"tenant_id": tenant, "n": i}, f"word{i % 7} text")


def replicas(url: str, collection: str) -> list[tuple[int, int, str]]:
    """(shard, points, state) of the replicas one node holds."""
    info = json.load(urlopen(f"{url}/collections/{collection}/cluster", timeout=10))["result"]
    return [(s["shard_id"], s["points_count"], s["state"]) for s in info["local_shards"]]


def converged(urls: list[str], collection: str, timeout_s: float = 60) -> dict[int, int]:
    """Shard -> points, once every replica on every node is active and holds the same count."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = [r for url in urls for r in replicas(url, collection)]
        counts: dict[int, set[int]] = {}
        for shard, points, _ in held:
            counts.setdefault(shard, set()).add(points)
        if all(state == "Active" for *_, state in held) and all(len(c) == 1 for c in counts.values()):
            return {shard: c.pop() for shard, c in counts.items()}
        assert time.monotonic() < deadline, f"replicas did not converge: {sorted(held)}"
        time.sleep(1)


def test_a_cluster_store_is_laid_out_as_configured_and_survives_a_lost_node(qdrant_cluster):
    urls = qdrant_cluster.urls
    store = QdrantStore(url=qdrant_cluster.url, layout=ServerLayout(shards=3, replication_factor=2), prefix="lost_")
    try:
        store.ensure_collections(["cards"], DIM)
        params = store._client.get_collection("lost_cards").config.params
        assert (params.shard_number, params.replication_factor, params.write_consistency_factor) == (3, 2, 1)
        tenant_index = store._client.get_collection("lost_cards").payload_schema["tenant_id"].params
        assert tenant_index.is_tenant
        assert sum(len(replicas(url, "lost_cards")) for url in urls) == 6  # 3 shards x 2 replicas over 3 nodes

        store.upsert("cards", [point(i, "acme" if i % 2 else "other") for i in range(1, 61)])
        qdrant_cluster.kill(1)  # the node the client talks to first
        try:
            store.upsert("cards", [point(i, "acme") for i in range(61, 81)])  # failed over to node 2
            assert store.count("cards", "acme") == 50
            assert len(store.search("cards", "acme", point(3, "acme").vector, limit=5)) == 5
            assert store.search_text("cards", "acme", "word3", limit=100)
            # a forget while node 1 is down: its replicas must lose these points too once back
            assert store.delete("cards", "acme", [pid(i) for i in range(1, 61, 2)]) == 30
            assert store.count("cards", "acme") == 20
        finally:
            qdrant_cluster.start(1)
        shards = converged(urls, "lost_cards")
        assert sum(shards.values()) == 50  # 30 "other" + 20 acme, on every replica
        for url in urls:  # each node alone answers the same, the restarted one too
            alone = QdrantStore(url=url, prefix="lost_")
            try:
                assert alone.count("cards", "acme") == 20 and alone.count("cards", "other") == 30
            finally:
                alone.close()
    finally:
        store.close()


def test_store_workers_starting_together_make_each_collection_once(qdrant_cluster):
    """Two workers of a scaled store group ensure the same collections at the same moment, through
    different nodes: one creates each, the other waits until the cluster has it."""
    from concurrent.futures import ThreadPoolExecutor

    urls = qdrant_cluster.urls
    stores = [QdrantStore(url=",".join(order), prefix="together_") for order in (urls, urls[::-1])]
    names = [f"c{i}" for i in range(6)]
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda store: store.ensure_collections(names, DIM), stores))
        for store in stores:
            store.upsert("c5", [point(1, "acme")])
            assert store.count("c5", "acme") == 1
    finally:
        for store in stores:
            store.close()
