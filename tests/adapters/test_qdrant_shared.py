"""The tenant filter both Qdrant adapters translate: the tenant is always its first condition, and
every part of a StoreFilter lands where its meaning says (pure logic; the adapters' own behaviour is
tests/adapters/test_qdrant_edge_store.py on every engine)."""

from __future__ import annotations

import pytest

from memstream.adapters.qdrant_shared import (
    AnyOf,
    Between,
    Equals,
    HasIds,
    IsNull,
    settable,
    tenant_conditions,
)
from memstream.ports import StoreFilter


@pytest.mark.parametrize("tenant", ["", None])
def test_a_query_without_a_tenant_is_refused(tenant):
    with pytest.raises(ValueError, match="tenant_id"):
        tenant_conditions(tenant, StoreFilter(equals={"type": "fact"}))


def test_the_tenant_comes_first_and_every_part_of_the_filter_is_kept():
    where = StoreFilter(
        equals={"type": "fact", "retired": False},
        any_of={"conversation_id": ["c1", "c2"]},
        is_null=["retired_ts"],
        range_ts={"event_ts": (1.0, None)},
        not_equals={"role": "assistant"},
        not_range_ts={"created_ts": (None, 5.0)},
    )
    got = tenant_conditions("acme", where, has_id=["p1", "p2", "p1"])
    assert got.must == (
        Equals("tenant_id", "acme"),
        Equals("type", "fact"),
        Equals("retired", False),
        AnyOf("conversation_id", ("c1", "c2")),
        IsNull("retired_ts"),
        Between("event_ts", 1.0, None),
        HasIds(("p1", "p2", "p1")),
    )
    assert got.must_not == (Equals("role", "assistant"), Between("created_ts", None, 5.0))


def test_one_id_and_no_filter():
    got = tenant_conditions("acme", None, has_id="p1")
    assert got.must == (Equals("tenant_id", "acme"), HasIds(("p1",)))
    assert got.must_not == ()


def test_a_point_cannot_be_moved_to_another_tenant():
    with pytest.raises(ValueError, match="tenant_id"):
        settable({"tenant_id": "evil", "text": "x"})
    assert settable({"text": "x", "retired_ts": None}) == {"text": "x", "retired_ts": None}
