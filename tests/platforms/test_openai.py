from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from memstream.platforms import map_events
from tests.platforms import by_id, events, rejections

START = datetime(2024, 6, 10, 9, 0, tzinfo=timezone.utc)
RESPONSE_ID = "msg_6650a1b2c3d4e5f60718293a4b5c6d7e"


def mapped(**kwargs):
    kwargs = {"tenant_id": "acme", "conversation_id": "nora-memo", "start_time": START, **kwargs}
    return map_events("openai", events("openai"), **kwargs)


def test_fixture_maps_to_the_expected_items():
    result = mapped()
    assert [t.turn_id for t in result.turns] == ["0", "1", "2", "3", "6", "7", RESPONSE_ID, "12", "13", "17"]
    assert result.removals == []
    assert result.skipped == Counter(
        {
            "openai:assistant:tool_calls": 1,
            "openai:tool": 1,
            "openai:reasoning": 1,
            "openai:function_call": 1,
            "openai:function_call_output": 1,
        }
    )
    assert rejections(result) == [
        (14, "message.content: missing", "acme"),
        (15, "message: expected an object, got str", "acme"),
        (16, "message.role: unknown role 'critic' (user, assistant, system, developer, tool)", "acme"),
    ]


def test_speakers_roles_times_and_sessions():
    turns = by_id(mapped())
    assert [(turns[i].speaker, turns[i].role) for i in ("0", "1", "2", "12", "13")] == [
        ("System", "system"),
        ("Nora", "user"),
        ("Assistant", "assistant"),
        ("Developer", "system"),
        ("User", "user"),
    ]
    assert turns["13"].event_time == START + timedelta(seconds=13)  # start_time + position keeps the order
    assert {t.session_id for t in turns.values()} == {"s1"}
    assert {(t.tenant_id, t.conversation_id) for t in turns.values()} == {("acme", "nora-memo")}
    named = by_id(mapped(names={"assistant": "Memo", "Nora": "Nora L."}, session_id="june"))
    assert (named["2"].speaker, named["1"].speaker, named["1"].session_id) == ("Memo", "Nora L.", "june")


def test_content_parts_and_responses_items():
    turns = by_id(mapped())
    assert turns["3"].text == "They're already sharing the sofa. Here's a photo:"  # the image part is left out
    assert turns["3"].metadata["non_text_parts"] == 1 and turns["3"].image_captions == []
    assert turns["6"].text == "Lovely! I've noted that Pixel and Biscuit get along."
    assert turns["7"].text == "Also, Pixel's vet appointment is on June 12 at 9am with Dr. Okafor."  # input_text
    answer = turns[RESPONSE_ID]  # output_text, with its own id
    assert answer.role == "assistant" and answer.text.startswith("Got it: Pixel's vet appointment")
    assert answer.metadata == {"platform": "openai", "index": 11, "message_id": RESPONSE_ID, "api": "responses"}


def test_message_times_win_and_redelivery_is_equal():
    timed = [
        {"role": "user", "content": "I moved to Gothenburg.", "created_at": 1718010000},
        {"role": "assistant", "content": "Noted.", "timestamp": "2024-06-10T09:00:05+02:00"},
    ]
    first, second = map_events("openai", timed, tenant_id="t", conversation_id="c").turns
    assert first.event_time == datetime.fromtimestamp(1718010000, timezone.utc)
    assert second.event_time == datetime(2024, 6, 10, 7, 0, 5, tzinfo=timezone.utc)
    assert mapped().turns == mapped().turns


def test_missing_arguments_raise_clearly():
    with pytest.raises(ValueError, match="pass conversation_id"):
        map_events("openai", [], tenant_id="acme")
    with pytest.raises(ValueError, match="pass tenant_id"):
        map_events("openai", [], conversation_id="c")


@pytest.mark.parametrize(
    "message, reason",
    [
        ({"role": "user", "content": "   "}, "message.content: empty text"),
        ({"role": "user", "content": []}, "message.content: no text"),
        ({"role": "user", "content": [{"type": "text"}]}, "message.content[0].text: missing"),
        ({"role": "user", "content": 7}, "message.content: expected a string or a list of parts, got int"),
        ({"role": "user", "content": "hi", "created_at": "soon"}, "message.created_at: unparseable time 'soon'"),
        ({"role": "user", "content": "hi", "name": "x" * 201}, "invalid turn: speaker: String should have at most 200"),
    ],
)
def test_malformed_messages_are_rejected_with_the_field(message, reason):
    (rejected,) = map_events("openai", [message], tenant_id="t", conversation_id="c").rejected
    assert rejected.reason.startswith(reason)
