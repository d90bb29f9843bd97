"""Boundary detection on hand-made streams: vectors and attention cohesion are built by hand, so the
rules (adaptive θ, coarse candidates, the hybrid pairing, windows, sessions) are checked exactly."""

import numpy as np
import pytest

from memstream.processors.write.segment import (
    Segmenter,
    SegmenterState,
    SegmentParams,
    coarse_candidates,
    fine_boundaries,
    head_scores,
    hybrid_boundaries,
    select_heads,
    window_is_idle,
)
from memstream.schemas import SegmentedTurn, Turn
from tests.factories import compressed, turn

TOPICS = {"dog": np.array([1.0, 0, 0]), "tax": np.array([0, 1.0, 0]), "trip": np.array([0, 0, 1.0])}


def vector(text: str) -> np.ndarray:
    """A turn's vector: its topic word, plus a little of the word after '+' (drift)."""
    topic, _, drift = text.partition("+")
    v = TOPICS[topic.split()[0]].copy()
    if drift:
        v = v + 0.6 * TOPICS[drift.strip()]
    return v / np.linalg.norm(v)


def embed(texts):
    return np.stack([vector(t) for t in texts])


def cohesion_from_vectors(texts):
    """Fake attention: 2 layers x 2 heads; head (1, 0) follows topic, the others are noise."""
    v = embed(texts)
    sims = np.einsum("ij,ij->i", v[:-1], v[1:])
    out = np.zeros((len(texts) - 1, 2, 2))
    rng = np.random.default_rng(0)
    out[:, 0, :] = rng.random((len(texts) - 1, 2))
    out[:, 1, 0] = sims
    out[:, 1, 1] = 0.5
    return out


def feed(segmenter: Segmenter, texts: list[str], session_of=lambda i: "S1", last=None) -> list:
    state = SegmenterState()
    out = []
    for i, text in enumerate(texts):
        t = turn(f"D1:{i + 1}", text, session=session_of(i), seq=i, last=(last == i))
        out += segmenter.add(state, compressed(t), now=float(i))
    out += segmenter.drain(state)
    return out


def test_fine_boundaries_raise_theta_only_in_a_full_window():
    params = SegmentParams()
    sims = [0.9, 0.45, 0.8, 0.3]
    assert fine_boundaries(sims, params, adaptive=False) == []
    # 0.2 → 0.35 finds the 0.3 gap (before turn 4); 0.45 stays above it
    assert fine_boundaries(sims, params, adaptive=True) == [4]
    assert fine_boundaries([0.9, 0.8], params, adaptive=True) == []  # never above θ max 0.5
    assert fine_boundaries([0.1, 0.9, 0.15], params, adaptive=True) == [1, 3]


def test_coarse_candidates_are_deep_local_minima():
    params = SegmentParams(coarse_z=0.5)
    scores = [1.0, 1.0, 0.1, 1.0, 0.9, 1.0, 0.2, 1.0]
    assert coarse_candidates(scores, params) == [3, 7]  # gap index + 1 = the turn that opens


def test_hybrid_pairs_each_candidate_with_its_nearest_fine_boundary():
    # two fine boundaries near one candidate: only the nearest survives; a far one is dropped
    assert hybrid_boundaries([4, 5, 20], [5], radius=3) == [5]
    assert hybrid_boundaries([4, 9], [5, 8], radius=3) == [4, 9]
    assert hybrid_boundaries([4], [8], radius=3) == []


def test_head_scores_use_only_the_chosen_heads():
    coh = cohesion_from_vectors(["dog", "dog", "tax", "tax"])
    z = head_scores(coh, [(1, 0)])
    assert np.argmin(z) == 1  # the gap before "tax"


def test_select_heads_finds_the_head_that_follows_similarity():
    texts = ["dog", "dog", "tax", "tax", "trip", "dog", "dog", "trip", "tax", "tax"]
    coh = cohesion_from_vectors(texts)
    v = embed(texts)
    sims = np.einsum("ij,ij->i", v[:-1], v[1:])
    assert select_heads(coh, sims, top_n=1) == [(1, 0)]


@pytest.mark.parametrize("method", ["similarity", "attention", "hybrid"])
def test_stream_cuts_at_topic_changes(method):
    params = SegmentParams(method=method, window_turns=6, carry_turns=2, heads=((1, 0),))
    segmenter = Segmenter(params, embed, cohesion_from_vectors)
    texts = ["dog", "dog", "dog", "dog", "tax", "tax", "tax", "tax", "trip", "trip", "trip", "trip"]
    out = feed(segmenter, texts)
    assert [o.item.turn.turn_id for o in out] == [f"D1:{i + 1}" for i in range(12)]  # all, in order
    opens = [i for i, o in enumerate(out) if o.boundary]
    assert opens == [0, 4, 8]
    assert out[0].boundary_reason == "first" and out[4].boundary_reason == method
    assert len({o.segment_id for o in out}) == 3
    assert out[4].topic_label != out[0].topic_label


def test_hybrid_runs_the_attention_pass_only_for_windows_similarity_would_cut():
    calls: list[int] = []

    def counted(texts):
        calls.append(len(texts))
        return cohesion_from_vectors(texts)

    params = SegmentParams(window_turns=6, carry_turns=2, heads=((1, 0),))
    lazy, eager = Segmenter(params, embed, counted), Segmenter(params, embed, cohesion_from_vectors)
    # A session that ends short of a full window at θ's start: no gap is under θ, nothing to confirm.
    assert [o.boundary for o in feed(lazy, ["dog", "dog + trip", "dog"])] == [True, False, False]
    assert calls == []
    texts = ["dog", "dog", "dog", "dog", "tax", "tax", "tax", "tax", "trip", "trip"]
    got = [(o.boundary, o.boundary_reason) for o in feed(lazy, texts)]
    assert calls and got == [(o.boundary, o.boundary_reason) for o in feed(eager, texts)]


