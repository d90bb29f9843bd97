"""Generations of the collection set (memstream/adapters/generations.py): the naming rule, and the
embedded store's generations on the real engines in a temporary folder: a generation built beside a
serving worker, switched to under the folder's lock, the old one dropped. The server's are in
tests/integration/test_store_generations.py (marked cluster)."""

from __future__ import annotations

import numpy as np
import pytest

from memstream.adapters import embedded_collections, open_store, store_locked, store_problem
from memstream.adapters.generations import (
    POINTER,
    StoreLocked,
    active_generation,
    by_generation,
    collection_prefix,
    drop_generation,
    exclusive_store,
    parse_collection,
    store_generations,
    switch_generation,
)
from memstream.config import Settings
from memstream.ports import StorePoint

DIM = 4
TENANT = "acme"


def test_generation_zero_keeps_the_names_made_before_generations():
    assert collection_prefix("memstream_", 0) == "memstream_"
    assert collection_prefix("memstream_", 1) == "memstream_g1_"
    assert collection_prefix("", 12) == "g12_"
    with pytest.raises(ValueError):
        collection_prefix("memstream_", -1)


def test_a_physical_name_parses_back_to_its_generation_and_collection():
    for prefix in ("memstream_", "t0_", ""):
        for generation in (0, 1, 7, 123):
            for name in ("cards", "turns", "meta"):
                assert parse_collection(prefix, collection_prefix(prefix, generation) + name) == (generation, name)


def test_names_of_other_prefixes_are_not_taken_for_ours():
    assert parse_collection("memstream_", "other_cards") is None
    assert parse_collection("memstream_", "memstream_x_cards") is None  # a deployment whose prefix is memstream_x_
    assert parse_collection("", "memstream_cards") is None
    assert parse_collection("memstream_", "memstream_g0_cards") is None  # generation 0 has no marker
    assert parse_collection("memstream_", "memstream_g1_") is None
    assert by_generation("p_", ["p_cards", "p_g1_cards", "p_g1_turns", "p_g2_cards", "q_cards"]) == {
        0: {"cards"},
        1: {"cards", "turns"},
        2: {"cards"},
    }


def point(i: int, text: str = "") -> StorePoint:
    v = np.random.default_rng(i).normal(size=DIM)
    return StorePoint(
        f"00000000-0000-0000-0000-{i:012d}", (v / np.linalg.norm(v)).tolist(), {"tenant_id": TENANT}, text
    )


@pytest.fixture(params=["edge", "local"])
def settings(request, tmp_path) -> Settings:
    return Settings(qdrant_path=tmp_path / "store", qdrant_embedded=request.param)


def test_edge_builds_a_generation_beside_a_serving_worker_and_switches_to_it(tmp_path):
    settings = Settings(qdrant_path=tmp_path / "store", qdrant_embedded="edge")
    worker = open_store(settings)  # what a worker opens: generation 0 of a new store
    worker.ensure_collections(["cards", "turns"], DIM)
    worker.upsert("cards", [point(i) for i in range(1, 4)])
    assert active_generation(settings) == 0 and store_generations(settings) == [0]

    builder = open_store(settings, generation=1)  # beside the worker, which holds the folder's lock
    with pytest.raises(StoreLocked):
        open_store(settings, generation=1)  # one builder of a generation at a time
    builder.ensure_collections(["cards", "turns"], DIM)
    builder.upsert("cards", [point(i, "rebuilt text") for i in range(1, 6)])
    assert worker.count("cards", TENANT) == 3 and builder.count("cards", TENANT) == 5
    assert store_generations(settings) == [0, 1]
    assert {"memstream_cards", "memstream_g1_cards", "memstream_g1_turns"} <= embedded_collections(settings.store_path)

    with pytest.raises(StoreLocked, match="running worker"):  # the worker still has the store open
        with exclusive_store(settings):
            pass
    with pytest.raises(RuntimeError, match="exclusive_store"):
        switch_generation(settings, 1)
    worker.close()
    assert not store_locked(settings)
    with exclusive_store(settings):
        assert store_locked(settings)  # a worker starting now would be refused
        with pytest.raises(StoreLocked):
            open_store(settings)
        with pytest.raises(StoreLocked, match="close its store"):
            switch_generation(settings, 1)  # the builder still has generation 1 open
        builder.close()
        assert switch_generation(settings, 1) == 0
    assert active_generation(settings) == 1 and (settings.store_path / POINTER).is_file()

    worker = open_store(settings)  # the workers' store is generation 1 now
    try:
        assert worker.count("cards", TENANT) == 5
        assert [h.id for h in worker.search_text("cards", TENANT, "rebuilt", limit=10)]
        with pytest.raises(ValueError, match="active"):
            drop_generation(settings, 1)
        assert drop_generation(settings, 0) == 2  # memstream_cards, memstream_turns
    finally:
        worker.close()
    assert store_generations(settings) == [1] and store_problem(settings) is None


def test_a_switch_to_an_incomplete_generation_is_refused(settings):
    worker = open_store(settings)
    worker.ensure_collections(["cards", "turns"], DIM)
    worker.close()
    partial = open_store(settings, generation=2)
    partial.ensure_collections(["cards"], DIM)
    partial.close()
    with exclusive_store(settings):
        with pytest.raises(ValueError, match="lacks turns"):
            switch_generation(settings, 2)
        with pytest.raises(ValueError, match="no collection"):
            switch_generation(settings, 3)
        assert switch_generation(settings, 0) == 0  # already active: nothing to do
    assert active_generation(settings) == 0 and store_generations(settings) == [0, 2]
    assert drop_generation(settings, 2) == 1 and store_generations(settings) == [0]
    assert drop_generation(settings, 5) == 0


def test_local_mode_switches_generations_in_one_folder(tmp_path):
    settings = Settings(qdrant_path=tmp_path / "store", qdrant_embedded="local")
    worker = open_store(settings)
    worker.ensure_collections(["cards"], DIM)
    worker.upsert("cards", [point(1)])
    with pytest.raises(StoreLocked, match="local mode"):  # it locks the whole folder: no building beside it
        open_store(settings, generation=1)
    worker.close()
    builder = open_store(settings, generation=1)
    builder.ensure_collections(["cards"], DIM)
    builder.upsert("cards", [point(1), point(2)])
    builder.close()
    with exclusive_store(settings):
        assert switch_generation(settings, 1) == 0
    assert drop_generation(settings, 0) == 1
    worker = open_store(settings)
    try:
        assert worker.count("cards", TENANT) == 2
    finally:
        worker.close()
    assert embedded_collections(settings.store_path) == {"memstream_g1_cards"}
