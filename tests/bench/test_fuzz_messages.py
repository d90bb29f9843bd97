"""The fuzz generator: seeded, labelled, and its labels agree with the schemas and the key rule (no
service)."""

from __future__ import annotations

from collections import Counter

import pytest

from memstream.bench.fuzz import FuzzMessage, fuzz_messages
from memstream.schemas import SchemaError, decode_message
from memstream.schemas.keys import check_key
from memstream.schemas.topics import Topic


def accept(m: FuzzMessage) -> None:
    """What the input stages accept (``SchemaError`` otherwise): a valid payload under its own key."""
    value = m.value.replace(b'"REPLIES"', b'"memory.replies"')
    decoded = decode_message(m.topic, value)
    # the compress stage refuses what parses but is over the hard cap
    if len(getattr(decoded, "text", "")) > 262_144:
        raise SchemaError("too long")
    check_key(m.key, decoded)  # type: ignore[arg-type]


def test_the_same_seed_gives_the_same_messages_and_every_kind_appears():
    a, b = fuzz_messages(2000, seed=3), fuzz_messages(2000, seed=3)
    assert a == b and a != fuzz_messages(2000, seed=4)
    categories = Counter(m.category.split(":")[0] for m in a)
    assert {"not_json", "invalid_utf8", "deep_nesting", "huge_text", "tenant_path", "good_turn"} <= set(categories)
    assert {"wrong_key", "no_key", "non_utf8_key", "invisible_speaker"} <= set(categories)
    assert {"good_query", "bad_query", "bad_control"} <= set(categories)
    wrongly_keyed = {m.category for m in a if m.topic != Topic.TURNS and "key" in m.category}
    assert {"bad_query:wrong_key", "bad_control:wrongly_keyed_consolidate:wrong_key"} <= wrongly_keyed
    assert {"bad_control:wrongly_keyed_forget:no_key", "bad_control:wrongly_keyed_forget:non_utf8_key"} & wrongly_keyed


@pytest.mark.parametrize("seed", [0, 1])
def test_good_turns_are_accepted_and_bad_turns_are_not(seed):
    for m in fuzz_messages(1500, seed=seed):
        if m.topic != Topic.TURNS:
            continue
        if m.good:
            accept(m)
        else:
            with pytest.raises(SchemaError):
                accept(m)


def test_wrongly_keyed_messages_are_valid_payloads_refused_by_their_key_alone():
    keyed = [
        m for m in fuzz_messages(3000, seed=5) if m.category.split(":")[-1] in ("wrong_key", "no_key", "non_utf8_key")
    ]
    assert {m.topic for m in keyed} == {Topic.TURNS, Topic.QUERIES, Topic.CONTROL}
    for m in keyed:
        decode_message(m.topic, m.value.replace(b'"REPLIES"', b'"memory.replies"'))  # the payload is fine
        with pytest.raises(SchemaError, match="key"):
            accept(m)


def test_good_queries_are_accepted_and_bad_queries_and_commands_are_not():
    seen = Counter()
    for m in fuzz_messages(3000, seed=5):
        if m.topic == Topic.TURNS:
            continue
        seen[(m.topic, m.good)] += 1
        if m.good:
            accept(m)
        else:
            with pytest.raises(SchemaError):
                accept(m)
    assert seen[(Topic.QUERIES, True)] and seen[(Topic.QUERIES, False)] and seen[(Topic.CONTROL, False)]
