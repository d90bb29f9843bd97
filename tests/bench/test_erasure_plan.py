"""The erasure bench's plan: one forget of each scope kind on distinct conversations, and the turns
each covers; how it counts forgotten copies in the durable record (no service)."""

from __future__ import annotations

from datetime import datetime, timezone

from memstream.bench.erasure import ErasureOptions, _scope, erasure_turns, forgotten_ids, plan_forgets
from memstream.bench.erasure_record import forgotten_versions, record_copies
from memstream.processors.write.index import CARDS, PROFILES, SCENES, TRIGGERS, TURNS
from memstream.schemas.record import StoredPoint


def test_every_scope_kind_is_planned_on_its_own_conversation_and_covers_what_it_names(tmp_path):
    streams = erasure_turns(ErasureOptions(data=None, tenants=3, workdir=tmp_path))
    assert len({t for t, _ in streams}) == 3 and len(streams) >= 3
    plans = plan_forgets(streams)
    kinds = [p["kind"] for p in plans]
    assert kinds[0] == "speaker" and "tenant" in kinds
    targets = [(p["tenant"], p.get("conversation")) for p in plans]
    assert len(set(targets)) == len(targets)
    now = datetime.now(timezone.utc)
    gone = forgotten_ids(streams, [_scope(p, now) for p in plans])
    speaker = plans[0]
    key = (speaker["tenant"], speaker["conversation"])
    assert gone[key] == {t.turn_id for t in streams[key] if t.speaker == speaker["speaker"]}
    last_tenant = plans[-1]["tenant"]
    assert all(gone[k] == {t.turn_id for t in v} for k, v in streams.items() if k[0] == last_tenant)
    untouched = [k for k in streams if k not in {key} and k[0] != last_tenant and k not in targets]
    assert untouched and all(not gone[k] for k in untouched)
    # Said after the request: not covered.
    assert not any(forgotten_ids(streams, [_scope(plans[-1], datetime(2000, 1, 1, tzinfo=timezone.utc))]).values())


def _point(collection: str, point_id: str, conversation: str = "c1", tenant: str = "t", **payload) -> StoredPoint:
    return StoredPoint(
        tenant_id=tenant,
        collection=collection,
        point_id=point_id,
        payload={"tenant_id": tenant, "conversation_id": conversation, **payload},
    )


def test_the_record_is_counted_as_the_store_is_a_forgotten_turn_and_what_derives_from_it():
    gone = {("t", "c1"): {"D1:1"}}
    points = [
        _point(TURNS, "turn-1", turn_id="D1:1", turn_ids=["D1:1"]),  # the forgotten turn itself
        _point(TURNS, "turn-1b", turn_id="D1:1#2", turn_ids=["D1:1#2"]),  # a chunk of it
        _point(TURNS, "turn-2", turn_id="D1:2", turn_ids=["D1:2"]),  # kept
        _point(CARDS, "card-1", turn_ids=["D1:2", "D1:1"]),  # cites a forgotten and a kept turn: goes
        _point(CARDS, "card-2", turn_ids=["D1:2"]),
        _point(TRIGGERS, "trig-1", host_id="card-2"),  # its host is there
        _point(TRIGGERS, "trig-2", host_id="card-gone"),  # orphaned
        _point(TURNS, "other", conversation="c2", turn_id="D1:1", turn_ids=["D1:1"]),  # same id, other conversation
        _point(TURNS, "other-tenant", tenant="u", turn_id="D1:1", turn_ids=["D1:1"]),
    ]
    counts = record_copies(points, gone)
    assert counts == {TURNS: 2, CARDS: 1, SCENES: 0, PROFILES: 0, TRIGGERS: 1}
    assert sum(record_copies(points[2:3] + points[4:6] + points[7:], gone).values()) == 0


def test_every_version_of_the_raw_record_that_holds_forgotten_text_is_counted_tombstones_not():
    gone = {("t", "c1"): {"D1:1"}}
    forgotten_card = _point(CARDS, "card-1", turn_ids=["D1:1"], text="she lives in Oslo")
    messages = [
        (b"t/cards/card-1", forgotten_card.to_bytes()),
        (b"t/cards/card-1", _point(CARDS, "card-1", turn_ids=["D1:1"], text="she moved").to_bytes()),
        (b"t/triggers/trig-1", _point(TRIGGERS, "trig-1", host_id="card-1", text="where").to_bytes()),
        (b"t/turns/turn-2", _point(TURNS, "turn-2", turn_id="D1:2", turn_ids=["D1:2"]).to_bytes()),
        (b"t/cards/card-1", None),
        (b"t/triggers/trig-1", None),
    ]
    assert forgotten_versions(messages, gone) == 3
    assert forgotten_versions([m for m in messages if m[1] is None or b"D1:2" in m[1]], gone) == 0
