"""Imported history's positions: each conversation in event-time order, before its live turns."""

from memstream.processors.write.history import number_history
from tests.factories import turn


def unnumbered(turn_id: str, minutes: int, conversation: str = "c1"):
    t = turn(turn_id, conversation=conversation, minutes=minutes)
    return t.model_copy(update={"metadata": {}})


def test_each_conversation_is_ordered_by_event_time_and_numbered_below_zero():
    given = [unnumbered("b", 5), unnumbered("x", 1, "c2"), unnumbered("a", 0), unnumbered("c", 9)]
    out = number_history(given)
    assert [(t.conversation_id, t.turn_id, t.seq) for t in out] == [
        ("c1", "a", -3),
        ("c1", "b", -2),
        ("c1", "c", -1),
        ("c2", "x", -1),
    ]


def test_ties_keep_their_order_and_a_producer_position_is_kept():
    given = [unnumbered("a", 0), unnumbered("b", 0), turn("n", seq=7, minutes=3)]
    out = number_history(given)
    assert [(t.turn_id, t.seq) for t in out] == [("a", -2), ("b", -1), ("n", 7)]


def test_numbering_again_gives_the_same_positions():
    given = [unnumbered("a", 2), unnumbered("b", 1)]
    assert [t.seq for t in number_history(given)] == [t.seq for t in number_history(given)] == [-2, -1]
