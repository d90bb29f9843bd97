"""The SDK's checks that need no broker."""

from __future__ import annotations

import pytest

from memstream.client import AsyncMemoryClient, MemoryClient, MemstreamError, ReplyError, as_turn
from memstream.schemas import Reply, SchemaError


def test_a_turn_given_as_a_mapping_is_validated_before_anything_is_sent():
    good = {
        "tenant_id": "acme",
        "conversation_id": "c1",
        "session_id": "S1",
        "turn_id": "D1:1",
        "speaker": "Ana",
        "text": "hello",
        "event_time": "2024-05-01T10:00:00Z",
    }
    assert as_turn(good).key == "acme/c1"
    with pytest.raises(SchemaError, match="tenant_id"):
        as_turn({k: v for k, v in good.items() if k != "tenant_id"})


def test_a_client_used_before_it_is_started_says_so():
    with pytest.raises(MemstreamError, match="not started"):
        MemoryClient().remember([])
    with pytest.raises(MemstreamError, match="not started"):
        _ = AsyncMemoryClient().producer


def test_an_error_reply_carries_the_reply_and_its_reason():
    reply = Reply(
        tenant_id="acme",
        conversation_id="c1",
        correlation_id="q1",
        ok=False,
        error="past its deadline",
        replied_at="2024-05-01T10:00:00Z",
    )  # type: ignore[arg-type]
    err = ReplyError(reply)
    assert err.reply is reply and "q1" in str(err) and "past its deadline" in str(err)
