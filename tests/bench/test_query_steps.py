"""`bench query-steps`: the spread of the timings and the lines printed."""

from memstream.bench.query_steps import percentiles, summary_lines


def test_timings_are_summed_up_as_count_median_90th_and_max():
    assert percentiles([float(ms) for ms in range(10, 0, -1)]) == {"n": 10, "p50": 5.5, "p90": 9.0, "max": 10.0}


def test_a_line_per_step_then_per_kind_of_search():
    s = {"n": 3, "p50": 1.0, "p90": 2.0, "max": 3.0}
    lines = summary_lines({"steps_ms": {"total_ms": s}, "searches_ms": {"cards:": s}})
    assert [line.split()[0] for line in lines] == ["total_ms", "cards:"]
    assert lines[0].split()[1:] == ["n", "3", "p50", "1.0", "p90", "2.0", "max", "3.0"]
