"""The record kept by the store's writes (RecordedStore over a real embedded store): what the store
holds, the record holds first; insert-only writes, payload updates and deletes recorded as they
end up in the store."""

from __future__ import annotations

import orjson
import pytest

from memstream.ports import StorePoint, StoreUnavailable
from memstream.processors.operations.record import RecordedStore
from memstream.processors.write.index import (
    CARDS,
    COLLECTIONS,
    TURNS,
    embedding_text,
    fresh_turn_spec,
    index_fresh_turn,
    index_write,
    lexical_text,
    points_for_write,
)
from memstream.schemas import FreshTurn, StoredPoint, parse_record_key
from tests.factories import sample_write, turn
from tests.fakes import HashEmbedder
from tests.stores import edge_store


class ListRecord:
    """The record as a list of (key, value) in write order; ``fail`` makes the next write raise."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, bytes | None]] = []
        self.fail = False

    def write(self, entries):
        if self.fail:
            raise StoreUnavailable("broker down")
        self.entries += list(entries)

    def close(self) -> None:
        pass

    def latest(self) -> dict[str, StoredPoint | None]:
        out: dict[str, StoredPoint | None] = {}
        for key, value in self.entries:
            out[key] = None if value is None else StoredPoint.from_bytes(value)
        return out


def stored(store) -> dict[str, dict]:
    """Every point of every memory collection, by record key."""
    out = {}
    for collection in COLLECTIONS:
        for tenant in ("t1", "t2"):
            for hit in store.scroll(collection, tenant, limit=10_000):
                out[f"{tenant}/{collection}/{hit.id}"] = dict(hit.payload)
    return out


def live(record: ListRecord) -> dict[str, dict]:
    return {key: dict(p.payload) for key, p in record.latest().items() if p is not None}


def test_every_point_of_a_write_is_in_the_record_with_its_payload(tmp_path):
    record = ListRecord()
    with edge_store(tmp_path) as engine:
        store = RecordedStore(engine, record)
        index_write(sample_write("t1"), HashEmbedder(), store)
        index_write(sample_write("t2"), HashEmbedder(), store)
        assert stored(engine) == live(record)
        assert len(live(record)) > 10
        assert {parse_record_key(k)[1] for k in live(record)} == set(COLLECTIONS)


def test_a_fresh_turn_over_a_flushed_one_is_not_recorded(tmp_path):
    record = ListRecord()
    write = sample_write("t1")
    [first] = [t for t in write.source_turns if t.turn_id == "D1:1"]
    fresh = FreshTurn(tenant_id="t1", conversation_id="c1", turn=turn("D1:1", "an earlier text"))
    with edge_store(tmp_path) as engine:
        store = RecordedStore(engine, record)
        index_write(write, HashEmbedder(), store)
        before = list(record.entries)
        point = fresh_turn_spec(fresh)
        store.upsert(TURNS, [StorePoint(point.id, [0.1] * HashEmbedder().dim, point.payload)], only_new=True)
        assert record.entries == before  # the store kept the flushed turn: so does the record
        assert stored(engine) == live(record)
        assert live(record)[f"t1/{TURNS}/{point.id}"]["text"] == first.text


def test_a_fresh_turn_alone_is_recorded(tmp_path):
    record = ListRecord()
    fresh = FreshTurn(tenant_id="t1", conversation_id="c1", turn=turn("D9:1", "New paint.", speaker="Mel"))
    with edge_store(tmp_path) as engine:
        assert index_fresh_turn(fresh, HashEmbedder(), RecordedStore(engine, record))
        assert stored(engine) == live(record) and len(record.entries) == 1


def test_set_payload_records_the_merged_point_and_nothing_for_a_missing_one(tmp_path):
    record = ListRecord()
    with edge_store(tmp_path) as engine:
        store = RecordedStore(engine, record)
        index_write(sample_write("t1"), HashEmbedder(), store)
        [card] = engine.scroll(CARDS, "t1", limit=1)
        assert store.set_payload(CARDS, "t1", card.id, {"retired": True, "superseded_by": None})
        assert live(record)[f"t1/{CARDS}/{card.id}"] == {**card.payload, "retired": True, "superseded_by": None}
        assert stored(engine) == live(record)
        n = len(record.entries)
        assert not store.set_payload(CARDS, "t2", card.id, {"retired": True})  # another tenant's id: not found
        assert len(record.entries) == n


def test_a_delete_tombstones_first_and_a_failed_record_write_leaves_the_store_alone(tmp_path):
    record = ListRecord()
    with edge_store(tmp_path) as engine:
        store = RecordedStore(engine, record)
        index_write(sample_write("t1"), HashEmbedder(), store)
        [card] = engine.scroll(CARDS, "t1", limit=1)
        record.fail = True
        with pytest.raises(StoreUnavailable):
            store.delete(CARDS, "t1", [card.id])
        with pytest.raises(StoreUnavailable):
            index_write(sample_write("t2"), HashEmbedder(), store)
        assert set(stored(engine)) <= set(live(record))  # nothing reached the store that the record lacks
        assert engine.retrieve(CARDS, "t1", [card.id])
        record.fail = False
        assert store.delete(CARDS, "t1", [card.id]) == 1
        assert record.entries[-1] == (f"t1/{CARDS}/{card.id}", None)
        assert stored(engine) == live(record)


def test_the_texts_a_point_is_embedded_and_indexed_by_are_read_from_its_payload():
    fresh = FreshTurn(tenant_id="t1", conversation_id="c1", turn=turn("D9:1", "New paint.", speaker="Mel"))
    specs = [*points_for_write(sample_write("t1")), fresh_turn_spec(fresh)]
    assert {s.collection for s in specs} == set(COLLECTIONS)
    for spec in specs:
        assert embedding_text(spec.collection, spec.payload) == spec.text
        assert lexical_text(spec.collection, spec.payload) in (spec.text, None)


def test_entries_are_json_a_consumer_can_read():
    record = ListRecord()
    from memstream.processors.operations.record import record_entry

    key, value = record_entry(CARDS, "p1", {"tenant_id": "t1", "text": "x"}, [0.5, 0.25], "m")
    assert key == "t1/cards/p1" and orjson.loads(value)["vector"] == [0.5, 0.25]
    assert StoredPoint.from_bytes(value).embedder == "m"
    del record
