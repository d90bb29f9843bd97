from collections import Counter
from datetime import datetime, timezone

import pytest

from memstream.platforms import TurnRemoval, map_events
from memstream.schemas import Turn
from memstream.schemas.base import base_turn_id
from tests.platforms import by_id, covered, events, rejections, valid_id

NOW = datetime(2024, 6, 16, tzinfo=timezone.utc)
GROUP = "chat-1001987654321"


def mapped(**kwargs):
    return map_events("telegram", events("telegram"), tenant_id="acme", now=NOW, **kwargs)


def test_fixture_maps_to_the_expected_items():
    result = mapped()
    assert [(t.conversation_id, t.turn_id) for t in result.turns] == [
        (GROUP, "2040"),
        (GROUP, "2041"),
        (GROUP, "2042"),
        (GROUP, "2041~1718468100000"),
        (GROUP, "2046"),
        ("5511223344", "311"),
        (GROUP, "2047"),
        (GROUP, "2050"),
    ]
    assert [(r.turn_ids, r.reason) for r in result.removals] == [(("2041",), "edited")]
    assert result.skipped == Counter(
        {
            "telegram:message:sticker": 1,
            "telegram:message:new_chat_members": 1,
            "telegram:callback_query": 1,
            "telegram:my_chat_member": 1,
            "telegram:message_reaction": 1,
        }
    )
    assert rejections(result) == [
        (11, "update.message.date: expected unix seconds, got str", "acme"),
        (12, "update: expected an object, got int", "acme"),
        (13, "update.message.chat: missing", "acme"),
    ]


def test_a_negative_chat_id_gives_a_valid_conversation_id():
    conversations = {t.conversation_id for t in mapped().turns}
    assert conversations == {GROUP, "5511223344"}
    assert all(valid_id(c) for c in conversations)


def test_speakers_roles_times_and_metadata():
    turns = by_id(mapped())
    eva = turns["2040"]
    assert (eva.speaker, eva.role, eva.session_id) == ("Eva Lindqvist", "user", "2024-06-15")
    assert eva.event_time == datetime(2024, 6, 15, 16, 0, tzinfo=timezone.utc)
    assert turns["2042"].speaker == "Tomas"  # no last name
    assert turns["2042"].text == "Biscuit after his grooming appointment, he got a summer cut."  # the caption
    assert turns["2042"].metadata["media"] == "photo"
    assert (turns["2046"].speaker, turns["2046"].role, turns["2046"].metadata["bot"]) == ("Memo", "assistant", True)
    assert turns["2047"].metadata["files"] == ["herring-recipe.pdf"]
    assert turns["2050"].metadata["reply_to"] == 2040
    assert turns["311"].metadata["chat_type"] == "private"
    named = by_id(mapped(names={"7733445566": "Grandma Eva"}))
    assert named["2040"].speaker == "Grandma Eva"


def test_an_edit_forgets_the_old_version_then_adds_the_new_one():
    result = mapped()
    index = next(i for i, item in enumerate(result.items) if isinstance(item, TurnRemoval))
    forget, new = result.items[index], result.items[index + 1]
    original = by_id(result)["2041"]
    assert isinstance(new, Turn) and base_turn_id(new.turn_id) == "2041" and forget.turn_ids == ("2041",)
    assert new.event_time == datetime(2024, 6, 15, 16, 15, tzinfo=timezone.utc)  # edit_date
    assert original.event_time <= forget.before < new.event_time
    assert covered(forget, original) and not covered(forget, new)
    assert new.text.endswith("and the schnapps.")


def test_an_edit_within_the_same_second_still_forgets_the_original():
    message = {"message_id": 7, "from": {"id": 1, "first_name": "Nora"}, "chat": {"id": 1, "type": "private"}}
    sent = {"update_id": 1, "message": {**message, "date": 1718467200, "text": "Dinner at 7"}}
    fixed = {"update_id": 2, "edited_message": {**message, "date": 1718467200, "edit_date": 1718467200, "text": "At 8"}}
    result = map_events("telegram", [sent, fixed], tenant_id="acme")
    original, forget, new = result.items
    assert isinstance(original, Turn) and isinstance(forget, TurnRemoval) and isinstance(new, Turn)
    assert covered(forget, original) and not covered(forget, new)


def test_redelivery_gives_an_equal_turn_and_the_tenant_is_required():
    update = events("telegram")[0]
    assert map_events("telegram", [update, update], tenant_id="acme").turns == mapped().turns[:1] * 2
    with pytest.raises(ValueError, match="pass tenant_id"):
        map_events("telegram", [update])


def test_business_deletions_and_channel_posts():
    deleted = {
        "update_id": 9,
        "deleted_business_messages": {"business_connection_id": "b1", "chat": {"id": -42}, "message_ids": [5, 6]},
    }
    post = {
        "update_id": 10,
        "channel_post": {
            "message_id": 77,
            "sender_chat": {"id": -1001, "title": "Hiking news", "type": "channel"},
            "chat": {"id": -1001, "title": "Hiking news", "type": "channel"},
            "date": 1718467200,
            "text": "Trail 4 reopens on Saturday.",
        },
    }
    result = map_events("telegram", [deleted, post], tenant_id="acme", now=NOW)
    removal, turn = result.items
    assert isinstance(removal, TurnRemoval) and isinstance(turn, Turn)
    assert (removal.conversation_id, removal.turn_ids, removal.before) == ("chat-42", ("5", "6"), NOW)
    assert (turn.conversation_id, turn.speaker) == ("chat-1001", "Hiking news")


def test_empty_text_is_rejected_and_a_text_less_message_skipped():
    message = {"message_id": 8, "from": {"id": 1, "first_name": "Nora"}, "chat": {"id": 1}, "date": 1718467200}
    result = map_events(
        "telegram",
        [{"update_id": 1, "message": {**message, "text": "  "}}, {"update_id": 2, "message": message}],
        tenant_id="t",
    )
    assert [r.reason for r in result.rejected] == ["update.message.text: empty"]
    assert result.skipped == Counter({"telegram:message:no_text": 1})
