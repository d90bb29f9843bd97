"""The broker config memstream asks for: bounded retention where raw text lives, compaction for
the audit and the changelogs (no broker needed)."""

from __future__ import annotations

from memstream.config import Settings, changelog_topics
from memstream.schemas.topics import ALL_TOPICS
from memstream.streams.topics import topic_configs


def test_raw_text_topics_are_deleted_by_age_and_state_topics_are_compacted():
    s = Settings(topic_prefix="m", topic_retention_s=86400.0)
    configs = topic_configs(s, ["segment", "stm"])
    day = str(86400 * 1000)
    for name in ("turns", "turns.compressed", "segments", "stm.flush", "cards", "updates", "replies", "queries", "dlq"):
        assert configs[f"m.{name}"]["cleanup.policy"] == "delete" and configs[f"m.{name}"]["retention.ms"] == day
        assert int(configs[f"m.{name}"]["segment.ms"]) == 86400 * 1000 // 7
    assert configs["m.audit"]["cleanup.policy"] == "compact" and configs["m.audit"]["max.compaction.lag.ms"] == day
    for changelog in changelog_topics("m", ["segment", "stm"]):
        assert configs[changelog]["cleanup.policy"] == "compact"
    assert set(configs) == {f"m.{t}" for t in ALL_TOPICS} | set(changelog_topics("m", ["segment", "stm"]))
