"""Consolidation decisions and patches: history is kept, only newer updates older, any order works."""

import itertools
from datetime import datetime, timedelta, timezone

import pytest

from memstream.processors.consolidation.versioning import (
    CardView,
    apply_patches,
    is_current,
    oriented,
    patches_for,
    rule_decision,
)

T0 = datetime(2024, 3, 1, tzinfo=timezone.utc)


def view(card_id: str, text: str, days: float, type_: str = "state", subject: str = "Maria") -> CardView:
    ts = (T0 + timedelta(days=days)).timestamp()
    return CardView(card_id, subject, type_, text, ts, ts)


BOSTON = view("boston", "Maria lives in Boston.", 0)
DENVER = view("denver", "Maria moved to Denver.", 21)
SEATTLE = view("seattle", "Maria now lives in Seattle.", 60)


def payload(card: CardView) -> dict:
    return {"card_id": card.card_id, "text": card.text, "valid_to": None, "superseded_by": None}


def patches(pairs, *, tenant="acme", conversation="c1"):
    out = []
    for a, b, sim in pairs:
        older, newer = oriented(a, b)
        found, _ = patches_for(
            rule_decision(older, newer, sim), older, newer, tenant_id=tenant, conversation_id=conversation
        )
        out += found
    return out


def state_after(cards, all_patches):
    return {c.card_id: apply_patches(payload(c), [p for p in all_patches if p.card_id == c.card_id]) for c in cards}


@pytest.mark.parametrize(
    "older, newer, sim, action",
    [
        (BOSTON, DENVER, 0.85, "supersede"),
        (BOSTON, view("b2", "maria lives in boston", 5), 0.80, "duplicate"),  # same words again
        (BOSTON, view("b3", "Maria really likes living in Boston.", 5), 0.96, "duplicate"),  # nearly the same
        (BOSTON, view("tea", "Maria drinks green tea every morning.", 5, "preference"), 0.81, "keep_both"),
        (
            view("e1", "Maria ran a marathon.", 0, "event"),
            view("e2", "Maria now ran a second marathon.", 9, "event"),
            0.85,
            "keep_both",
        ),  # events happened; a later one does not undo an earlier one
    ],
)
def test_rule_decisions(older, newer, sim, action):
    assert rule_decision(older, newer, sim) == action


def test_a_contradiction_keeps_the_old_fact_with_its_validity_and_leaves_the_current_view():
    state = state_after([BOSTON, DENVER], patches([(DENVER, BOSTON, 0.85)]))  # arrival order reversed
    assert is_current(state["denver"]) and not is_current(state["boston"])
    assert state["boston"]["superseded_by"] == "denver"
    assert state["boston"]["valid_to"] == (T0 + timedelta(days=21)).isoformat()
    assert state["boston"]["text"] == "Maria lives in Boston."  # kept for questions about the past


def test_only_the_newer_card_updates_the_older():
    with pytest.raises(ValueError, match="only the newer"):
        patches_for("supersede", DENVER, BOSTON, tenant_id="acme", conversation_id="c1")


def test_duplicates_collapse_to_the_earliest_card_with_the_repeats_as_support():
    again = view("b2", "Maria lives in Boston.", 3)
    third = view("b3", "Maria lives in Boston!", 9)
    state = state_after([BOSTON, again, third], patches([(again, BOSTON, 0.99), (third, BOSTON, 0.99)]))
    assert [c for c, p in state.items() if is_current(p)] == ["boston"]
    assert state["boston"]["support"] == ["b2", "b3"]
    assert state["b2"]["duplicate_of"] == "boston" and state["b3"]["duplicate_of"] == "boston"


def test_any_arrival_order_and_redelivery_give_the_same_state():
    cards = [BOSTON, DENVER, SEATTLE]
    pairs = [(BOSTON, DENVER, 0.85), (SEATTLE, BOSTON, 0.82), (DENVER, SEATTLE, 0.88)]
    expected = state_after(cards, patches(pairs))
    for order in itertools.permutations(pairs):
        found = patches(order)
        assert state_after(cards, found) == expected
        assert state_after(cards, found + found) == expected  # redelivered
    # Each state points to its direct successor: Boston → Denver → Seattle.
    assert expected["boston"]["superseded_by"] == "denver" and expected["denver"]["superseded_by"] == "seattle"
    assert [c for c, p in expected.items() if is_current(p)] == ["seattle"]


def test_a_merge_makes_a_new_card_with_lineage_and_a_deterministic_id():
    older, newer = view("a", "Maria plays tennis.", 0, "fact"), view("b", "Maria plays tennis on Sundays.", 4, "fact")
    first, new = patches_for(
        "merge", older, newer, tenant_id="acme", conversation_id="c1", merged_text="Maria plays tennis, on Sundays."
    )
    again, new_again = patches_for(
        "merge", older, newer, tenant_id="acme", conversation_id="c1", merged_text="Maria plays tennis, on Sundays."
    )
    assert new == new_again and new[0].lineage == ("a", "b")
    state = state_after([older, newer], first)
    assert not is_current(state["a"]) and not is_current(state["b"])
    assert state["a"]["superseded_by"] == state["b"]["superseded_by"] == new[0].card_id
    assert patches_for("keep_both", older, newer, tenant_id="acme", conversation_id="c1") == ([], [])


def test_view_from_a_stored_payload():
    stored = {
        "subject": "Maria",
        "type": "state",
        "text": "Maria lives in Boston.",
        "event_ts": 5.0,
        "valid_from": T0.isoformat(),
    }
    card = CardView.from_payload("boston", stored)
    assert card.order == (5.0, T0.timestamp(), "boston")
