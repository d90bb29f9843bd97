"""Through the real broker and a real worker: a turn keyed by another conversation, one with no key
and one whose key is not UTF-8 each become one dead letter with its reason, and so do a wrongly
keyed forget, consolidate command and query (once, though two consumer groups read control); the
good turns sent in between are stored, and nothing of the bad ones is."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import orjson
import pytest

from memstream.processors.write.index import TURNS
from memstream.schemas import ConsolidateCommand, Forget, Payload, Query, Turn
from memstream.schemas.topics import Topic

from .conftest import first_sessions

pytestmark = pytest.mark.integration


def test_wrongly_keyed_records_are_dead_lettered_once_with_their_reason_and_good_turns_between_are_stored(
    make_pipeline,
):
    conversation, turns, _ = first_sessions(1, tenant="acme")
    pipe = make_pipeline()
    pipe.start_worker()
    own = f"acme/{conversation}".encode()
    good = [*turns[:3], turns[3].model_copy(update={"last_in_session": True})]
    probe = Turn(
        tenant_id="probe2",
        conversation_id="p1",
        session_id="S1",
        turn_id="K1",
        speaker="Probe",
        text="I am stored under tenant probe2 if the key is not checked.",
        event_time=datetime.now(timezone.utc),
    )
    unkeyed = turns[4].model_copy(update={"turn_id": "K2"})
    undecodable = turns[5].model_copy(update={"turn_id": "K3"})
    now = datetime.now(timezone.utc)
    # Obeyed, it would erase the good turns: it must be refused by its key alone.
    forget = Forget(
        forget_id=uuid.uuid4().hex,
        tenant_id="acme",
        conversation_id=conversation,
        turn_ids=[t.turn_id for t in good],
        requested_at=now,
        reply_topic=pipe.settings.topic(Topic.REPLIES),
    )
    command = ConsolidateCommand(tenant_id="acme", conversation_id=conversation, requested_at=now)
    query = Query(
        tenant_id="acme",
        conversation_id=conversation,
        correlation_id=uuid.uuid4().hex,
        reply_topic=pipe.settings.topic(Topic.REPLIES),
        question="What did they talk about?",
        answer=False,
        sent_at=now,
    )
    expected = f"'acme/{conversation}'"
    # topic, key, payload, the reason its dead letter gives, the stage that gives it
    bad_turns: list[tuple[str, bytes | None, Payload, str, str]] = [
        (Topic.TURNS, b"probe/p1", probe, "key 'probe/p1' does not match the payload's 'probe2/p1'", "compress"),
        (Topic.TURNS, None, unkeyed, f"no key (expected {expected})", "compress"),
        (Topic.TURNS, own + b"\xff", undecodable, f"key is not UTF-8 (expected {expected})", "compress"),
    ]
    bad_elsewhere: list[tuple[str, bytes | None, Payload, str, str]] = [
        (Topic.CONTROL, b"acme/x", forget, f"key 'acme/x' does not match the payload's {expected}", "compress.forget"),
        (Topic.CONTROL, b"acme/*", command, f"key 'acme/*' does not match the payload's {expected}", "consolidate.run"),
        (Topic.QUERIES, None, query, f"no key (expected {expected})", "query"),
    ]
    pipe.produce_raw(Topic.TURNS, own, good[0].to_bytes())
    for (topic, key, payload, _, _), then in zip(bad_turns, good[1:]):
        pipe.produce_raw(topic, key, payload.to_bytes())
        pipe.produce_raw(Topic.TURNS, own, then.to_bytes())  # a good turn in between
    for topic, key, payload, _, _ in bad_elsewhere:
        pipe.produce_raw(topic, key, payload.to_bytes())
    pipe.drain()

    letters = pipe.dead_letters()
    assert len(letters) == len(bad_turns) + len(bad_elsewhere)  # one each, though two agents read control
    by_value = {letter.original: letter for letter in letters}
    for topic, key, payload, reason, stage in bad_turns + bad_elsewhere:
        letter = by_value[payload.to_bytes()]
        assert (letter.reason, letter.error_type, letter.stage) == (reason, "KeyMismatch", stage)
        assert letter.topic == pipe.settings.topic(topic)
        assert letter.key == (key.decode("utf-8", "replace") if key is not None else None)
    replies = [orjson.loads(v) for _, v in pipe.read_topic(Topic.REPLIES) if v]
    [told] = [r for r in replies if r.get("correlation_id") == query.correlation_id]
    assert not told["ok"] and told["error"] == f"invalid query: no key (expected {expected})"

    pipe.stop_workers()
    with pipe.store() as store:
        stored = {h.payload["turn_id"] for h in store.scroll(TURNS, "acme", limit=1000)}
        probed = store.scroll(TURNS, "probe2", limit=1000)
    assert {t.turn_id for t in good} <= stored  # the forget was not obeyed
    assert not {"K2", "K3"} & stored and not list(probed)
