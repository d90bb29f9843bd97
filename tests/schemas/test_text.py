"""Invisible speakers are refused; bidi controls in text are kept, and isolated where text is shown."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest
from jsonschema import Draft202012Validator

from memstream.schemas import Evidence, Reply, SchemaError, Turn
from memstream.schemas.text import FSI, LRI, PDF, PDI, RLE, RLO, isolate_bidi, isolated_reply
from tests.factories import turn

TURN_SCHEMA = Draft202012Validator(
    json.loads((Path(__file__).resolve().parents[2] / "schemas" / "json" / "turn.schema.json").read_text())
)


def with_speaker(speaker: str) -> dict:
    return {**orjson.loads(turn().to_bytes()), "speaker": speaker}


@pytest.mark.parametrize(
    "speaker",
    ["\u200b", " ", "\t\n", "\u200b\u200c\u200d", "\u2060\ufeff", " \u200e\u2067 ", "\u202e\u202c", "\u061c\u3000"],
)
def test_a_speaker_with_nothing_visible_is_refused_with_a_reason(speaker):
    with pytest.raises(SchemaError, match="speaker has no visible character"):
        Turn.from_bytes(orjson.dumps(with_speaker(speaker)))
    assert any("does not match" in e.message for e in TURN_SCHEMA.iter_errors(with_speaker(speaker)))


@pytest.mark.parametrize("speaker", ["Nora", "a\u200b", "\u202eNora\u202c", "\u05e9\u05dc\u05d5\u05dd", "🙂", " x "])
def test_a_speaker_with_something_visible_is_kept_as_it_came(speaker):
    assert Turn.from_bytes(orjson.dumps(with_speaker(speaker))).speaker == speaker
    assert list(TURN_SCHEMA.iter_errors(with_speaker(speaker))) == []


def test_bidi_controls_in_text_are_stored_as_they_came():
    text = "\u202eright-to-left override\u202c and \u2067\u05e9\u05dc\u05d5\u05dd"
    assert Turn.from_bytes(turn(text=text).to_bytes()).text == text


def test_text_without_bidi_controls_is_shown_unchanged():
    for text in ("plain", "zero\u200bwidth", "\u05e9\u05dc\u05d5\u05dd", ""):
        assert isolate_bidi(text) == text


@pytest.mark.parametrize(
    "text, shown",
    [
        ("a\u202eb\u202cc", FSI + "a\u202eb\u202cc" + PDI),  # balanced: kept, isolated
        ("evil" + RLO + "gpj.exe", FSI + "evil" + RLO + "gpj.exe" + PDF + PDI),  # an override left open: closed
        (RLE + "x" + LRI + "y", FSI + RLE + "x" + LRI + "y" + PDI + PDF + PDI),  # innermost closed first
        ("x" + PDI + "y", FSI + "xy" + PDI),  # a closer it did not open would end the isolate early
        ("x" + PDF + "y", FSI + "xy" + PDI),
        (LRI + RLE + "x" + PDI + "y", FSI + LRI + RLE + "x" + PDI + "y" + PDI),  # a PDI ends its embeddings
        ("\u200fmark", FSI + "\u200fmark" + PDI),
    ],
)
def test_text_with_bidi_controls_is_isolated_and_cannot_reorder_what_follows(text, shown):
    assert isolate_bidi(text) == shown
    assert_balanced(shown)


def assert_balanced(shown: str) -> None:
    """Every embedding and isolate opened in ``shown`` is closed inside it, innermost first."""
    closers = {"\u202a": PDF, RLE: PDF, "\u202d": PDF, RLO: PDF, LRI: PDI, "\u2067": PDI, FSI: PDI}
    stack: list[str] = []
    for ch in shown:
        if ch in closers:
            stack.append(closers[ch])
        elif ch == PDF:
            assert stack.pop() == PDF
        elif ch == PDI:
            while stack.pop() != PDI:
                pass
    assert stack == []


def test_a_reply_as_shown_isolates_its_answer_profile_and_evidence():
    evidence = Evidence(
        evidence_id="E1",
        kind="turn",
        point_id="p",
        text="Nora: " + RLO + "olleh",
        subject=RLO + "x",
        score=1.0,
        found_by=["dense"],
    )
    plain = evidence.model_copy(update={"evidence_id": "E2", "text": "plain", "subject": None})
    reply = Reply(
        tenant_id="t1",
        conversation_id="c1",
        correlation_id="q1",
        answer=RLO + "yes",
        profile_text="likes " + RLO,
        evidence=[evidence, plain],
        replied_at=datetime(2026, 12, 1, tzinfo=timezone.utc),
    )
    shown = isolated_reply(reply)
    assert shown.answer == FSI + RLO + "yes" + PDF + PDI
    assert shown.profile_text == FSI + "likes " + RLO + PDF + PDI
    assert shown.evidence[0].text == FSI + "Nora: " + RLO + "olleh" + PDF + PDI
    assert shown.evidence[0].subject == FSI + RLO + "x" + PDF + PDI
    assert shown.evidence[1] == plain
    assert reply.answer == RLO + "yes" and reply.evidence[0].text.endswith("olleh")  # the reply itself unchanged
