from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns, parse_evidence


def test_malformed_evidence_ids_parse_defensively():
    assert parse_evidence(["D1:3"]) == ["D1:3"]
    assert parse_evidence(["D8:6; D9:17"]) == ["D8:6", "D9:17"]
    assert parse_evidence(["D"]) == []
    assert parse_evidence(["D:11:26"]) == []
    assert parse_evidence("D01:02") == ["D1:2"]


def test_demo_conversation_is_locomo_shaped_and_streams_in_order():
    [sample] = load_locomo(demo_conversation_path())
    turns = list(locomo_turns(sample, tenant_id="demo"))
    assert len(turns) == sample.turn_count == 30
    assert [t.metadata["seq"] for t in turns] == list(range(30))
    assert sum(t.last_in_session for t in turns) == 3
    assert all(a.event_time <= b.event_time for a, b in zip(turns, turns[1:]))
    assert all(q.evidence for q in sample.qa)
    assert {t.turn_id for t in turns} >= {e for q in sample.qa for e in q.evidence}
