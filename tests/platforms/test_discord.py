from collections import Counter
from datetime import datetime, timezone

from memstream.platforms import TurnRemoval, map_events
from memstream.schemas import Turn
from memstream.schemas.base import base_turn_id
from tests.platforms import by_id, covered, events, rejections

NOW = datetime(2024, 7, 12, 20, 0, tzinfo=timezone.utc)
GUILD, CHANNEL, THREAD = "1070131367116931072", "1070132625408131073", "1261394146099331081"
NORA, TOMAS, PRIYA, MEMO = "1261389112934531079", "1261389616251011079", "1261389930823811079", "1261390622883971079"
PACKING, OOPS, LEE = "1261394397757571079", "1261394649415811079", "1261404212428931079"


def mapped(**kwargs):
    return map_events("discord", events("discord"), now=NOW, **kwargs)


def test_fixture_maps_to_the_expected_items():
    result = mapped()
    assert [t.turn_id for t in result.turns] == [NORA, TOMAS, PRIYA, f"{TOMAS}~1720809342250", MEMO, PACKING, OOPS, LEE]
    assert [(r.turn_ids, r.reason) for r in result.removals] == [((TOMAS,), "edited"), ((OOPS,), "deleted")]
    assert result.skipped == Counter(
        {
            "discord:op10": 1,
            "discord:op11": 1,
            "discord:READY": 1,
            "discord:TYPING_START": 1,
            "discord:MESSAGE_REACTION_ADD": 1,
            "discord:MESSAGE_UPDATE:no_content": 1,
            "discord:MESSAGE_CREATE:type7": 1,
            "discord:MESSAGE_CREATE:no_text": 1,
        }
    )
    assert rejections(result) == [
        (13, "d.guild_id: missing (a direct message): pass tenant_id for DMs", None),
        (15, "d.timestamp: unparseable time 'last tuesday'", GUILD),
        (16, "event.d: missing", None),
    ]


def test_speakers_roles_times_sessions_and_conversations():
    turns = by_id(mapped())
    nora = turns[NORA]
    assert (nora.speaker, nora.role, nora.session_id) == ("Nora", "user", "2024-07-12")
    assert (nora.tenant_id, nora.conversation_id) == (GUILD, CHANNEL)
    assert nora.event_time == datetime(2024, 7, 12, 18, 30, tzinfo=timezone.utc)
    assert turns[TOMAS].speaker == "tomasf"  # no global_name: the username
    assert turns[PRIYA].speaker == "Priya Raman" and turns[PRIYA].metadata["reply_to"] == TOMAS
    assert (turns[MEMO].speaker, turns[MEMO].role, turns[MEMO].metadata["bot"]) == ("Memo", "assistant", True)
    assert turns[PACKING].conversation_id == THREAD  # a thread is a channel: its own conversation
    assert turns[LEE].tenant_id == "1019397065932931077"  # another guild, another tenant


def test_an_edit_forgets_the_old_version_then_adds_the_new_one():
    result = mapped()
    index = next(i for i, item in enumerate(result.items) if isinstance(item, TurnRemoval) and item.reason == "edited")
    forget, new = result.items[index], result.items[index + 1]
    original = by_id(result)[TOMAS]
    assert isinstance(forget, TurnRemoval) and isinstance(new, Turn)
    assert base_turn_id(new.turn_id) == TOMAS and forget.turn_ids == (TOMAS,)
    assert new.event_time == datetime(2024, 7, 12, 18, 35, 42, 250000, tzinfo=timezone.utc)  # edited_timestamp
    assert original.event_time <= forget.before < new.event_time
    assert covered(forget, original) and not covered(forget, new)
    assert new.text == "I can drive, my Volvo fits five people plus the dog."
    assert new.session_id == original.session_id and new.metadata["edited"] is True


def test_a_deletion_names_the_message_and_covers_up_to_now():
    result = mapped()
    deleted = [r for r in result.removals if r.reason == "deleted"][0]
    assert (deleted.tenant_id, deleted.conversation_id, deleted.turn_ids) == (GUILD, CHANNEL, (OOPS,))
    assert deleted.before == NOW  # Discord does not time deletions
    assert covered(deleted, by_id(result)[OOPS])


def test_direct_messages_need_a_tenant_and_the_override_wins():
    dm = events("discord")[13]
    (turn,) = map_events("discord", [dm], tenant_id="acme").turns
    assert turn.tenant_id == "acme" and turn.speaker == "Priya Raman"
    assert {t.tenant_id for t in mapped(tenant_id="acme").turns} == {"acme"}


def test_redelivery_gives_an_equal_turn():
    create = events("discord")[2]
    assert map_events("discord", [create, create]).turns == map_events("discord", [create]).turns * 2


def test_bulk_deletes_bare_messages_and_embed_only_updates():
    bulk = {"op": 0, "t": "MESSAGE_DELETE_BULK", "d": {"ids": [NORA, TOMAS], "channel_id": CHANNEL, "guild_id": GUILD}}
    (removal,) = map_events("discord", [bulk], now=NOW).removals
    assert removal.turn_ids == (NORA, TOMAS) and removal.reason == "deleted"
    bare = events("discord")[2]["d"]  # a message object as the REST API returns it
    assert map_events("discord", [bare]).turns == map_events("discord", [events("discord")[2]]).turns
    unedited = {"op": 0, "t": "MESSAGE_UPDATE", "d": {**bare, "embeds": [{"type": "link"}]}}
    assert map_events("discord", [unedited]).skipped == Counter({"discord:MESSAGE_UPDATE:not_edited": 1})


def test_missing_content_intent_is_reported():
    d = {**events("discord")[2]["d"], "content": ""}
    (rejected,) = map_events("discord", [{"op": 0, "t": "MESSAGE_CREATE", "d": d}]).rejected
    assert rejected.reason == "d.content: empty (is the MESSAGE_CONTENT intent enabled?)"
    assert rejected.tenant_id == GUILD
