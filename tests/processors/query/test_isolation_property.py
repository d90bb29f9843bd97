"""Tenant isolation as a property (hypothesis): whatever the tenant, conversation, question and access
profile, a reply holds only evidence of the asking tenant; and no id can be crafted to escape its
filter or its Kafka key. Tenants with overlapping names hold the same conversation ids and texts, in
the real embedded Qdrant store."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstream.processors.query.engine import QueryEngine, QueryOptions
from memstream.processors.write.index import COLLECTIONS
from memstream.schemas import Forget, SchemaError, Turn, conversation_key
from memstream.schemas.base import ID_PATTERN
from tests.factories import query, sample_write
from tests.fakes import HashEmbedder
from tests.stores import edge_store

TENANTS = ("t1", "t1.eu", "t1-eu")  # overlapping names, the same conversations and texts
CONVERSATIONS = ("c1", "c2")
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    writes = [sample_write(tenant, conversation) for tenant in TENANTS for conversation in CONVERSATIONS]
    with edge_store(tmp_path_factory.mktemp("isolation") / "q", *writes) as store:
        owned = {t: {h.id for c in COLLECTIONS for h in store.scroll(c, t, limit=10_000)} for t in TENANTS}
        yield store, owned


ids = st.from_regex(ID_PATTERN, fullmatch=True)
questions = st.text(min_size=1, max_size=300).filter(lambda q: q.strip())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tenant=st.one_of(st.sampled_from(TENANTS), ids),
    conversation=st.one_of(st.sampled_from(CONVERSATIONS), ids),
    question=st.one_of(questions, st.sampled_from(["Where did Caroline go?", "Lisbon", "What does Mel like?"])),
    profile=st.sampled_from(["lookup", "compose", "replay", "auto"]),
)
def test_a_reply_holds_only_the_asking_tenants_evidence(stored, tenant, conversation, question, profile):
    store, owned = stored
    engine = QueryEngine(store, HashEmbedder(), None, QueryOptions())
    asked = query(question, NOW, tenant=tenant, conversation=conversation, correlation_id="q", profile=profile)
    reply = engine.run(asked, clock=lambda: NOW)
    assert reply.ok and reply.tenant_id == tenant
    mine = owned.get(tenant, set())
    assert {e.point_id for e in reply.evidence} <= mine
    if not mine:
        assert reply.evidence == [] and not reply.profile_text


@given(tenant=st.text(max_size=140), conversation=st.text(max_size=140))
def test_no_id_escapes_its_key_or_is_taken_for_another(tenant, conversation):
    """An id either fails validation, or the key it makes splits back into exactly it."""
    raw = {
        "tenant_id": tenant,
        "conversation_id": conversation,
        "session_id": "S1",
        "turn_id": "D1:1",
        "speaker": "A",
        "text": "hi",
        "event_time": NOW.isoformat(),
    }
    try:
        turn = Turn.model_validate(raw)
    except ValueError:
        return
    assert "/" not in turn.tenant_id and "/" not in turn.conversation_id
    assert turn.key.split("/", 1) == [tenant, conversation] == [turn.tenant_id, turn.conversation_id]
    assert conversation_key(tenant, conversation) == turn.key


@given(tenant=st.text(max_size=140))
def test_a_forget_names_one_tenant_exactly(tenant):
    try:
        forget = Forget(forget_id="f", tenant_id=tenant, requested_at=NOW, reply_topic="memory.replies")
    except (ValueError, SchemaError):
        return
    assert forget.key.split("/", 1)[0] == tenant and "/" not in tenant


@pytest.mark.parametrize("profile", ["lookup", "compose", "replay"])
def test_each_tenant_finds_its_own_copy_of_the_same_text(stored, profile):
    """Not vacuous: the same question finds evidence for every tenant, each its own points."""
    store, owned = stored
    engine = QueryEngine(store, HashEmbedder(), None, QueryOptions())
    found = {}
    for tenant in TENANTS:
        asked = query("Caroline went to the museum in Lisbon.", NOW, tenant=tenant, correlation_id="q", profile=profile)
        evidence = {e.point_id for e in engine.run(asked, clock=lambda: NOW).evidence}
        assert evidence and evidence <= owned[tenant]
        found[tenant] = evidence
    assert not set.intersection(*found.values())
