"""Generations of the collection set on a real Qdrant server (memstream/adapters/generations.py): a new
store is generation 1 behind aliases, a rebuilt generation is switched to in one atomic alias change
while a reader keeps searching, a store made before generations is switched only by dropping its
collections, and workers starting together on a 3-node cluster agree on one set. Needs a Qdrant
binary (``make test-cluster``)."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest

from memstream.adapters import open_store
from memstream.adapters.generations import active_generation, drop_generation, store_generations, switch_generation
from memstream.adapters.qdrant_store import QdrantStore
from memstream.config import Settings
from memstream.ports import StorePoint

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

DIM = 4
TENANT = "acme"


def point(i: int) -> StorePoint:
    v = np.random.default_rng(i).normal(size=DIM)
    return StorePoint(f"00000000-0000-0000-0000-{i:012d}", (v / np.linalg.norm(v)).tolist(), {"tenant_id": TENANT})


def layout(store: QdrantStore, prefix: str) -> tuple[set[str], dict[str, str]]:
    """The server's collections of ``prefix`` and its aliases (alias -> collection)."""
    names = {c.name for c in store.client.get_collections().collections if c.name.startswith(prefix)}
    aliases = {a.alias_name: a.collection_name for a in store.client.get_aliases().aliases}
    return names, {a: c for a, c in aliases.items() if a.startswith(prefix)}


def fresh(url: str, **kw) -> Settings:
    return Settings(qdrant_url=url, qdrant_collection_prefix=f"gen{uuid.uuid4().hex[:8]}_", **kw)


def test_a_new_store_is_generation_one_behind_aliases(qdrant_server):
    settings = fresh(qdrant_server.url)
    p = settings.qdrant_collection_prefix
    store = open_store(settings)
    try:
        store.ensure_collections(["cards", "turns"], DIM)
        store.upsert("cards", [point(1)])
        assert layout(store, p) == (
            {p + "g1_cards", p + "g1_turns"},
            {p + "cards": p + "g1_cards", p + "turns": p + "g1_turns"},
        )
        assert store.count("cards", TENANT) == 1 and store.client.get_collection(p + "g1_cards").points_count == 1
        assert active_generation(settings) == 1 and store_generations(settings) == [1]
    finally:
        store.close()
    again = open_store(settings)  # a restarted worker finds them as they are
    try:
        again.ensure_collections(["cards", "turns"], DIM)
        assert again.count("cards", TENANT) == 1 and len(layout(again, p)[0]) == 2
    finally:
        again.close()


def test_a_reader_sees_no_gap_across_the_switch(qdrant_server):
    settings = fresh(qdrant_server.url)
    worker = open_store(settings)
    worker.ensure_collections(["cards", "turns"], DIM)
    worker.upsert("cards", [point(i) for i in range(1, 21)])
    builder = open_store(settings, generation=2)
    builder.ensure_collections(["cards"], DIM)
    with pytest.raises(ValueError, match="lacks turns"):
        switch_generation(settings, 2)
    builder.ensure_collections(["turns"], DIM)
    builder.upsert("cards", [point(i) for i in range(1, 26)])
    builder.close()

    seen: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        reader = open_store(settings)
        try:
            while not stop.is_set():
                try:
                    seen.append(len(reader.search("cards", TENANT, point(3).vector, limit=100)))
                except Exception as exc:  # any failure is what the test looks for
                    errors.append(exc)
        finally:
            reader.close()

    def searched(n: int) -> None:
        """Wait until the reader has searched ``n`` times (or failed): reads on both sides of the switch."""
        deadline = time.monotonic() + 60
        while len(seen) < n and not errors and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        searched(20)
        assert switch_generation(settings, 2) == 1
        after = len(seen)
        searched(after + 20)
    finally:
        stop.set()
        thread.join()
    try:
        assert not errors, errors[:3]
        assert set(seen) == {20, 25} and seen.index(25) > 0 and 20 not in seen[seen.index(25) :], set(seen)
        assert worker.count("cards", TENANT) == 25  # the worker's store follows the aliases
        assert active_generation(settings) == 2 and store_generations(settings) == [1, 2]
        with pytest.raises(ValueError, match="active"):
            drop_generation(settings, 2)
        assert drop_generation(settings, 1) == 2 and store_generations(settings) == [2]
        assert worker.count("cards", TENANT) == 25
    finally:
        worker.close()


def test_a_store_made_before_generations_is_switched_only_by_dropping_it(qdrant_server):
    settings = fresh(qdrant_server.url)
    p = settings.qdrant_collection_prefix
    legacy = QdrantStore(url=qdrant_server.url, prefix=p, generation=0)  # <prefix>cards, as before generations
    legacy.ensure_collections(["cards"], DIM)
    legacy.upsert("cards", [point(1)])
    legacy.close()
    worker = open_store(settings)
    try:
        worker.ensure_collections(["cards", "turns"], DIM)  # turns is made the legacy way too
        assert layout(worker, p) == ({p + "cards", p + "turns"}, {})
        assert active_generation(settings) == 0 and worker.count("cards", TENANT) == 1

        builder = open_store(settings, generation=1)
        builder.ensure_collections(["cards", "turns"], DIM)
        builder.upsert("cards", [point(1), point(2)])
        builder.close()
        with pytest.raises(ValueError, match="drop_legacy"):
            switch_generation(settings, 1)
        assert worker.count("cards", TENANT) == 1  # untouched
        assert switch_generation(settings, 1, drop_legacy=True) == 0
        assert layout(worker, p) == (
            {p + "g1_cards", p + "g1_turns"},
            {p + "cards": p + "g1_cards", p + "turns": p + "g1_turns"},
        )
        assert worker.count("cards", TENANT) == 2
        assert store_generations(settings) == [1] and drop_generation(settings, 0) == 0
    finally:
        worker.close()


def test_workers_starting_together_on_a_cluster_agree_on_one_set(qdrant_cluster):
    settings = fresh(qdrant_cluster.url, qdrant_shards=3)
    p = settings.qdrant_collection_prefix
    names = ["cards", "scenes", "turns", "meta"]
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        # each on its own node first, as a scaled store group's workers spread over the cluster
        store = open_store(settings.model_copy(update={"qdrant_url": qdrant_cluster.urls[i % 3]}))
        try:
            start.wait()
            store.ensure_collections(names, DIM)
            store.upsert("cards", [point(i + 1)])
        except Exception as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    store = open_store(settings)
    try:
        assert layout(store, p) == ({p + "g1_" + n for n in names}, {p + n: p + "g1_" + n for n in names})
        assert store.count("cards", TENANT) == 6
    finally:
        store.close()
