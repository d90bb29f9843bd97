"""The broker config memstream asks for: bounded retention where raw text lives, compaction for
the audit and the changelogs, the configured replication (no broker needed)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.config import Settings
from memstream.schemas.topics import ALL_TOPICS
from memstream.streams.topics import topic_configs
from memstream.topology import changelog_topics


def test_raw_text_topics_are_deleted_by_age_and_state_topics_are_compacted():
    s = Settings(topic_prefix="m", topic_retention_s=86400.0)
    configs = topic_configs(s, ["segment", "stm"])
    day = str(86400 * 1000)
    for name in ("turns", "turns.compressed", "segments", "stm.flush", "cards", "updates", "replies", "queries", "dlq"):
        assert configs[f"m.{name}"]["cleanup.policy"] == "delete" and configs[f"m.{name}"]["retention.ms"] == day
        assert int(configs[f"m.{name}"]["segment.ms"]) == 86400 * 1000 // 7
    assert configs["m.audit"]["cleanup.policy"] == "compact" and configs["m.audit"]["max.compaction.lag.ms"] == day
    assert "delete.retention.ms" not in configs["m.audit"] and "delete.retention.ms" not in configs["m.record"]
    for changelog in changelog_topics("m", ["segment", "stm"]):
        assert configs[changelog]["cleanup.policy"] == "compact"
        # An evicted entry's tombstone goes within a compaction period, not Kafka's day.
        assert int(configs[changelog]["delete.retention.ms"]) == 86400 * 1000 // 7
    assert set(configs) == {f"m.{t}" for t in ALL_TOPICS} | set(changelog_topics("m", ["segment", "stm"]))


def test_every_topic_gets_min_insync_replicas_from_the_settings():
    s = Settings(topic_prefix="m", topic_replication_factor=3, topic_min_insync_replicas=2)
    configs = topic_configs(s, ["segment", "stm"])
    assert {c["min.insync.replicas"] for c in configs.values()} == {"2"}
    assert {c["min.insync.replicas"] for c in topic_configs(Settings(topic_prefix="m")).values()} == {"1"}


def test_the_replication_factor_reaches_the_topics_memstream_creates_and_faust():
    import faust

    from memstream.streams.runtime.app import kafka_config
    from memstream.streams.topics import new_topics

    s = Settings(
        topic_prefix="m",
        kafka_bootstrap="127.0.0.1:1,127.0.0.1:3",
        topic_partitions=6,
        topic_replication_factor=3,
        topic_min_insync_replicas=2,
    )
    configs = topic_configs(s, ["segment"])
    created = new_topics(s, sorted(configs), configs)
    assert {(t.num_partitions, t.replication_factor) for t in created} == {(6, 3)}
    assert all(t.topic_configs["min.insync.replicas"] == "2" for t in created)
    conf = faust.App("replication-test", **kafka_config(s)).conf
    assert conf.topic_replication_factor == 3 and conf.topic_partitions == 6
    assert conf.producer_acks == -1  # acks=all: min.insync.replicas only guards acks=all writes
    assert [str(url) for url in conf.broker] == ["kafka://127.0.0.1:1", "kafka://127.0.0.1:3"]


def test_min_insync_replicas_above_the_replication_factor_is_refused():
    with pytest.raises(ValidationError, match="TOPIC_MIN_INSYNC_REPLICAS=2 is more than"):
        Settings(topic_replication_factor=1, topic_min_insync_replicas=2)
    with pytest.raises(ValidationError):
        Settings(topic_replication_factor=0)
    assert Settings(topic_replication_factor=3, topic_min_insync_replicas=3).topic_min_insync_replicas == 3


def test_an_existing_topic_with_fewer_replicas_keeps_a_writable_min_insync(caplog):
    from memstream.streams.topics import _cap_insync, _replicas

    s = Settings(topic_prefix="m", topic_replication_factor=3, topic_min_insync_replicas=2)
    configs = topic_configs(s)
    described = [
        {"topic": "m.turns", "partitions": [{"replicas": [1]}, {"replicas": [2]}]},
        {"topic": "m.cards", "partitions": [{"replicas": [1, 2, 3]}]},
    ]
    _cap_insync(s, configs, _replicas(described))
    assert configs["m.turns"]["min.insync.replicas"] == "1"
    assert configs["m.cards"]["min.insync.replicas"] == "2"
    assert "m.turns (1)" in caplog.text


def test_a_created_topic_counts_as_listed_only_with_every_partition_led():
    from memstream.streams.topics import unlisted_topics

    def partition(leader: int, error: int = 0) -> dict:
        return {"error_code": error, "partition": 0, "leader": leader, "replicas": [1], "isr": [1]}

    described = [
        {"error_code": 0, "topic": "whole", "partitions": [partition(1), partition(2)]},
        {"error_code": 0, "topic": "short", "partitions": [partition(1)]},
        {"error_code": 0, "topic": "leaderless", "partitions": [partition(1), partition(-1)]},
        {"error_code": 5, "topic": "in-error", "partitions": []},  # LEADER_NOT_AVAILABLE: still being created
        {"error_code": 0, "topic": "partition-in-error", "partitions": [partition(1), partition(1, error=9)]},
    ]
    wanted = dict.fromkeys(["whole", "short", "leaderless", "in-error", "partition-in-error", "absent"], 2)
    assert unlisted_topics(described, wanted) == sorted(set(wanted) - {"whole"})
    assert unlisted_topics(described, {"whole": 2}) == []
