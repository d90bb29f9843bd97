"""Update queues over the real Qdrant engine (qdrant-client local mode), with hand-made vectors."""

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from memstream.adapters.qdrant_store import QdrantStore
from memstream.ports import StorePoint
from processors.consolidate import update_queue
from processors.index import COLLECTIONS, CARDS
from schemas import Card, Provenance

T0 = datetime(2023, 5, 1, tzinfo=timezone.utc)


def unit(*xs):
    v = np.asarray(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


def card(card_id, subject, days, content="x"):
    return Card(card_id=card_id, subject=subject, type="state", content=content,
                event_time=T0 + timedelta(days=days), provenance=Provenance(turn_ids=["D1:1"]),
                valid_from=T0 + timedelta(days=days))


@pytest.fixture
def store(tmp_path):
    s = QdrantStore(path=tmp_path / "q")
    s.ensure_collections(COLLECTIONS, 3)
    yield s
    s.close()


def put(store, tenant, c, vector):
    store.upsert(CARDS, [StorePoint(c.card_id, vector, {
        "tenant_id": tenant, "conversation_id": "c1", "subject": c.subject,
        "event_ts": c.event_time.timestamp()})])


IDS = {name: f"00000000-0000-0000-0000-00000000000{i}" for i, name in enumerate("abcdefg")}


def test_queue_holds_similar_older_cards_of_the_same_subject_and_tenant_only(store):
    put(store, "t1", card(IDS["a"], "Maria", 0), unit(1, 0.05, 0))      # similar, older: in
    put(store, "t1", card(IDS["b"], "Maria", 1), unit(0, 1, 0))         # dissimilar: out
    put(store, "t1", card(IDS["c"], "Tom", 2), unit(1, 0, 0))           # other subject: out
    put(store, "t2", card(IDS["d"], "Maria", 3), unit(1, 0, 0))         # other tenant: out
    put(store, "t1", card(IDS["e"], "Maria", 40), unit(1, 0.02, 0))     # newer than the card: out
    new = card(IDS["f"], "Maria", 30)
    put(store, "t1", new, unit(1, 0, 0))
    update = update_queue(store, "t1", "c1", new, unit(1, 0, 0), tau=0.8, top_n=10)
    assert [c.card_id for c in update.candidates] == [IDS["a"]]
    assert update.candidates[0].score >= 0.8
    assert update.action == "candidates" and update.card_id == IDS["f"]


def test_queue_is_capped_at_top_n(store):
    for i, name in enumerate("abcde"):
        put(store, "t1", card(IDS[name], "Maria", i), unit(1, 0.01 * i, 0))
    new = card(IDS["f"], "Maria", 30)
    update = update_queue(store, "t1", "c1", new, unit(1, 0, 0), tau=0.5, top_n=3)
    assert len(update.candidates) == 3
    assert [c.card_id for c in update.candidates] == [IDS["a"], IDS["b"], IDS["c"]]
