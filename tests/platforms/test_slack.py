from collections import Counter
from datetime import datetime, timezone

from memstream.platforms import TurnRemoval, map_events
from memstream.schemas import Turn
from memstream.schemas.base import base_turn_id
from tests.platforms import by_id, covered, events, rejections

NOW = datetime(2024, 6, 4, tzinfo=timezone.utc)
THREAD = "1717408862.000200"


def mapped(**kwargs):
    return map_events("slack", events("slack"), now=NOW, **kwargs)


def test_fixture_maps_to_the_expected_items():
    result = mapped()
    assert [t.turn_id for t in result.turns] == [
        "1717408800.000100",
        THREAD,
        "1717408925.000300",
        "1717408925.000300~1717409100000",
        "1717409220.000700",
        "1717409400.000800",
        "1717412400.001000",
        "1717412460.001100",
        "1717416000.000100",
        "1717412580.001500",
        "1717412640.001600",
    ]
    assert [(r.turn_ids, r.reason) for r in result.removals] == [
        (("1717408925.000300",), "edited"),
        (("1717412460.001100",), "deleted"),
    ]
    assert result.skipped == Counter(
        {
            "slack:url_verification": 1,
            "slack:reaction_added": 1,
            "slack:channel_join": 1,
            "slack:file_share:no_text": 1,
            "slack:app_mention": 1,
            "slack:message_changed:not_edited": 1,
        }
    )
    assert rejections(result) == [
        (13, "event.ts: missing", "T04MEMSTRM"),
        (14, "event.text: empty", "T04MEMSTRM"),
        (16, "event: expected an object, got str", None),
    ]
    assert result.rejected[2].raw == b'"not-an-event"'


def test_speakers_roles_times_and_sessions():
    turns = by_id(mapped())
    first = turns["1717408800.000100"]
    assert (first.speaker, first.role, first.session_id) == ("Nora", "user", "2024-06-03")
    assert first.event_time == datetime(2024, 6, 3, 10, 0, 0, 100, tzinfo=timezone.utc)  # ts micro part kept exactly
    assert first.tenant_id == "T04MEMSTRM" and first.conversation_id == "C07WEEKEND"
    assert turns[THREAD].speaker == "U02TOMAS"  # no profile, no names: the user id
    assert turns["1717409220.000700"].speaker == "Priya Raman"  # empty display_name: real_name
    bot = turns["1717412400.001000"]
    assert (bot.speaker, bot.role, bot.metadata["bot"]) == ("Memo", "assistant", True)
    modern_bot = turns["1717412640.001600"]  # a bot user's message: no subtype, a bot_profile
    assert (modern_bot.speaker, modern_bot.role) == ("Memo", "assistant")
    reply = turns["1717412580.001500"]
    assert reply.session_id == f"thread-{THREAD}" and reply.metadata["thread_ts"] == THREAD
    assert turns[THREAD].session_id == "2024-06-03"  # the thread's parent stays in its day
    assert turns["1717409400.000800"].metadata["files"] == ["biscuit-vaccinations.pdf"]
    assert all(t.image_captions == [] for t in turns.values())


def test_names_map_user_ids_and_mentions():
    turns = by_id(mapped(names={"U02TOMAS": "Tomas", "U01NORA": "Nora L."}))
    assert turns[THREAD].speaker == "Tomas"
    assert turns[THREAD].text == "Congrats @Nora L.!! Does that mean you're moving to Gothenburg?"
    assert turns["1717408800.000100"].speaker == "Nora L."  # the mapping wins over the profile


def test_an_edit_forgets_the_old_version_then_adds_the_new_one():
    result = mapped()
    index = next(i for i, item in enumerate(result.items) if isinstance(item, TurnRemoval) and item.reason == "edited")
    forget, new = result.items[index], result.items[index + 1]
    original = by_id(result)["1717408925.000300"]
    assert isinstance(forget, TurnRemoval) and isinstance(new, Turn)
    assert base_turn_id(new.turn_id) == original.turn_id == forget.turn_ids[0]
    assert new.event_time == datetime(2024, 6, 3, 10, 5, tzinfo=timezone.utc)  # edited.ts
    assert original.event_time <= forget.before < new.event_time
    assert covered(forget, original) and not covered(forget, new)
    assert new.text.endswith("next Thursday.") and new.session_id == f"thread-{THREAD}"
    assert new.metadata["edited"] is True and new.metadata["original_time"] == original.event_time.isoformat()


