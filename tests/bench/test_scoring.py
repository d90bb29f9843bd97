from memstream.bench.scoring import BoundaryScore, score_boundaries


def test_boundaries_match_one_to_one_within_the_tolerance():
    s = score_boundaries([5, 6, 20, 31], [5, 30, 40], tolerance=1)
    assert (s.predicted, s.gold, s.matched) == (4, 3, 2)  # 6 cannot reuse 5's match; 20 is too far
    assert s.precision == 0.5 and round(s.recall, 3) == 0.667 and round(s.f1, 3) == 0.571


def test_scores_add_up_over_streams():
    total = score_boundaries([3], [3]) + score_boundaries([], [7])
    assert total == BoundaryScore(1, 2, 1) and total.recall == 0.5
    assert BoundaryScore(0, 0, 0).f1 == 0.0
