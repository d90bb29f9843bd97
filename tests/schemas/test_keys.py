"""The key rule: a record of an input topic must carry the key its payload names."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from memstream.schemas import ConsolidateCommand, Forget, Query, SchemaError
from memstream.schemas.keys import KeyMismatch, check_key, key_problem
from tests.factories import turn

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def test_the_payloads_own_key_passes():
    assert key_problem(b"t1/c1", turn()) is None
    check_key(b"t1/c1", turn())


@pytest.mark.parametrize(
    "key, reason",
    [
        (b"probe/c1", "key 'probe/c1' does not match the payload's 't1/c1'"),
        (b"t1/c2", "key 't1/c2' does not match the payload's 't1/c1'"),
        (b"t1/c1 ", "key 't1/c1 ' does not match the payload's 't1/c1'"),
        (b"T1/C1", "key 'T1/C1' does not match the payload's 't1/c1'"),
        (None, "no key (expected 't1/c1')"),
        (b"", "no key (expected 't1/c1')"),
        (b"t1/\xffc1", "key is not UTF-8 (expected 't1/c1')"),
    ],
)
def test_a_wrong_missing_or_undecodable_key_is_refused_with_a_reason_naming_both(key, reason):
    assert key_problem(key, turn()) == reason
    with pytest.raises(KeyMismatch) as refused:
        check_key(key, turn())
    assert str(refused.value) == reason
    assert isinstance(refused.value, SchemaError)  # so the stages dead-letter it, never retry it
    assert refused.value.label == "wrong key"  # the metric's label: bounded, no key in it


def test_the_issues_example_a_turn_keyed_by_another_tenant():
    probe = turn(tenant="probe2", conversation="p1")
    assert key_problem(b"probe/p1", probe) == "key 'probe/p1' does not match the payload's 'probe2/p1'"


def test_every_command_carries_its_documented_key():
    # Keyed to a conversation; a broadcast copy tenant/*, or */* for every tenant (docs/wire-contract.md).
    assert ConsolidateCommand(tenant_id="t1", conversation_id="c1", requested_at=NOW).key == "t1/c1"
    assert ConsolidateCommand(tenant_id="t1", requested_at=NOW).key == "t1/*"
    assert ConsolidateCommand(requested_at=NOW).key == "*/*"
    forget = Forget(forget_id="f1", tenant_id="t1", requested_at=NOW, reply_topic="r")
    assert forget.key == "t1/*"
    assert forget.model_copy(update={"conversation_id": "c1"}).key == "t1/c1"
    check_key(b"t1/*", forget)
    check_key(b"*/*", ConsolidateCommand(requested_at=NOW))
    assert key_problem(b"t1/*", ConsolidateCommand(requested_at=NOW)) == "key 't1/*' does not match the payload's '*/*'"
    with pytest.raises(KeyMismatch):
        check_key(b"t1/*", forget.model_copy(update={"conversation_id": "c1"}))  # a conversation's: its key


def test_a_query_is_keyed_by_its_conversation():
    query = Query(
        tenant_id="t1", conversation_id="c1", correlation_id="q1", reply_topic="r", question="Dog?", sent_at=NOW
    )
    check_key(b"t1/c1", query)
    assert key_problem(b"t1/q1", query) == "key 't1/q1' does not match the payload's 't1/c1'"
