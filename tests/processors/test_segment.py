import numpy as np

from processors.segment import SegmenterState, segment_turn
from tests.factories import compressed, turn


def unit(*xs):
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_similarity_drops_and_sessions_cut_segments():
    state = SegmenterState()
    stream = [
        (turn("D1:1", "I adopted a dog"), unit(1, 0, 0)),
        (turn("D1:2", "what breed is the dog"), unit(0.95, 0.1, 0)),
        (turn("D1:3", "my tax return is late"), unit(0, 1, 0)),        # topic change
        (turn("D1:4", "taxes are awful"), unit(0.05, 0.98, 0)),
        (turn("D2:1", "taxes again", session="S2"), unit(0.05, 0.98, 0)),  # new session
    ]
    out = [segment_turn(state, compressed(t), v, threshold=0.2) for t, v in stream]
    assert [o.boundary_reason for o in out] == ["first", "none", "similarity", "none", "session"]
    assert len({o.segment_id for o in out}) == 3
    assert out[0].segment_id == out[1].segment_id != out[2].segment_id == out[3].segment_id


def test_state_round_trips():
    state = SegmenterState()
    segment_turn(state, compressed(turn()), unit(1, 2, 3), threshold=0.2)
    again = SegmenterState.from_dict(state.to_dict())
    assert again.segment_id == state.segment_id
    assert np.allclose(again.last_vector, state.last_vector, atol=1e-4)
