"""The erasure bench's plan: one forget of each scope kind on distinct conversations, and the turns
each covers (no service)."""

from __future__ import annotations

from datetime import datetime, timezone

from memstream.bench.erasure import ErasureOptions, _scope, erasure_turns, forgotten_ids, plan_forgets


def test_every_scope_kind_is_planned_on_its_own_conversation_and_covers_what_it_names(tmp_path):
    streams = erasure_turns(ErasureOptions(data=None, tenants=3, workdir=tmp_path))
    assert len({t for t, _ in streams}) == 3 and len(streams) >= 3
    plans = plan_forgets(streams)
    kinds = [p["kind"] for p in plans]
    assert kinds[0] == "speaker" and "tenant" in kinds
    targets = [(p["tenant"], p.get("conversation")) for p in plans]
    assert len(set(targets)) == len(targets)
    now = datetime.now(timezone.utc)
    gone = forgotten_ids(streams, [_scope(p, now) for p in plans])
    speaker = plans[0]
    key = (speaker["tenant"], speaker["conversation"])
    assert gone[key] == {t.turn_id for t in streams[key] if t.speaker == speaker["speaker"]}
    last_tenant = plans[-1]["tenant"]
    assert all(gone[k] == {t.turn_id for t in v} for k, v in streams.items() if k[0] == last_tenant)
    untouched = [k for k in streams if k not in {key} and k[0] != last_tenant and k not in targets]
    assert untouched and all(not gone[k] for k in untouched)
    # Said after the request: not covered.
    assert not any(forgotten_ids(streams, [_scope(plans[-1], datetime(2000, 1, 1, tzinfo=timezone.utc))]).values())
