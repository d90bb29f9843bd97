"""Hostile input (``memstream bench fuzz`` with 300 messages, a seed that sends every kind of message):
every bad message is dead-lettered once with its reason, every good turn is stored, every good query
answered, no worker crashes."""

from __future__ import annotations

import pytest

from memstream.bench.fuzz import fuzz_messages, run_fuzz_bench

pytestmark = pytest.mark.integration


def test_300_hostile_and_good_messages(kafka, tmp_path):
    result = run_fuzz_bench(300, seed=91, workdir=tmp_path)
    # Every category of fuzz_messages, each good and bad kind of turn, query and control among them.
    assert set(result["categories"]) == {m.category for m in fuzz_messages(5000, seed=0)}
    assert result["sent_bad"] > 100 and result["good_turns"] > 50 and result["good_queries"] > 5
    assert result["crashes"] == 0 and result["worker_restarts"] == 0
    assert result["bad_not_dead_lettered"] == 0, result["bad_not_dead_lettered_by_category"]
    assert result["dead_lettered"] == result["sent_bad"] and result["extra_dead_letters"] == 0
    assert result["dead_letters_without_reason"] == 0
    assert result["good_stored"] == result["good_turns"]
    assert result["good_queries_answered"] == result["good_queries"]
