"""The watchdog judges each stage on its own: a partition lagging while the stages that read it idle
is stranded, however busy another stage is (questions keep only the query stage busy)."""

from memstream.streams.runtime.watchdog import busy_stages, quiet_topics

READERS = {"turns": ["compress"], "cards": ["index", "consolidate"], "queries": ["query"]}


def test_a_stage_is_busy_with_a_message_in_hand_or_one_finished_since_the_last_look():
    stages = ["compress", "index", "consolidate", "query"]
    last = {"compress": 5, "query": 10}
    busy = busy_stages(stages, {"index": 1}, {"compress": 5, "query": 12}, last)
    assert busy == {"index", "query"}


def test_questions_keep_only_the_query_topic_from_being_judged():
    assert quiet_topics(READERS, {"query"}) == {"turns", "cards"}


def test_a_topic_two_stages_read_is_quiet_only_when_both_idle():
    assert "cards" not in quiet_topics(READERS, {"consolidate"})
    assert quiet_topics(READERS, set()) == set(READERS)
