"""Delivery under failure: ``memstream bench chaos`` for two minutes, checked point by point against a
run without failures (kill -9 and SIGSTOP of workers in two stage groups, one broker restart); and
for three minutes on a Kafka cluster and a Qdrant cluster with broker and node kills (``cluster``)."""

from __future__ import annotations

import pytest

from memstream.bench import clusters
from memstream.bench.chaos import ChaosOptions, run_chaos_bench

pytestmark = pytest.mark.integration


def assert_delivered(result: dict, more_queries_than: int) -> None:
    # Nothing lost, nothing doubled, no point the reference lacks (or the reverse), no good input dead-lettered.
    assert result["turns"] == result["turns_planned"] > 100
    assert (result["lost"], result["duplicated"]) == (0, 0)
    assert (result["extra_points"], result["missing_points"]) == (0, 0), result
    assert result["dead_letters"] == 0, result["dead_letter_reasons"]
    # Every question got a reply or a clear error (counted apart, with its reason); none went unanswered.
    assert result["queries"] > more_queries_than and result["answered"] > 0
    assert result["unanswered"] == 0, [t for t in result["timeline"] if t[2] != "ok"]
    assert result["answered"] + result["error_replies"] + result["send_errors"] == result["queries"]


@pytest.mark.timeout(1500)  # a reference run, two minutes of failures, then the drains (about 6 min here)
def test_two_minutes_of_failures_lose_double_and_drop_nothing(tmp_path, monkeypatch):
    # On a broker of its own, which the run starts, restarts and stops: the shared one stays up for the
    # tests beside it (CI runs the cluster suite beside make test).
    port = clusters.free_base_port(26092, [0, 1], step=10)
    monkeypatch.setenv("MEMSTREAM_KAFKA_BOOTSTRAP", f"127.0.0.1:{port}")
    monkeypatch.setenv("MEMSTREAM_KAFKA_DATA", str(tmp_path / "own-kafka"))
    result = run_chaos_bench(ChaosOptions(minutes=2.0, seed=0, workdir=tmp_path))
    # The failures happened.
    assert result["kills"] >= 3 and result["stops"] >= 1 and result["broker_restarts"] == 1
    assert result["rebalances"] > 3
    assert_delivered(result, more_queries_than=20)


@pytest.mark.cluster
@pytest.mark.timeout(1800)  # a reference run, three minutes of failures, then the drains
def test_three_minutes_of_failures_on_the_clusters_lose_double_and_drop_nothing(kafka, tmp_path):
    result = run_chaos_bench(ChaosOptions(minutes=3.0, seed=0, cluster=True, workdir=tmp_path))
    # The failures happened: workers, a broker, a Qdrant node, and a whole group at once.
    assert result["kills"] >= 3 and result["stops"] >= 1
    assert result["broker_kills"] >= 1 and result["qdrant_kills"] >= 1 and result["group_kills"] == 1
    assert_delivered(result, more_queries_than=30)
