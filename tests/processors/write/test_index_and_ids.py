from memstream.processors.ids import point_id
from memstream.processors.write.extract import ExtractiveExtractor
from memstream.processors.write.index import CARDS, SCENES, TRIGGERS, TURNS, points_for_write
from tests.factories import flush_of
from tests.processors.write.test_extract import FLUSH_TURNS


def test_point_ids_are_uuid5_of_tenant_conversation_provenance_content():
    a = point_id("card", "t1", "c1", ["D1:2", "D1:1"], "x")
    assert a == point_id("card", "t1", "c1", ["D1:1", "D1:2"], "x")  # provenance order is irrelevant
    assert a != point_id("card", "t2", "c1", ["D1:1", "D1:2"], "x")
    assert a != point_id("card", "t1", "c2", ["D1:1", "D1:2"], "x")
    assert a != point_id("card", "t1", "c1", ["D1:1"], "x")
    assert a != point_id("card", "t1", "c1", ["D1:1", "D1:2"], "y")
    assert len(a) == 36 and a[14] == "5"


def test_a_write_becomes_cards_scenes_triggers_and_raw_turns_with_tenant_payloads():
    write = ExtractiveExtractor().extract(flush_of(*FLUSH_TURNS))
    specs = points_for_write(write)
    by = {}
    for s in specs:
        by.setdefault(s.collection, []).append(s)
        assert s.payload["tenant_id"] == "t1" and s.payload["conversation_id"] == "c1"
    assert len(by[TURNS]) == 2 and {s.payload["turn_id"] for s in by[TURNS]} == {"D1:1", "D1:2"}
    assert len(by[CARDS]) == len(write.cards)
    assert len(by[SCENES]) == len(write.scenes)
    assert all(
        t.payload["host_id"] in {c.card_id for c in write.cards} | {s.scene_id for s in write.scenes}
        for t in by[TRIGGERS]
    )
    # redelivery produces the very same ids
    assert [s.id for s in specs] == [s.id for s in points_for_write(write)]
    assert len({s.id for s in specs}) == len(specs)
