"""Update queues over the real Qdrant engine (qdrant-client local mode), with hand-made vectors."""

from datetime import datetime, timedelta, timezone

import numpy as np
import orjson
import pytest

from memstream.adapters.qdrant_store import QdrantStore
from memstream.ports import LLMError, LlmResult, StorePoint
from memstream.processors.consolidation.consolidate import (
    ConsolidateParams,
    LlmDecider,
    RuleDecider,
    consolidate_card,
    update_queue,
)
from memstream.processors.consolidation.versioning import CardView
from memstream.processors.write.index import CARDS, COLLECTIONS
from memstream.schemas import Card, Provenance

T0 = datetime(2023, 5, 1, tzinfo=timezone.utc)


def unit(*xs):
    v = np.asarray(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


def card(card_id, subject, days, content="x"):
    return Card(
        card_id=card_id,
        subject=subject,
        type="state",
        content=content,
        event_time=T0 + timedelta(days=days),
        provenance=Provenance(turn_ids=["D1:1"]),
        valid_from=T0 + timedelta(days=days),
    )


@pytest.fixture
def store(tmp_path):
    s = QdrantStore(path=tmp_path / "q")
    s.ensure_collections(COLLECTIONS, 3)
    yield s
    s.close()


def put(store, tenant, c, vector, **extra):
    store.upsert(
        CARDS,
        [
            StorePoint(
                c.card_id,
                vector,
                {
                    "tenant_id": tenant,
                    "conversation_id": "c1",
                    "card_id": c.card_id,
                    "subject": c.subject,
                    "type": c.type,
                    "text": c.content,
                    "event_ts": c.event_time.timestamp(),
                    "event_time": c.event_time.isoformat(),
                    "valid_from": c.valid_from.isoformat(),
                    "valid_to": None,
                    "turn_ids": c.provenance.turn_ids,
                    **extra,
                },
            )
        ],
    )


def put_superseded(store, c, vector, retired_ts: float):
    """Tenant t1's card ``c``, superseded (retired, valid until T0) by the run at ``retired_ts``."""
    put(store, "t1", c, vector, valid_to=T0.isoformat(), retired=True, retired_ts=retired_ts)


def view(c):
    return CardView(c.card_id, c.subject, c.type, c.content, c.event_time.timestamp(), c.valid_from.timestamp())


IDS = {name: f"00000000-0000-0000-0000-00000000000{i}" for i, name in enumerate("abcdefghij")}
PARAMS = ConsolidateParams(tau=0.8, top_n=10)
AS_OF = datetime(2024, 1, 1, tzinfo=timezone.utc)  # when the consolidation run began


def test_queue_holds_similar_cards_current_at_the_run_start_of_the_same_subject_and_tenant_in_time_order(store):
    put(store, "t1", card(IDS["a"], "Maria", 0), unit(1, 0.05, 0))  # similar, older: in
    put(store, "t1", card(IDS["b"], "Maria", 1), unit(0, 1, 0))  # dissimilar: out
    put(store, "t1", card(IDS["c"], "Tom", 2), unit(1, 0, 0))  # other subject: out
    put(store, "t2", card(IDS["d"], "Maria", 3), unit(1, 0, 0))  # other tenant: out
    put(store, "t1", card(IDS["e"], "Maria", 40), unit(1, 0.02, 0))  # newer: in (the pair is oriented later)
    earlier_run = AS_OF.timestamp() - 3600
    put_superseded(store, card(IDS["g"], "Maria", 5), unit(1, 0.01, 0), earlier_run)  # by an earlier run: out
    put_superseded(store, card(IDS["h"], "Maria", 6), unit(1, 0.03, 0), AS_OF.timestamp())  # in this very run: in
    put(
        store, "t1", card(IDS["i"], "Maria", 7), unit(1, 0.04, 0), created_ts=AS_OF.timestamp()
    )  # merged in this run: out
    new = card(IDS["f"], "Maria", 30)
    put(store, "t1", new, unit(1, 0, 0))
    queue = update_queue(store, "t1", "c1", view(new), unit(1, 0, 0), PARAMS, as_of=AS_OF.timestamp())
    assert [c.card.card_id for c in queue] == [IDS["a"], IDS["h"], IDS["e"]]
    assert all(c.similarity >= 0.8 for c in queue)


def test_queue_is_capped_at_top_n(store):
    for i, name in enumerate("abcde"):
        put(store, "t1", card(IDS[name], "Maria", i), unit(1, 0.01 * i, 0))
    new = card(IDS["f"], "Maria", 30)
    queue = update_queue(
        store, "t1", "c1", view(new), unit(1, 0, 0), ConsolidateParams(tau=0.5, top_n=3), as_of=AS_OF.timestamp()
    )
    assert [c.card.card_id for c in queue] == [IDS["a"], IDS["b"], IDS["c"]]


def boston_and_denver(store):
    boston = card(IDS["a"], "Maria", 0, "Maria lives in Boston.")
    denver = card(IDS["b"], "Maria", 21, "Maria moved to Denver.")
    put(store, "t1", boston, unit(1, 0.6, 0))  # cosine 0.86: similar, not a repeat
    put(store, "t1", denver, unit(1, 0, 0))
    [hit] = [h for h in store.scroll(CARDS, "t1", with_vectors=True) if h.id == IDS["b"]]
    return boston, denver, hit


def test_a_queue_with_the_rules_supersedes_the_older_state(store):
    boston, denver, hit = boston_and_denver(store)
    update = consolidate_card(store, RuleDecider(PARAMS), "t1", "c1", hit, PARAMS, as_of=AS_OF)
    assert update is not None and update.card_id == IDS["b"]
    assert [(d.older_card_id, d.newer_card_id, d.action, d.decided_by) for d in update.decisions] == [
        (IDS["a"], IDS["b"], "supersede", "rules")
    ]
    assert [(p.card_id, p.superseded_by) for p in update.patches] == [(IDS["a"], IDS["b"])]
    assert update.costs == []


class ScriptedLLM:
    """A test double of the LLM port: prepared results in order (pure-logic unit test)."""

    model = "scripted"

    def __init__(self, *outputs):
        self.outputs = list(outputs)
        self.calls = 0

    def complete(self, messages, *, json_schema=None, schema_name="output", max_tokens=None, timeout_s=None):
        self.calls += 1
        out = self.outputs.pop(0)
        if isinstance(out, Exception):
            raise out
        return LlmResult(
            content=orjson.dumps(out).decode() if not isinstance(out, str) else out,
            prompt_tokens=100,
            completion_tokens=20,
            model="scripted",
            data=out if isinstance(out, dict) else None,
        )


def test_the_llm_decides_a_merge_with_one_call_and_the_merged_card_has_lineage(store):
    boston, denver, hit = boston_and_denver(store)
    llm = ScriptedLLM(
        {"decisions": [{"candidate": "C1", "action": "merge", "merged": "Maria lived in Boston, then Denver."}]}
    )
    update = consolidate_card(store, LlmDecider(llm, PARAMS), "t1", "c1", hit, PARAMS, as_of=AS_OF)
    assert llm.calls == 1 and update.costs[0].calls == 1 and update.costs[0].stage == "consolidate"
    assert update.decisions[0].action == "merge" and update.decisions[0].decided_by == "llm"
    [merged] = update.merged_cards
    assert merged.content == "Maria lived in Boston, then Denver." and merged.version == 2
    assert merged.provenance.turn_ids == ["D1:1"]
    assert {p.card_id for p in update.patches} == {IDS["a"], IDS["b"], merged.card_id}


def test_invalid_llm_output_is_repaired_once_then_the_rules_decide(store):
    boston, denver, hit = boston_and_denver(store)
    llm = ScriptedLLM("not json", "still not json")
    update = consolidate_card(store, LlmDecider(llm, PARAMS), "t1", "c1", hit, PARAMS, as_of=AS_OF)
    assert llm.calls == 2 and update.costs[0].calls == 2
    assert update.decisions[0].decided_by == "rules" and update.decisions[0].action == "supersede"
    llm = ScriptedLLM(LLMError("down"))
    update = consolidate_card(store, LlmDecider(llm, PARAMS), "t1", "c1", hit, PARAMS, as_of=AS_OF)
    assert update.decisions[0].decided_by == "rules" and update.costs[0].calls == 1  # the failed request counts


def test_a_run_redone_after_a_crash_gives_the_same_state_whatever_part_of_it_was_applied(tmp_path):
    """Boston, a repeat of it, then Denver, then Seattle: clean run vs every partial application of
    the same run (a crash after some updates were out and applied), then the run redone."""
    from itertools import combinations

    from memstream.processors.consolidation.consolidate import apply_update

    # Boston, Denver and Seattle pairwise at cosine 0.9 (similar, not repeats); the repeat at 0.99.
    cards = [
        (card(IDS["a"], "Maria", 0, "Maria lives in Boston."), unit(0.258, 0, 0.966)),
        (card(IDS["b"], "Maria", 10, "Maria lives in Boston."), unit(0.27, 0.01, 0.966)),
        (card(IDS["c"], "Maria", 21, "Maria moved to Denver."), unit(-0.129, 0.2236, 0.966)),
        (card(IDS["d"], "Maria", 40, "Maria moved to Seattle."), unit(-0.129, -0.2236, 0.966)),
    ]
    rules = RuleDecider(PARAMS)

    def fresh(name):
        s = QdrantStore(path=tmp_path / name)
        s.ensure_collections([CARDS], 3)
        for c, v in cards:
            put(s, "t1", c, v)
        return s

    def run(s):
        hits = sorted(s.scroll(CARDS, "t1", with_vectors=True), key=lambda h: h.id)
        return [u for u in (consolidate_card(s, rules, "t1", "c1", h, PARAMS, as_of=AS_OF) for h in hits) if u]

    def state(s):
        keep = ("superseded_by", "duplicate_of", "valid_to", "retired", "support", "retired_ts")
        return {h.id: {k: h.payload.get(k) for k in keep} for h in s.scroll(CARDS, "t1")}

    clean = fresh("clean")
    updates = run(clean)
    for u in updates:
        apply_update(clean, None, u)
    expected = state(clean)
    clean.close()
    assert expected[IDS["a"]]["superseded_by"] == IDS["c"] and expected[IDS["c"]]["superseded_by"] == IDS["d"]
    assert expected[IDS["b"]]["duplicate_of"] == IDS["a"] and not expected[IDS["d"]]["retired"]

    for n in range(1, len(updates)):
        for applied in combinations(range(len(updates)), n):
            s = fresh(f"crash-{'-'.join(map(str, applied))}")
            for i in applied:
                apply_update(s, None, updates[i])
            for u in run(s):  # the redelivered command: the same run again
                apply_update(s, None, u)
            assert state(s) == expected, f"applied before the crash: {applied}"
            s.close()
