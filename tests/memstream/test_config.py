"""Stage groups: consumer group ids, and which group reads which topic."""

from memstream.topology import STAGES, TOPOLOGY, group_id, reading_groups


def test_every_stage_has_inputs():
    assert tuple(TOPOLOGY) == STAGES


def test_each_stage_set_is_its_own_consumer_group():
    assert group_id("memory", STAGES) == "memory-memstream"
    assert group_id("memory", ["compress", "segment"]) == "memory-memstream-compress-segment"


def test_a_topic_is_drained_by_every_group_reading_it():
    ingest, store = ("compress", "segment", "stm", "extract"), ("index", "consolidate", "query")
    reading = reading_groups("p", [ingest, store], ("turns", "stm.flush", "cards", "updates"))
    assert reading == {
        "p-memstream-compress-segment-stm-extract": ["p.turns", "p.stm.flush"],
        "p-memstream-index-consolidate-query": ["p.cards", "p.updates"],
    }
    assert reading_groups("p", [STAGES], ["queries"]) == {"p-memstream": ["p.queries"]}


def test_each_stage_set_names_the_changelogs_of_its_tables():
    from memstream.topology import STAGES, changelog_topics

    assert changelog_topics("memory", list(STAGES)) == [
        "memory-memstream-forgets-changelog",
        "memory-memstream-segmenter-changelog",
        "memory-memstream-segmenter-seen-changelog",
        "memory-memstream-stm-changelog",
        "memory-memstream-stm-seen-changelog",
        "memory-memstream-consolidation-changelog",
    ]
    assert changelog_topics("p", ["compress", "segment"]) == [
        "p-memstream-compress-segment-forgets-changelog",
        "p-memstream-compress-segment-segmenter-changelog",
        "p-memstream-compress-segment-segmenter-seen-changelog",
    ]
    assert changelog_topics("p", ["query"]) == []