def test_a_deletion_names_the_deleted_message():
    result = mapped()
    deleted = [r for r in result.removals if r.reason == "deleted"][0]
    gone = by_id(result)["1717412460.001100"]
    assert deleted.turn_ids == (gone.turn_id,)
    assert deleted.before == datetime(2024, 6, 3, 11, 1, 15, 1200, tzinfo=timezone.utc)  # the deletion's own ts
    assert covered(deleted, gone)


def test_redelivery_gives_an_equal_turn():
    envelope = events("slack")[1]
    once = map_events("slack", [envelope], now=NOW).turns
    twice = map_events("slack", [envelope, envelope], now=datetime(2030, 1, 1, tzinfo=timezone.utc)).turns
    assert twice == once * 2


def test_tenants_follow_the_team_and_the_override_wins():
    turns = by_id(mapped())
    assert turns["1717416000.000100"].tenant_id == "T09ACMECO"
    assert turns["1717416000.000100"].conversation_id == "C01GENERAL"
    overridden = mapped(tenant_id="acme")
    assert {t.tenant_id for t in overridden.turns} == {"acme"}
    assert {r.tenant_id for r in overridden.removals} == {"acme"}
    assert {r.tenant_id for r in overridden.rejected} == {"acme"}


def test_bare_events_and_socket_mode():
    bare = {"type": "message", "user": "U1", "text": "Lunch at noon?", "ts": "1717408800.000001", "channel": "D0123"}
    rejected = map_events("slack", [bare]).rejected
    assert len(rejected) == 1 and "pass tenant_id" in rejected[0].reason
    (turn,) = map_events("slack", [bare], tenant_id="acme").turns
    assert (turn.tenant_id, turn.conversation_id, turn.turn_id) == ("acme", "D0123", "1717408800.000001")
    history = {k: v for k, v in bare.items() if k != "channel"}  # conversations.history names no channel
    assert map_events("slack", [history], tenant_id="acme", conversation_id="dm-u1").turns[0].conversation_id == "dm-u1"
    socket = {"envelope_id": "e1", "type": "events_api", "payload": events("slack")[1]}
    assert map_events("slack", [socket]).turns == map_events("slack", [events("slack")[1]]).turns


def test_malformed_times_and_ids_are_rejected_with_the_field():
    base = {"type": "message", "user": "U1", "text": "hi", "channel": "C1", "team": "T1"}
    result = map_events(
        "slack",
        [
            {**base, "ts": "yesterday"},
            {**base, "ts": "1717408800.000001", "thread_ts": 17},
            {**base, "ts": "1717408800.000001", "user": None},
            {"type": "message", "subtype": "message_deleted", "channel": "C1", "team": "T1"},
            {"type": "event_callback", "team_id": "T1"},
        ],
    )
    assert [r.reason for r in result.rejected] == [
        "event.ts: not a Slack timestamp ('yesterday')",
        "event.thread_ts: expected a string, got int",
        "event.user: missing",
        "event.deleted_ts: missing",
        "envelope.event: missing",
    ]
    assert result.items == []


def test_a_deleted_thread_parent_becomes_a_deletion():
    tombstone = {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": "C07WEEKEND",
        "team": "T04MEMSTRM",
        "ts": "1717413000.000100",
        "event_ts": "1717413000.000100",
        "message": {
            "type": "message",
            "subtype": "tombstone",
            "text": "This message was deleted.",
            "user": "USLACKBOT",
            "hidden": True,
            "ts": THREAD,
            "thread_ts": THREAD,
            "reply_count": 3,
        },
    }
    (removal,) = map_events("slack", [tombstone]).items
    assert isinstance(removal, TurnRemoval)
    assert (removal.turn_ids, removal.reason) == ((THREAD,), "deleted")
    assert removal.before == datetime(2024, 6, 3, 11, 10, 0, 100, tzinfo=timezone.utc)
