"""Export: every point of a tenant (or one conversation), raw turns first, with provenance and the
version fields, and nothing of another tenant (real embedded store, temp folder)."""

from __future__ import annotations

import orjson
import pytest

from memstream.processors.operations.export import export_records
from memstream.processors.write.index import CARDS, COLLECTIONS, TURNS
from tests.factories import sample_write
from tests.stores import edge_store


@pytest.fixture
def store(tmp_path):
    """The sample write of t1/c1, t1/c2 and t2/c1."""
    with edge_store(tmp_path / "q", sample_write(), sample_write(conversation="c2"), sample_write(tenant="t2")) as s:
        yield s


def test_a_tenant_export_holds_every_point_of_it_and_nothing_else(store):
    records = list(export_records(store, "t1"))
    assert len(records) == sum(store.count(c, "t1") for c in COLLECTIONS)
    assert {r["tenant_id"] for r in records} == {"t1"}
    assert [r["collection"] for r in records][: store.count(TURNS, "t1")] == [TURNS] * store.count(TURNS, "t1")
    cards = [r for r in records if r["collection"] == CARDS]
    assert cards and all(r["turn_ids"] and "version" in r and "valid_from" in r and "superseded_by" in r for r in cards)
    orjson.dumps(records)  # JSON as it is written


def test_a_conversation_export_keeps_to_it(store):
    records = list(export_records(store, "t1", "c2"))
    assert records and {r["conversation_id"] for r in records} == {"c2"}
    assert list(export_records(store, "t3")) == []
