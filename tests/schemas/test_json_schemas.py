"""The committed JSON Schemas (schemas/json/) are the models' wire contract: they match what the
generator makes from the models now, they are valid Draft 2020-12 schemas, every payload memstream
writes validates against its schema, and what they refuse the models refuse too."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from jsonschema import Draft202012Validator, FormatChecker

from memstream.bench.fuzz import fuzz_messages
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.processors.write.compress import fresh_turn
from memstream.processors.write.extract import ExtractiveExtractor
from memstream.processors.write.stm import StmPolicy, StmState, add_turn, on_tick
from memstream.schemas import (
    SCHEMA_VERSION,
    CardPatch,
    ConsolidateCommand,
    ConsolidationCandidate,
    ConsolidationUpdate,
    DeadLetter,
    Evidence,
    Forget,
    ForgetAudit,
    ForgetReply,
    ImportProgress,
    LlmUsage,
    Payload,
    Plan,
    Query,
    Reply,
    RetainedCopy,
    SchemaError,
    StageCost,
    StmTick,
    StoredPoint,
    Turn,
    WindowTick,
    decode_message,
)
from memstream.schemas import jsonschema as contract
from memstream.schemas.memory import PairDecision
from memstream.schemas.read import ReadReply, ReadRequest
from memstream.schemas.topics import TOPIC_PAYLOADS
from tests.factories import compressed, segmented

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "json"
NOW = datetime(2024, 7, 18, 12, 30, 5, 123456, tzinfo=timezone.utc)
TENANT = "acme"


def date_time(value: object) -> bool:
    """RFC 3339 ``date-time`` with an offset (the ``pattern`` says the shape; this the calendar)."""
    return not isinstance(value, str) or datetime.fromisoformat(value).tzinfo is not None


FORMATS = FormatChecker()
FORMATS.checks("date-time", raises=ValueError)(date_time)


def load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / name).read_text())


INDEX = load("index.json")
VALIDATORS = {
    kind: Draft202012Validator(load(entry["file"]), format_checker=FORMATS) for kind, entry in INDEX["payloads"].items()
}


def errors(kind: str, data: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATORS[kind].iter_errors(data)]


def wire(payload: Payload) -> dict[str, Any]:
    """What goes on the topic, decoded again (orjson of ``model_dump(mode="json")``)."""
    return orjson.loads(payload.to_bytes())


def demo_turns() -> list[Turn]:
    return list(locomo_turns(load_locomo(demo_conversation_path())[0], tenant_id=TENANT))


def examples() -> list[Payload]:
    """At least one real payload of every kind, made the way the stages make them where that is cheap
    (the demo conversation's turns, compressed, segmented, flushed by the STM, extracted)."""
    turns = demo_turns()
    first = turns[0]
    edited = first.model_copy(update={"turn_id": "D1:1~1713", "event_time": NOW, "image_captions": ["a mug"]})
    chunk = first.model_copy(update={"turn_id": "D1:1#2", "role": "assistant", "metadata": {}})
    state, flushes = StmState(), []
    session = [t for t in turns if t.session_id == "S1"]
    for t in session:
        flushes += add_turn(state, segmented(t, boundary=t is session[0]), NOW.timestamp(), StmPolicy())
    forced = on_tick(state, NOW.timestamp(), StmPolicy(), force=True)
    flushes += [forced] if forced else []
    assert flushes, "the forced tick flushes the STM"
    write = ExtractiveExtractor().extract(flushes[0])
    card = write.cards[0]
    merged = card.model_copy(update={"card_id": "merged-1", "valid_to": NOW, "superseded_by": "c9"})
    scope = {"tenant_id": TENANT, "conversation_id": first.conversation_id}
    evidence = Evidence(
        evidence_id="E1",
        kind="turn",
        point_id="p1",
        text=first.text,
        subject="Nora",
        type="event",
        event_time=first.event_time,
        turn_ids=[first.turn_id],
        session_ids=["S1"],
        score=0.87,
        found_by=["dense", "replay"],
    )
    plan = Plan(planner="rules", entities=["Nora"], time_from=NOW - timedelta(days=3), time_to=NOW, profile="lookup")
    forget = Forget(forget_id="f1", **scope, turn_ids=["D1:1"], requested_at=NOW, reply_topic="memory.replies")
    return [
        *turns,
        edited,
        chunk,
        compressed(first),
        compressed(first).model_copy(update={"received_at": NOW}),
        segmented(first, boundary=True),
        WindowTick(**scope, sent_at=NOW),
        WindowTick(**scope, sent_at=NOW, force=True),
        StmTick(**scope, sent_at=NOW, force=True, conversation_idle=True),
        *flushes,
        write,
        fresh_turn(compressed(first)),
        fresh_turn(compressed(chunk).model_copy(update={"received_at": NOW})),
        ConsolidationUpdate(
            **scope,
            update_id="u1",
            card_id=card.card_id,
            subject=card.subject,
            candidates=[ConsolidationCandidate(card_id="c0", score=0.91)],
            decisions=[
                PairDecision(
                    older_card_id="c0",
                    newer_card_id=card.card_id,
                    similarity=0.91,
                    action="supersede",
                    decided_by="rules",
                )
            ],
            patches=[
                CardPatch(card_id="c0", valid_to=NOW, superseded_by=card.card_id, successor_order=(1.0, 2.0, "c1"))
            ],
            merged_cards=[merged],
            costs=[StageCost(stage="consolidate", calls=1, prompt_tokens=10, completion_tokens=3, model="m")],
            written_at=NOW,
            decided_at=NOW,
            as_of=NOW,
        ),
        ConsolidateCommand(requested_at=NOW),
        ConsolidateCommand(tenant_id=TENANT, requested_at=NOW, scope="all", reason="schedule"),
        ConsolidateCommand(**scope, requested_at=NOW),
        forget,
        Forget(forget_id="f2", tenant_id=TENANT, speaker="Tomas", requested_at=NOW, reply_topic="r", parts=4, part=3),
        forget.model_copy(update={"phase": "erased", "counts": {"store:cards": 3}}),
        Query(**scope, correlation_id="q1", reply_topic="memory.replies", question="Dog?", sent_at=NOW),
        Query(
            **scope,
            correlation_id="q2",
            reply_topic="mine",
            question="Where?",
            question_time=NOW,
            profile="replay",
            k=5,
            answer=False,
            sent_at=NOW,
            deadline=NOW + timedelta(seconds=30),
        ),
        Reply(**scope, correlation_id="q1", replied_at=NOW),
        Reply(
            **scope,
            correlation_id="q2",
            answer="Pepper",
            answer_mode="llm",
            evidence=[evidence, evidence.model_copy(update={"evidence_id": "F1", "found_by": ["fresh"]})],
            plan=plan,
            access_profile="lookup",
            profile_text="Nora: likes pottery",
            context_tokens=120,
            costs=[StageCost(stage="answer", calls=1)],
            latency_ms={"plan_ms": 1.5, "total_ms": 20.25},
            replied_at=NOW,
        ),
        Reply(**scope, correlation_id="q3", ok=False, error="invalid query: ...", replied_at=NOW),
        ForgetReply(
            forget_id="f1",
            tenant_id=TENANT,
            part=0,
            parts=1,
            counts={"store:turns": 1},
            retained=[RetainedCopy(topic="memory.turns", until=NOW)],
            done_at=NOW,
        ),
        DeadLetter(
            stage="compress",
            reason="invalid Turn: ...",
            error_type="SchemaError",
            topic="memory.turns",
            partition=2,
            offset=17,
            key="acme/c1",
            tenant_id=TENANT,
            original_b64=DeadLetter.encode(b"\xff not json"),
            original_size=10,
            failed_at=NOW,
        ),
        ForgetAudit(forget_id="f1", tenant_id=TENANT, part=0, parts=1, requested_at=NOW, done_at=NOW),
        LlmUsage(
            tenant_id=TENANT,
            window_start=NOW,
            window_s=3600,
            worker="host-1-abc123",
            calls=3,
            tokens=1200,
            fallbacks={"extract": 2},
            updated_at=NOW,
        ),
        ImportProgress(tenant_id=TENANT, counter="import-3f2a", role="sent", turns=20000, updated_at=NOW),
        ReadRequest(
            read="timeline",
            tenant_id=TENANT,
            conversation_id="c1",
            cursor=20,
            limit=100,
            correlation_id="r1",
            reply_topic="memory.replies",
            sent_at=NOW,
        ),
        ReadReply(
            read="timeline",
            tenant_id=TENANT,
            conversation_id="c1",
            correlation_id="r1",
            records=[{"collection": "turns", "id": "p1", "turn_id": "D1:1", "seq": 20, "text": "hi"}],
            summary={"turns": 1},
            next_cursor=None,
            replied_at=NOW,
        ),
        StoredPoint(
            tenant_id=TENANT,
            collection="cards",
            point_id="0b6f3c1e-5a4d-5c8e-9f00-3a1b2c3d4e5f",
            payload={"tenant_id": TENANT, "conversation_id": "c1", "kind": "card", "text": "Mel likes painting."},
        ),
    ]


EXAMPLES = examples()


def example(kind: str) -> dict[str, Any]:
    """The first example of ``kind``, as it goes on the wire."""
    return wire(next(p for p in EXAMPLES if p.kind == kind))  # type: ignore[attr-defined]


# --- the committed files are the models' ------------------------------------------------------------


def test_the_committed_files_are_what_the_models_generate(tmp_path):
    assert contract.main(["--out", str(tmp_path)]) == 0
    made = {p.name: p.read_text() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_text() for p in SCHEMAS.glob("*.json")}
    stale = sorted(name for name in made.keys() | committed.keys() if made.get(name) != committed.get(name))
    assert not stale, f"schemas/json drifted from the models in {stale}: run python -m memstream.schemas.jsonschema"
    assert all(text.endswith("}\n") for text in made.values())


def test_check_lists_what_differs_and_a_second_write_changes_nothing(tmp_path, capsys):
    assert contract.main(["--out", str(tmp_path)]) == 0
    assert contract.main(["--out", str(tmp_path), "--check"]) == 0
    assert contract.write(tmp_path) == []  # deterministic: nothing to rewrite
    (tmp_path / "turn.schema.json").write_text("{}\n")
    (tmp_path / "gone.schema.json").write_text("{}\n")
    (tmp_path / "query.schema.json").unlink()
    capsys.readouterr()
    assert contract.main(["--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    for name in ("turn.schema.json", "gone.schema.json", "query.schema.json"):
        assert f"differs: {tmp_path / name}" in err
    assert "index.json" not in err
    assert contract.write(tmp_path) == ["gone.schema.json", "query.schema.json", "turn.schema.json"]
    assert not (tmp_path / "gone.schema.json").exists() and contract.differences(tmp_path) == []


def test_the_module_runs_as_a_command_and_checks_the_committed_folder():
    done = subprocess.run(
        [sys.executable, "-m", "memstream.schemas.jsonschema", "--check", "--out", str(SCHEMAS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "up to date" in done.stdout


# --- the files are schemas, one per payload, indexed by topic ---------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in SCHEMAS.glob("*.schema.json")))
def test_each_file_is_a_draft_2020_12_schema_with_id_title_and_topics(name):
    schema = load(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    kind = name.removesuffix(".schema.json")
    assert schema["$id"] == f"urn:memstream:schema:v{SCHEMA_VERSION}:{kind}"
    assert schema["title"] == INDEX["payloads"][kind]["title"]
    for topic in INDEX["payloads"][kind]["topics"]:
        assert f"<prefix>.{topic}" in schema["description"]
    assert schema["additionalProperties"] is False and schema["required"][0] == "kind"
    assert schema["properties"]["kind"]["const"] == kind
    assert schema["properties"]["schema_version"] == {
        "default": SCHEMA_VERSION,
        "maximum": SCHEMA_VERSION,
        "minimum": 1,
        "type": "integer",
    }


def test_the_index_maps_every_topic_to_its_payload_kinds_and_files():
    assert INDEX["schema_version"] == SCHEMA_VERSION
    assert list(INDEX["topics"]) == sorted(TOPIC_PAYLOADS)  # sorted keys
    for topic, models in TOPIC_PAYLOADS.items():
        entry = INDEX["topics"][topic]
        kinds = [m.model_fields["kind"].default for m in models]
        assert sorted(entry["payloads"]) == sorted(kinds) and entry["main"] == kinds[0]
        for kind in kinds:
            assert (SCHEMAS / entry["payloads"][kind]["file"]).is_file()
            assert topic in INDEX["payloads"][kind]["topics"]
    assert INDEX["topics"]["turns"]["payloads"]["turn"]["key"] == "tenant_id/conversation_id"
    assert INDEX["topics"]["replies"]["payloads"]["reply"]["key"] == "correlation_id"
    assert INDEX["topics"]["audit"]["compacted"] is True
    files = {entry["file"] for entry in INDEX["payloads"].values()}
    assert files == {p.name for p in SCHEMAS.glob("*.schema.json")}
    assert len({entry["$id"] for entry in INDEX["payloads"].values()}) == len(files)


# --- what memstream writes validates; what it refuses, the schemas refuse ----------------------------


def test_there_is_an_example_of_every_payload_kind():
    assert {p.kind for p in EXAMPLES} == set(INDEX["payloads"])  # type: ignore[attr-defined]


@pytest.mark.parametrize("payload", EXAMPLES, ids=lambda p: f"{p.kind}-{getattr(p, 'turn_id', '')}")
def test_every_payload_as_memstream_writes_it_validates(payload):
    assert errors(payload.kind, wire(payload)) == []  # type: ignore[attr-defined]


def test_the_demo_conversation_is_a_valid_stream_of_turns():
    turns = demo_turns()
    assert len(turns) == 30 and sum(t.last_in_session for t in turns) == 3
    for t in turns:
        assert errors("turn", wire(t)) == []


def test_a_producer_may_leave_out_what_has_a_default():
    minimal = {
        "kind": "turn",
        "tenant_id": "acme",
        "conversation_id": "c1",
        "session_id": "S1",
        "turn_id": "D1:1",
        "speaker": "Nora",
        "text": "Hi",
        "event_time": "2024-03-14T18:10:00.123+01:00",
    }
    assert errors("turn", minimal) == []
    assert Turn.model_validate(minimal).event_time == datetime(2024, 3, 14, 17, 10, 0, 123000, tzinfo=timezone.utc)


def turn_with(**changes: Any) -> dict[str, Any]:
    data = wire(demo_turns()[0])
    for key, value in changes.items():
        if value is ...:
            data.pop(key)
        else:
            data[key] = value
    return data


# (kind, payload, a fragment of the schema error) -- the models refuse each of them too.
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("turn", turn_with(tenant_id=...), "'tenant_id' is a required property"),
    ("turn", turn_with(tenant_id="acme/other"), "does not match"),
    ("turn", turn_with(turn_id="D1 1"), "does not match"),
    ("turn", turn_with(conversation_id="../etc"), "does not match"),
    ("turn", turn_with(surprise=1), "Additional properties are not allowed ('surprise' was unexpected)"),
    ("turn", turn_with(schema_version=SCHEMA_VERSION + 1), "is greater than the maximum"),
    ("turn", turn_with(schema_version=0), "is less than the minimum"),
    ("turn", turn_with(kind="compressed_turn"), "'turn' was expected"),
    ("turn", turn_with(text=""), "should be non-empty"),
    ("turn", turn_with(text=42), "is not of type 'string'"),
    ("turn", turn_with(role="admin"), "is not one of"),
    ("turn", turn_with(event_time="yesterday"), "does not match"),
    ("turn", turn_with(event_time="2023-02-30T00:00:00Z"), "is not a 'date-time'"),
    ("turn", turn_with(image_captions=["x"] * 65), "is too long"),
    ("turn", turn_with(metadata={f"k{i}": i for i in range(65)}), "has too many properties"),
    ("query", {**example("query"), "k": 0}, "is not valid under any of the given schemas"),
    ("query", {**example("query"), "reply_topic": "bad topic!"}, "does not match"),
    ("forget", {**example("forget"), "conversation_id": None}, "is not of type 'string'"),
    ("forget", {**example("forget"), "turn_ids": ["x" * 129]}, "is too long"),
    (
        "consolidate",
        {"kind": "consolidate", "conversation_id": "c1", "requested_at": "2024-01-01T00:00:00Z"},
        "'tenant_id'",
    ),
]


@pytest.mark.parametrize("kind, data, fragment", BAD, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(BAD)])
def test_invalid_payloads_fail_their_schema_and_the_models(kind, data, fragment):
    found = errors(kind, data)
    assert any(fragment in e for e in found), found
    model = next(m for m in contract.payload_topics() if m.model_fields["kind"].default == kind)
    with pytest.raises(SchemaError):
        model.from_bytes(orjson.dumps(data))


def test_the_schemas_are_stricter_than_the_models_only_where_documented():
    # A producer must name the kind (topics carry several) and give timestamps an offset; the
    # models would take the topic's main payload and UTC.
    without_kind, naive = turn_with(kind=...), turn_with(event_time="2024-03-14T18:10:00")
    assert errors("turn", without_kind) == [": 'kind' is a required property"]
    assert any("does not match" in e for e in errors("turn", naive))
    assert Turn.model_validate(without_kind) and Turn.model_validate(naive).event_time.tzinfo is timezone.utc


def topic_verdict(topic: str, data: dict[str, Any]) -> bool:
    """Valid by the schemas, chosen the way ``decode_message`` chooses the model (by ``kind``)."""
    kinds = INDEX["topics"][topic]["payloads"]
    kind = data.get("kind") if data.get("kind") in kinds else INDEX["topics"][topic]["main"]
    return not errors(kind, data)


def test_schemas_and_models_agree_on_hostile_messages():
    checked = 0
    for message in fuzz_messages(600, seed=7):
        try:
            data = orjson.loads(message.value)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(data, dict) or "kind" not in data:
            continue
        try:
            decode_message(message.topic, message.value)
            accepted = True
        except SchemaError:
            accepted = False
        assert topic_verdict(message.topic, data) == accepted, (message.category, data)
        checked += 1
    assert checked > 300
