"""`bench tracing-overhead`: medians and ratios of the three configurations' runs."""

from pathlib import Path

from memstream.bench.tracing_overhead import paired, summary


def runs(*per_s: float) -> list[dict]:
    return [{"turns": 100, "turns_per_s": x} for x in per_s]


def test_paired_ratios_take_the_median_over_rounds_of_each_rounds_ratio():
    assert paired(runs(9.0, 10.0, 20.0), runs(10.0, 10.0, 10.0)) == 1.0


def test_the_summary_gives_the_medians_and_both_ratios():
    result = summary(
        {"before_off": runs(10.0, 10.0, 10.0), "off": runs(10.0, 9.0, 11.0), "on": runs(9.0, 9.0, 9.9)},
        data=Path("d.json"),
        conversations="conv-26",
        rounds=3,
        before="1ca49c3",
        head="abc",
    )
    assert result["median_turns_per_s"] == {"before_off": 10.0, "off": 10.0, "on": 9.0}
    assert (result["off_vs_before"], result["on_vs_off"]) == (1.0, 0.9)
    assert result["paired_on_vs_off"] == 0.9
