"""Forgetting end to end (real broker, real embedded Qdrant, real workers): one speaker of one
conversation is forgotten while the conversation still streams in; nothing derived from their
turns stays in the store or the tables, other tenants and conversations are untouched, no reply
cites a forgotten turn, and neither a kill -9 nor a replay of old turns brings anything back."""

from __future__ import annotations

import pytest

from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.processors.write.index import CARDS, COLLECTIONS, SCENES, TRIGGERS, TURNS
from memstream.schemas import ForgetAudit

from .conftest import first_sessions, latest_table_value

pytestmark = pytest.mark.integration

TENANT, OTHER_TENANT = "acme", "acme.eu"  # overlapping names; the same conversation and texts in both


def snapshot(pipe, tenant: str, conversation: str | None = None) -> dict[str, list[dict]]:
    """Every point of the scope, per collection (the workers stopped: the embedded store is theirs)."""
    from memstream.ports import StoreFilter

    where = StoreFilter(equals={"conversation_id": conversation}) if conversation else None
    with pipe.store() as store:
        return {
            c: [dict(h.payload) | {"id": h.id} for h in store.scroll(c, tenant, where=where, limit=100_000)]
            for c in COLLECTIONS
        }


def sizes(points: dict[str, list[dict]]) -> dict[str, int]:
    return {c: len(v) for c, v in points.items()}


def derived_from(points: dict[str, list[dict]], turn_ids: set[str]) -> list[dict]:
    """Points citing a forgotten turn, and triggers whose card or scene is gone."""
    bad = [p for c in (CARDS, SCENES, TURNS, "profiles") for p in points[c] if set(p.get("turn_ids", [])) & turn_ids]
    hosts = {p["id"] for p in points[CARDS]} | {p["id"] for p in points[SCENES]}
    return bad + [p for p in points[TRIGGERS] if p["host_id"] not in hosts]


def table_turns(pipe, table: str, key: str) -> list[str]:
    """Turn ids a window (segmenter) or buffer (stm) holds, as its changelog says."""
    state = latest_table_value(pipe, table, key)
    pending = [t["turn"]["turn_id"] for t in state.get("pending", [])]
    buffered = [t["turn"]["turn_id"] for g in state.get("groups", []) for t in g["turns"]]
    return pending + buffered


HOLD = {"MEMSTREAM_STM_IDLE_S": "600", "MEMSTREAM_SLEEP_IDLE_S": "86400"}  # windows keep their turns


def test_forgetting_a_speaker_mid_stream_leaves_no_copy_and_survives_a_crash(make_pipeline):
    conversation, turns, sample = first_sessions(2, tenant=TENANT)
    _, other_tenant_turns, _ = first_sessions(1, tenant=OTHER_TENANT)
    own = load_locomo(demo_conversation_path())[0]
    other_conversation = "other-conversation"
    other_conversation_turns = [
        t.model_copy(update={"conversation_id": other_conversation}) for t in locomo_turns(own, tenant_id=TENANT)
    ][:12]
    speaker = turns[0].speaker
    forgotten_ids = {t.turn_id for t in turns if t.speaker == speaker}
    second_session = next(i for i, t in enumerate(turns) if t.session_id != turns[0].session_id)
    split = second_session + 4
    pipe = make_pipeline(**HOLD)

    # The other tenant (same conversation id, same texts) and another conversation of this tenant.
    pipe.start_worker("others")
    pipe.produce(other_tenant_turns + other_conversation_turns)
    pipe.drain()  # and flush what the windows and buffers hold
    pipe.stop_workers()
    other_tenant_before = sizes(snapshot(pipe, OTHER_TENANT))
    other_conversation_before = sizes(snapshot(pipe, TENANT, other_conversation))
    assert all(other_tenant_before[c] > 0 for c in (TURNS, CARDS, SCENES))
    assert all(other_conversation_before[c] > 0 for c in (TURNS, CARDS, SCENES))

    # The conversation streams in: its first session is written, the speaker's newest turns wait in
    # the window and the buffer.
    worker = pipe.start_worker("streaming")
    pipe.produce(turns[:second_session])
    pipe.drain()
    pipe.produce(turns[second_session:split])
    pipe.drain(flush=False)
    key = f"{TENANT}/{conversation}"
    in_flight = set(table_turns(pipe, "segmenter", key)) | set(table_turns(pipe, "stm", key))
    assert in_flight & forgotten_ids, "some of the speaker's turns wait in the window or the buffer"

    outcome = pipe.forget(tenant=TENANT, conversation=conversation, speaker=speaker)
    # Turns produced after the forget: the speaker's are older than the request (the conversation
    # was said before it), so they are dropped on arrival; the other speaker's flow on.
    pipe.produce(turns[split:])
    pipe.drain()
    assert outcome.parts == 1
    assert outcome.counts["store:turns"] > 0 and outcome.counts["store:cards"] > 0
    assert outcome.counts["window:segmenter"] + outcome.counts["buffer:stm"] > 0
    streamed = {
        pipe.settings.topic(t) for t in ("turns", "turns.compressed", "segments", "stm.flush", "cards", "record")
    }
    assert streamed <= set(outcome.retained)
    assert not set(table_turns(pipe, "segmenter", key)) & forgotten_ids
    assert not set(table_turns(pipe, "stm", key)) & forgotten_ids

    # Questions about the conversation: no evidence from a forgotten turn.
    for qa in sample.qa[:5]:
        reply = pipe.ask(qa.question, tenant=TENANT, conversation=conversation, answer=False)
        assert reply.ok, reply.error
        cited = {tid for e in reply.evidence for tid in e.turn_ids}
        assert not cited & forgotten_ids, (qa.question, cited & forgotten_ids)

    # kill -9 with turns in the window, a restart, the conversation replayed from its start.
    worker.kill()
    pipe.workers = []
    pipe.start_worker("after-crash")
    pipe.produce(turns)
    pipe.drain()
    pipe.stop_workers()
    points = snapshot(pipe, TENANT, conversation)
    assert not derived_from(points, forgotten_ids)
    assert {p["turn_id"] for p in points[TURNS]} == {t.turn_id for t in turns} - forgotten_ids
    pending = latest_table_value(pipe, "consolidation", key).get("cards", [])
    assert set(pending) <= {p["id"] for p in points[CARDS]}, "an erased card still waits for consolidation"
    assert sizes(snapshot(pipe, OTHER_TENANT)) == other_tenant_before
    assert sizes(snapshot(pipe, TENANT, other_conversation)) == other_conversation_before

    # The audit record says what happened and holds no text of it.
    [(_, raw)] = pipe.read_topic("audit")
    audit = ForgetAudit.from_bytes(raw)
    assert audit.forget_id == outcome.forget_id and audit.by_speaker and audit.counts == outcome.counts
    assert speaker.encode() not in raw and not any(t.text.encode() in raw for t in turns)
    assert not pipe.dead_letters()
