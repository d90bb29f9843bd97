from datetime import datetime, timedelta, timezone

import orjson
import pytest

from memstream.schemas import SCHEMA_VERSION, DeadLetter, SchemaError, StmTick, Turn, decode_segments_message
from tests.factories import segmented, turn


def test_turn_round_trips_through_bytes():
    t = turn(text="Hello there, Melanie!")
    again = Turn.from_bytes(t.to_bytes())
    assert again == t
    assert again.key == "t1/c1"
    assert SCHEMA_VERSION == 4
    assert orjson.loads(t.to_bytes())["schema_version"] == 3, "written as the oldest version that carries it"


def test_a_v1_payload_is_still_read():
    data = {**orjson.loads(turn().to_bytes()), "schema_version": 1}
    assert Turn.model_validate(data) == turn()


def test_a_payload_says_v4_only_when_it_uses_what_v4_added():
    from memstream.schemas import ReadRequest
    from tests.factories import compressed

    live = compressed(turn())
    data = orjson.loads(live.to_bytes())
    assert data["schema_version"] == data["turn"]["schema_version"] == 3, "a v3 reader takes it, and its turn"
    assert "imported" not in data
    imported = orjson.loads(live.model_copy(update={"imported": True}).to_bytes())
    assert imported["schema_version"] == 4 and imported["imported"] is True
    earlier = orjson.loads(turn().model_copy(update={"metadata": {"seq": -3}}).to_bytes())
    assert earlier["schema_version"] == 4
    fields = dict(tenant_id="t", conversation_id="c", correlation_id="q", reply_topic="m.replies")
    now = datetime.now(timezone.utc)
    assert orjson.loads(ReadRequest(read="timeline", cursor=5, sent_at=now, **fields).to_bytes())["schema_version"] == 3
    assert orjson.loads(ReadRequest(read="timeline", sent_at=now, **fields).to_bytes())["schema_version"] == 4


def test_naive_and_offset_times_become_utc():
    data = orjson.loads(turn().to_bytes())
    data["event_time"] = "2023-05-08T15:56:00+02:00"
    t = Turn.model_validate(data)
    assert t.event_time == datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    data["event_time"] = "2023-05-08T13:56:00"
    assert Turn.model_validate(data).event_time.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (orjson.dumps({"tenant_id": "t1"}), "conversation_id"),
        (orjson.dumps({**orjson.loads(turn().to_bytes()), "event_time": 12.5e20}), "event_time"),
        (orjson.dumps({**orjson.loads(turn().to_bytes()), "text": 42}), "text"),
        (orjson.dumps({**orjson.loads(turn().to_bytes()), "tenant_id": "a/b"}), "tenant_id"),
        (orjson.dumps({**orjson.loads(turn().to_bytes()), "schema_version": 99}), "schema_version"),
        (orjson.dumps({**orjson.loads(turn().to_bytes()), "surprise": 1}), "surprise"),
    ],
)
def test_bad_turns_are_rejected_with_a_reason(raw, fragment):
    with pytest.raises(SchemaError) as err:
        Turn.from_bytes(raw)
    assert fragment in str(err.value)


def test_segments_topic_carries_turns_and_ticks():
    st = segmented(turn())
    assert decode_segments_message(st.to_bytes()) == st
    tick = StmTick(tenant_id="t1", conversation_id="c1", sent_at=datetime.now(timezone.utc))
    assert isinstance(decode_segments_message(tick.to_bytes()), StmTick)
    with pytest.raises(SchemaError):
        decode_segments_message(b"\xff\xfe")


def test_dead_letter_keeps_the_original_bytes():
    raw = b"\x00\x01 not json \xff"
    letter = DeadLetter(
        stage="compress",
        reason="not JSON",
        error_type="SchemaError",
        topic="memory.turns",
        original_b64=DeadLetter.encode(raw),
        original_size=len(raw),
        failed_at=datetime.now(timezone.utc),
    )
    assert DeadLetter.from_bytes(letter.to_bytes()).original == raw


def test_a_position_below_zero_is_imported_history_and_export_cursors_are_not():
    from datetime import datetime, timezone

    from memstream.schemas import ReadRequest, Turn

    turn = Turn(
        tenant_id="t",
        conversation_id="c",
        session_id="S1",
        turn_id="m1",
        speaker="Ann",
        text="hi",
        event_time=datetime(2024, 1, 1, tzinfo=timezone.utc),
        metadata={"seq": -4},
    )
    assert turn.seq == -4
    assert turn.model_copy(update={"metadata": {"seq": True}}).seq is None
    fields = dict(tenant_id="t", correlation_id="q1", reply_topic="memory.replies", sent_at=datetime.now(timezone.utc))
    assert ReadRequest(read="timeline", conversation_id="c", cursor=-4, **fields).cursor == -4
    with pytest.raises(ValueError, match="export cursor"):
        ReadRequest(read="export", cursor=-1, **fields)


def test_a_flush_of_imported_turns_only_takes_the_bulk_slot():
    from memstream.schemas import imported_flush
    from tests.factories import compressed, turn

    def flush(*imported: bool) -> bytes:
        items = [compressed(turn(f"m{i}", seq=i)).model_copy(update={"imported": x}) for i, x in enumerate(imported)]
        segment = {"segment_id": "s", "topic_label": "t", "turns": [i.model_dump(mode="json") for i in items]}
        return orjson.dumps({"kind": "stm_flush", "segments": [segment]})

    assert imported_flush(flush(True, True))
    assert not imported_flush(flush(True, False))
    assert not imported_flush(b"not json") and not imported_flush(b'{"kind": "forget"}')
