"""Recent turn ids in pieces: sealing, what stays remembered, and what a redelivery check sees."""

import pytest

from memstream.processors.write.seen_ids import SeenPieces, piece_key
from memstream.processors.write.segment import Segmenter, SegmenterState, SegmentParams
from memstream.processors.write.stm import StmPolicy, StmState, add_turn
from tests.factories import compressed, segmented, turn

from .test_segment import embed


def test_an_open_piece_short_of_full_is_not_sealed():
    assert SeenPieces(remember=8, piece_ids=4).roll(["a", "b", "c"], 0) is None


def test_a_full_piece_is_sealed_once_and_the_oldest_go_when_out_of_memory():
    pieces = SeenPieces(remember=8, piece_ids=4)  # two sealed pieces kept
    assert pieces.pieces_kept == 2
    roll = pieces.roll(list("abcd"), 0)
    assert roll is not None
    assert (roll.open_ids, roll.sealed, roll.delete) == ([], 1, [])
    assert [(p.index, p.ids) for p in roll.write] == [(0, list("abcd"))]
    roll = pieces.roll(list("efgh"), 1)
    assert roll is not None and roll.delete == [] and [p.index for p in roll.write] == [1]
    roll = pieces.roll(list("ijkl"), 2)  # piece 0 falls out: 1 and 2 remain
    assert roll is not None and roll.delete == [0] and [p.index for p in roll.write] == [2]
    assert pieces.live(3) == range(1, 3)


def test_an_entry_from_before_pieces_is_cut_into_them_and_only_the_remembered_are_written():
    pieces = SeenPieces(remember=8, piece_ids=4)
    roll = pieces.roll([f"t{i}" for i in range(13)], 0)  # an older worker's one list of 13 ids
    assert roll is not None
    assert roll.open_ids == ["t12"] and roll.sealed == 3
    assert [p.index for p in roll.write] == [1, 2] and roll.write[0].ids == ["t4", "t5", "t6", "t7"]
    assert roll.delete == []


def test_the_sizes_must_be_positive():
    with pytest.raises(ValueError):
        SeenPieces(remember=0)
    with pytest.raises(ValueError):
        SeenPieces(remember=4, piece_ids=0)


def test_a_piece_key_names_its_conversation_and_index():
    assert piece_key("acme/c1", 3) == "acme/c1#3"


def test_the_window_and_the_buffer_drop_a_turn_seen_in_an_earlier_piece():
    segmenter = Segmenter(SegmentParams(method="similarity"), embed)
    window = SegmenterState()
    segmenter.add(window, compressed(turn("D1:1", "dog")), now=1.0)
    window.seen = []  # sealed away: only the earlier piece knows it
    assert segmenter.add(window, compressed(turn("D1:1", "dog")), now=2.0, seen_before={"D1:1"}) == []
    assert len(window.pending) == 1
    buffer = StmState()
    policy = StmPolicy(budget_tokens=1000)
    add_turn(buffer, segmented(turn("D1:1", "hello")), 0.0, policy)
    buffer.seen = []
    assert add_turn(buffer, segmented(turn("D1:1", "hello")), 1.0, policy, seen_before={"D1:1"}) == []
    assert buffer.pending_turns == 1
