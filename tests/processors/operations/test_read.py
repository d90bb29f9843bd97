"""The inspector's reads, over exported records (no store)."""

from __future__ import annotations

from memstream.processors.operations.read import conversation_summaries, lineage, timeline_page


def turn(conv: str, seq: int, speaker: str = "Ann", ts: float = 0.0) -> dict:
    return {
        "collection": "turns",
        "id": f"t-{conv}-{seq}",
        "conversation_id": conv,
        "turn_id": f"D1:{seq}",
        "seq": seq,
        "speaker": speaker,
        "session_id": "S1",
        "event_ts": ts or float(seq),
        "event_time": f"2023-01-01T00:00:{seq:02d}+00:00",
    }


def card(cid: str, turn_ids: list[str], **fields: object) -> dict:
    return {"collection": "cards", "id": cid, "card_id": cid, "conversation_id": "c", "turn_ids": turn_ids, **fields}


def scene(sid: str, turn_ids: list[str], conv: str = "c") -> dict:
    return {"collection": "scenes", "id": sid, "conversation_id": conv, "turn_ids": turn_ids}


def test_conversations_count_and_show_turns_no_scene_holds_yet() -> None:
    turns = [turn("a", i) for i in range(4)] + [turn("b", 0, "Bo", ts=100.0)]
    rows = conversation_summaries(turns, [scene("s", ["D1:0", "D1:1"], "a")], {"a": 3})
    assert [r["conversation_id"] for r in rows] == ["a", "b"]  # newest last turn first
    by = {r["conversation_id"]: r for r in rows}
    assert by["a"]["turns"] == 4 and by["a"]["cards"] == 3 and by["a"]["scenes"] == 1
    assert by["a"]["waiting_turns"] == 2  # D1:2 and D1:3 are in no scene yet
    assert by["a"]["last_turn_id"] == "D1:3"
    assert by["b"]["cards"] == 0 and by["b"]["speakers"] == ["Bo"]


def test_a_timeline_page_holds_its_turns_and_what_cites_them() -> None:
    records = [turn("c", i) for i in range(6)] + [
        card("k1", ["D1:1"]),
        card("k2", ["D1:4"]),
        card("k3", ["D1:2", "D1:5"], superseded_by="k2"),
        scene("s1", ["D1:0", "D1:1", "D1:2"]),
        scene("s2", ["D1:3", "D1:4", "D1:5"]),
    ]
    first = timeline_page(records, cursor=0, limit=3)
    assert [r["turn_id"] for r in first.records if r["collection"] == "turns"] == ["D1:0", "D1:1", "D1:2"]
    assert {r["id"] for r in first.records if r["collection"] != "turns"} == {"k1", "k3", "s1"}
    assert first.next_cursor == 3
    assert first.summary["turns"] == 6 and first.summary["cards"] == 3 and first.summary["current_cards"] == 2
    second = timeline_page(records, cursor=first.next_cursor, limit=3)
    assert [r["turn_id"] for r in second.records if r["collection"] == "turns"] == ["D1:3", "D1:4", "D1:5"]
    assert second.next_cursor is None
    assert not timeline_page([], 0, 10).found


def test_fresh_turns_not_numbered_yet_come_last_on_the_last_page() -> None:
    fresh = [{**turn("c", 99, ts=ts), "turn_id": tid, "id": tid} for tid, ts in (("F2", 200.0), ("F1", 100.0))]
    for t in fresh:
        del t["seq"]  # a fresh turn its producer did not number, ahead of its flush
    records = [*fresh, *(turn("c", i) for i in range(4))]
    first = timeline_page(records, cursor=0, limit=3)
    assert [r["turn_id"] for r in first.records] == ["D1:0", "D1:1", "D1:2"] and first.next_cursor == 3
    last = timeline_page(records, cursor=first.next_cursor, limit=3)
    assert [r["turn_id"] for r in last.records] == ["D1:3", "F1", "F2"] and last.next_cursor is None
    assert last.summary["last_seq"] == 3 and last.summary["turns"] == 6
    everything = timeline_page(records, cursor=0, limit=10)
    assert [r["turn_id"] for r in everything.records] == ["D1:0", "D1:1", "D1:2", "D1:3", "F1", "F2"]


def test_lineage_follows_versions_both_ways_and_brings_the_source_turns() -> None:
    cards = [
        card("old", ["D1:1"], superseded_by="merged", valid_from="2023-01-01", valid_to="2023-02-01"),
        card("new", ["D1:4"], superseded_by="merged", valid_from="2023-02-01", valid_to="2023-02-01"),
        card("merged", [], lineage=["old", "new"], valid_from="2023-02-02"),
        card("other", ["D1:2"], valid_from="2023-01-05"),
    ]
    turns = [turn("c", i) for i in range(6)]
    page = lineage(cards, turns, "old")
    ids = [r["id"] for r in page.records if r["collection"] == "cards"]
    assert ids == ["old", "new", "merged"]  # oldest first; "other" is unrelated
    assert [r["turn_id"] for r in page.records if r["collection"] == "turns"] == ["D1:1", "D1:4"]
    assert page.summary["current"] == ["merged"]
    assert not lineage(cards, turns, "nope").found


def test_imported_history_numbered_below_zero_comes_first_from_the_start() -> None:
    records = [turn("c", i) for i in range(-3, 3)]
    start = timeline_page(records, cursor=None, limit=4)
    assert [r["seq"] for r in start.records] == [-3, -2, -1, 0] and start.next_cursor == 1
    assert start.summary["first_seq"] == -3 and start.summary["last_seq"] == 2
    assert [r["seq"] for r in timeline_page(records, cursor=0, limit=10).records] == [0, 1, 2]
