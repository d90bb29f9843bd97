"""The fuzz generator: seeded, labelled, and its labels agree with the schemas (no service)."""

from __future__ import annotations

from collections import Counter

import pytest

from memstream.bench.fuzz import fuzz_messages
from memstream.schemas import SchemaError, decode_message
from memstream.schemas.topics import Topic


def test_the_same_seed_gives_the_same_messages_and_every_kind_appears():
    a, b = fuzz_messages(2000, seed=3), fuzz_messages(2000, seed=3)
    assert a == b and a != fuzz_messages(2000, seed=4)
    categories = Counter(m.category.split(":")[0] for m in a)
    assert {"not_json", "invalid_utf8", "deep_nesting", "huge_text", "tenant_path", "good_turn"} <= set(categories)
    assert {"good_query", "bad_query", "bad_control"} <= set(categories)


@pytest.mark.parametrize("seed", [0, 1])
def test_good_turns_validate_and_bad_turns_do_not(seed):
    for m in fuzz_messages(1500, seed=seed):
        if m.topic != Topic.TURNS:
            continue
        if m.good:
            decode_message(Topic.TURNS, m.value)
        else:
            with pytest.raises(SchemaError):
                decoded = decode_message(Topic.TURNS, m.value)
                # the compress stage refuses what parses but is over the hard cap
                if len(getattr(decoded, "text", "")) > 262_144:
                    raise SchemaError("too long")


def test_good_queries_validate_and_bad_queries_and_commands_do_not():
    seen = Counter()
    for m in fuzz_messages(3000, seed=5):
        if m.topic == Topic.TURNS:
            continue
        seen[(m.topic, m.good)] += 1
        value = m.value.replace(b'"REPLIES"', b'"memory.replies"')
        if m.good:
            decode_message(m.topic, value)
        else:
            with pytest.raises(SchemaError):
                decode_message(m.topic, value)
    assert seen[(Topic.QUERIES, True)] and seen[(Topic.QUERIES, False)] and seen[(Topic.CONTROL, False)]
