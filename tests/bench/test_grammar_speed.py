"""`bench grammar-speed`: each timed run's tokens per second."""

from memstream.bench.grammar_speed import with_speeds


def test_each_timed_run_gets_its_tokens_per_second_and_rounded_seconds():
    result = with_speeds(
        {
            "grammar_after_sampling": {"completion_tokens": 100, "s": 2.004},
            "grammar_before_top_k": {"completion_tokens": 100, "s": 8.0},
        }
    )
    assert result["grammar_after_sampling"] == {"completion_tokens": 100, "s": 2.0, "tokens_per_s": 49.9}
    assert result["grammar_before_top_k"]["tokens_per_s"] == 12.5