def test_small_drift_inside_a_topic_is_not_cut():
    params = SegmentParams(window_turns=6, carry_turns=2, heads=((1, 0),))
    segmenter = Segmenter(params, embed, cohesion_from_vectors)
    texts = ["dog", "dog + trip", "dog", "dog", "dog + tax", "dog", "tax", "tax", "tax", "tax"]
    opens = [i for i, o in enumerate(feed(segmenter, texts)) if o.boundary]
    assert opens == [0, 6]


def test_a_new_session_always_cuts_and_flushes_the_window():
    params = SegmentParams(window_turns=10, carry_turns=2, heads=((1, 0),))
    segmenter = Segmenter(params, embed, cohesion_from_vectors)
    state = SegmenterState()
    out = []
    for i, (text, session) in enumerate([("dog", "S1"), ("dog", "S1"), ("dog", "S2"), ("dog", "S2")]):
        out += segmenter.add(state, compressed(turn(f"D{session[1]}:{i}", text, session=session)), now=i)
    assert [o.boundary_reason for o in out] == ["first", "none"]  # S1 emitted when S2 began
    assert len(state.pending) == 2 and state.head_reason == "session"
    out += segmenter.drain(state)
    assert [o.boundary_reason for o in out] == ["first", "none", "session", "none"]


def test_last_turn_of_a_session_drains_the_window():
    segmenter = Segmenter(SegmentParams(method="similarity"), embed)
    state = SegmenterState()
    assert segmenter.add(state, compressed(turn("D1:1", "dog")), now=0) == []
    out = segmenter.add(state, compressed(turn("D1:2", "dog", last=True)), now=1)
    assert [o.item.turn.turn_id for o in out] == ["D1:1", "D1:2"] and state.pending == []


def test_redelivered_turns_are_dropped_and_state_round_trips():
    segmenter = Segmenter(SegmentParams(method="similarity"), embed)
    state = SegmenterState()
    segmenter.add(state, compressed(turn("D1:1", "dog")), now=5.0)
    state = SegmenterState.from_dict(state.to_dict())
    assert segmenter.add(state, compressed(turn("D1:1", "dog")), now=6.0) == []
    assert len(state.pending) == 1
    assert window_is_idle(state, now=40.0, idle_s=30) and not window_is_idle(state, now=10.0, idle_s=30)


def test_attention_methods_need_an_attention_model():
    with pytest.raises(ValueError):
        Segmenter(SegmentParams(method="hybrid"), embed, None)


def unnumbered(turn_id: str, text: str = "dog", **kw) -> Turn:
    """A turn as the SDK, the gateway or a chat platform sends it: no ``metadata.seq``."""
    t = turn(turn_id, text, **kw)
    return t.model_copy(update={"metadata": {"platform": "slack"}})


def test_turns_without_a_position_are_numbered_one_by_one_across_windows_and_restarts():
    segmenter = Segmenter(SegmentParams(method="similarity"), embed)
    state, emitted = SegmenterState(), []
    for i in range(1, 4):
        emitted += segmenter.add(state, compressed(unnumbered(f"D1:{i}")), now=float(i))
    emitted += segmenter.drain(state)  # an idle flush: the numbering goes on after it
    state = SegmenterState.from_dict(state.to_dict())  # and after the worker restarts from the changelog
    assert segmenter.add(state, compressed(unnumbered("D1:3")), now=4.0) == []  # a redelivery takes no number
    for i in range(4, 6):
        emitted += segmenter.add(state, compressed(unnumbered(f"D1:{i}", session="S2")), now=float(i))
    emitted += segmenter.drain(state)
    assert [(o.item.turn.turn_id, o.item.turn.seq) for o in emitted] == [(f"D1:{i}", i - 1) for i in range(1, 6)]
    assert all(o.item.turn.metadata["platform"] == "slack" for o in emitted)  # the rest of it kept


def test_a_producers_positions_are_kept_and_ours_continue_after_them():
    segmenter = Segmenter(SegmentParams(method="similarity"), embed)
    state = SegmenterState()
    out = segmenter.add(state, compressed(turn("D1:1", "dog", seq=7)), now=1.0)
    out += segmenter.add(state, compressed(unnumbered("D1:2")), now=2.0)
    out += segmenter.add(state, compressed(turn("D1:3", "dog", seq=3)), now=3.0)  # kept as given
    out += segmenter.add(state, compressed(unnumbered("D1:4")), now=4.0)
    out += segmenter.drain(state)
    assert [o.item.turn.seq for o in out] == [7, 8, 3, 9]
    bad = turn("D1:5", "dog").model_copy(update={"metadata": {"seq": "five"}})  # not a position: numbered
    out = segmenter.add(state, compressed(bad), now=5.0) + segmenter.drain(state)
    assert [o.item.turn.metadata["seq"] for o in out] == [10]


def test_a_turn_whose_metadata_is_full_is_not_numbered_and_stays_valid():
    segmenter = Segmenter(SegmentParams(method="similarity"), embed)
    state = SegmenterState()
    full = turn("D1:1", "dog").model_copy(update={"metadata": {f"k{i}": i for i in range(64)}})
    out = segmenter.add(state, compressed(full), now=1.0) + segmenter.drain(state)
    [emitted] = out
    assert emitted.item.turn.seq is None and state.next_seq == 0
    assert SegmentedTurn.from_bytes(emitted.to_bytes()) == emitted  # the next stage takes it
