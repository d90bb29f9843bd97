"""`bench embed-device`: the timing and comparison arithmetic (no model)."""

import numpy as np
import pytest

from memstream.bench.embed_device import cosine_to_reference, latency_ms, passes


def test_texts_per_second_is_the_best_pass_after_a_warm_up():
    calls: list[int] = []
    rate = passes(lambda texts: calls.append(len(texts)), ["a"] * 300, repeats=2)
    assert calls == [256, 300, 300] and rate > 0


def test_latency_is_the_median_and_the_99th_of_the_calls():
    assert latency_ms([float(ms) for ms in range(1, 101)]) == {"p50": 50.5, "p99": 99.0}


def test_vectors_are_compared_with_their_reference_row_by_row():
    reference = np.array([[1.0, 0.0], [0.0, 2.0]])
    assert cosine_to_reference(reference * 3, reference) == {"mean": 1.0, "min": 1.0}
    assert cosine_to_reference(np.array([[1.0, 0.0], [1.0, 0.0]]), reference)["min"] == pytest.approx(0.0)
