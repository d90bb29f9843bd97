from collections import Counter
from datetime import datetime, timezone

import orjson
import pytest

from memstream.platforms import FORMATS, map_events, parse_events
from memstream.platforms import slack as slack_module
from memstream.platforms.fields import EventError, safe_id
from memstream.platforms.items import edited
from memstream.schemas import Turn
from tests.platforms import FIXTURES, covered, events, valid_id

T0 = datetime(2024, 6, 15, 16, 0, tzinfo=timezone.utc)


def test_unknown_formats_raise():
    with pytest.raises(ValueError, match="unknown format 'irc'"):
        map_events("irc", [])
    with pytest.raises(ValueError, match="unknown format 'irc'"):
        parse_events("irc", "[]")


def test_bad_overrides_raise():
    with pytest.raises(ValueError, match="tenant_id 'a/b' is not a valid id"):
        map_events("slack", [], tenant_id="a/b")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_fixture_has_turns_skips_and_rejections(fmt):
    result = map_events(fmt, events(fmt), tenant_id="acme", conversation_id="c1")
    assert len(result.turns) >= 8 and result.skipped and result.rejected
    for item in result.items:  # every id fits the schema's pattern
        assert valid_id(item.tenant_id) and valid_id(item.conversation_id)
        ids = [item.turn_id, item.session_id] if isinstance(item, Turn) else list(item.turn_ids)
        assert all(valid_id(i) for i in ids)
    for rejected in result.rejected:
        orjson.loads(rejected.raw)  # JSON for the dead-letter topic


def test_parse_events_shapes():
    assert parse_events("slack", '[{"type": "message"}]') == [{"type": "message"}]
    assert parse_events("telegram", '{"ok": true, "result": [{"update_id": 1}]}') == [{"update_id": 1}]
    assert parse_events("openai", '{"model": "m", "messages": [{"role": "user"}]}') == [{"role": "user"}]
    assert parse_events("openai", '{"model": "m", "input": "Hi"}') == [{"role": "user", "content": "Hi"}]
    assert parse_events("slack", '{"type": "event_callback"}') == [{"type": "event_callback"}]  # one envelope
    assert parse_events("discord", '{"op": 11}\n\n{"op": 10}\n') == [{"op": 11}, {"op": 10}]
    assert parse_events("discord", "  ") == []
    with pytest.raises(ValueError, match="line 2: not JSON"):
        parse_events("discord", '{"op": 11}\n{"op": \n')
    with pytest.raises(ValueError, match="'result' should hold a list"):
        parse_events("telegram", '{"result": 3}')
    with pytest.raises(ValueError, match="got a JSON int"):
        parse_events("telegram", "3")


def test_fixtures_load_as_lists():
    for fmt in FORMATS:
        assert (FIXTURES / f"{fmt}.json").exists() and isinstance(events(fmt), list)


def test_safe_id():
    assert safe_id("-1001987654321", prefix="chat", where="x") == "chat-1001987654321"
    assert safe_id("C07WEEKEND", prefix="C", where="x") == "C07WEEKEND"
    assert safe_id("a#b~c d/e", prefix="p", where="x") == "a-b-c-d-e"  # '#' and '~' mark chunks and versions
    assert safe_id("_x", prefix="p", where="x") == "p_x"
    with pytest.raises(EventError, match="x: id longer than 128"):
        safe_id("9" * 129, prefix="p", where="x")


def test_a_mapper_bug_becomes_a_rejection(monkeypatch):
    def broken(index, event, ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(slack_module, "map_event", broken)
    result = map_events("slack", [events("slack")[1], {"x": object()}])
    assert [r.reason for r in result.rejected] == ["unexpected RuntimeError: boom"] * 2
    assert result.rejected[0].tenant_id == "T04MEMSTRM"  # the hint still names the team
    assert result.rejected[1].raw.startswith(b'"{')  # not JSON-able: its repr, as JSON


def test_skips_are_counted_not_rejected():
    result = map_events("slack", [{"type": "reaction_added"}] * 3)
    assert result.skipped == Counter({"slack:reaction_added": 3}) and not result.rejected and not result.items


def test_an_edit_in_the_same_millisecond_still_covers_the_original():
    fields = {
        "tenant_id": "t",
        "conversation_id": "c",
        "session_id": "s",
        "speaker": "Nora",
        "role": "user",
        "metadata": {"platform": "x"},
    }
    original = Turn(**fields, turn_id="m1", text="Dinner at 7", event_time=T0)
    forget, new = edited(base_id="m1", original_time=T0, edit_time=T0, text="Dinner at 8", fields=fields)
    assert isinstance(new, Turn) and new.turn_id == "m1~1718467200001"
    assert covered(forget, original) and not covered(forget, new)
    (only,) = edited(base_id="m1", original_time=T0, edit_time=T0, text=None, fields=fields)
    assert only == forget  # the edit removed the text: only the forget
