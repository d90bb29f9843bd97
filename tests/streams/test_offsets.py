"""The commit tracker: a partition commits only over offsets every stage reading it finished, from
its position, and each stage learns the offset it must handle next."""

from memstream.streams.runtime.offsets import CommitTracker, Partition

TOPIC = "t9.turns"
TP = Partition(TOPIC, 0)


def tracker(*stages: str, topic: str = TOPIC) -> CommitTracker:
    t = CommitTracker()
    for stage in stages or ("compress",):
        t.subscribe(stage, topic)
    return t


def test_nothing_commits_before_the_position_is_known():
    t = tracker()
    t.finished("compress", TOPIC, 0, 0)
    assert t.committable() == {}
    assert t.without_position() == [TP]
    assert t.next_for("compress", TOPIC, 0) is None


def test_a_run_of_finished_offsets_from_the_position_commits():
    t = tracker()
    for offset in (0, 1, 2):
        t.finished("compress", TOPIC, 0, offset)
    t.start_at(TP, 0)
    assert t.committable() == {TP: 3}
    assert t.next_for("compress", TOPIC, 0) == 3


def test_an_unfinished_head_holds_the_partition_back():
    # faust would commit 20 here: the head (0..16) was fetched, dropped and never handled.
    t = tracker()
    for offset in range(17, 20):
        t.finished("compress", TOPIC, 0, offset)
    t.start_at(TP, 0)
    assert t.committable() == {}
    assert t.next_for("compress", TOPIC, 0) == 0


def test_a_hole_stops_the_commit_below_it():
    t = tracker()
    t.start_at(TP, 5)
    for offset in (5, 6, 8, 9):
        t.finished("compress", TOPIC, 0, offset)
    assert t.committable() == {TP: 7}
    t.committed({TP: 7})
    assert t.committable() == {}
    t.finished("compress", TOPIC, 0, 7)
    assert t.committable() == {TP: 10}


def test_an_offset_commits_once_every_stage_reading_the_topic_finished_it():
    t = tracker("index", "consolidate")
    t.start_at(TP, 0)
    for offset in (0, 1, 2):
        t.finished("index", TOPIC, 0, offset)
    t.finished("consolidate", TOPIC, 0, 0)
    assert t.committable() == {TP: 1}
    assert t.next_for("index", TOPIC, 0) == 3 and t.next_for("consolidate", TOPIC, 0) == 1


def test_offsets_below_the_position_are_dropped():
    t = tracker()
    t.start_at(TP, 10)
    t.finished("compress", TOPIC, 0, 3)  # a redelivery finished late: already committed
    assert t.committable() == {}
    assert t.without_position() == []
    assert t.next_for("compress", TOPIC, 0) == 10


def test_a_revoked_partition_rereads_its_position():
    t = tracker()
    t.start_at(TP, 0)
    t.finished("compress", TOPIC, 0, 0)
    t.forget([(TOPIC, 0)])
    assert t.committable() == {} and t.next_for("compress", TOPIC, 0) is None
    t.finished("compress", TOPIC, 0, 4)
    assert t.without_position() == [TP]
    t.start_at(TP, 4)  # another worker committed up to 4 meanwhile
    assert t.committable() == {TP: 5}


def test_partitions_are_independent():
    t = tracker()
    other = Partition(TOPIC, 1)
    t.start_at(TP, 0)
    t.start_at(other, 0)
    t.finished("compress", TOPIC, 0, 0)
    t.finished("compress", TOPIC, 1, 1)
    assert t.committable() == {TP: 1}
    assert t.next_for("compress", TOPIC, 1) == 0


class FakeConsumer:
    def __init__(self, *tps):
        self.tps = set(tps)
        self.sought = []

    def assignment(self):
        return self.tps

    async def seek_wait(self, offsets):
        self.sought.append({(tp.topic, tp.partition): o for tp, o in offsets.items()})


class FakeApp:
    def __init__(self, *tps):
        self.consumer = FakeConsumer(*tps)


def safe_commits(position: int):
    from memstream.streams.runtime.offsets import SafeCommits

    async def read(tps):
        return {tp: position for tp in tps}

    commits = SafeCommits(FakeApp(TP), read)
    commits.subscribe("compress", TOPIC)
    return commits


def test_a_stage_handles_in_order_skips_redeliveries_and_seeks_back_past_a_gap():
    import asyncio

    commits = safe_commits(5)

    async def run():
        assert await commits.skip_reason("compress", TOPIC, 0, 5) is None
        commits.finished("compress", TOPIC, 0, 5)
        assert await commits.skip_reason("compress", TOPIC, 0, 5) == "redelivered"
        assert await commits.skip_reason("compress", TOPIC, 0, 9) == "out_of_order"  # 6..8 never came
        assert commits.app.consumer.sought == [{(TOPIC, 0): 6}]
        assert await commits.skip_reason("compress", TOPIC, 0, 10) == "out_of_order"  # no second seek at once
        assert len(commits.app.consumer.sought) == 1
        assert await commits.skip_reason("compress", TOPIC, 0, 6) is None

    asyncio.run(run())


def test_a_revoke_commits_what_finished_before_the_partitions_go():
    import asyncio

    commits = safe_commits(5)
    consumer = commits.app.consumer
    consumer.committed = []
    consumer._committed_offset, consumer._acked, consumer._acked_index, consumer._gap = {}, {}, {}, {}

    async def commit(offsets):
        consumer.committed.append(dict(offsets))
        return True

    consumer._commit = commit

    async def run():
        for offset in (5, 6, 7):
            assert await commits.skip_reason("compress", TOPIC, 0, offset) is None
            commits.finished("compress", TOPIC, 0, offset)
        await commits._on_revoked(None, revoked=[TP])
        assert consumer.committed == [{(TOPIC, 0): 8}], "finished work is committed, not redone by the next owner"
        assert commits.tracker.position((TOPIC, 0)) is None, "then the partition is forgotten"

    asyncio.run(run())


def test_messages_in_progress_are_not_taken_twice_and_commit_only_once_all_before_them_finished():
    import asyncio

    commits = safe_commits(5)
    tracker = commits.tracker

    async def run():
        for offset in (5, 6, 7):  # three in progress at once
            assert await commits.skip_reason("compress", TOPIC, 0, offset) is None
            commits.took("compress", TOPIC, 0, offset)
        assert await commits.skip_reason("compress", TOPIC, 0, 6) == "redelivered"  # in progress
        assert await commits.skip_reason("compress", TOPIC, 0, 8) is None  # the next one, not a gap
        assert commits.app.consumer.sought == []
        commits.finished("compress", TOPIC, 0, 7)
        commits.finished("compress", TOPIC, 0, 6)
        assert tracker.committable() == {}, "5 is still in progress: nothing past it may commit"
        commits.finished("compress", TOPIC, 0, 5)
        assert tracker.committable() == {(TOPIC, 0): 8}

    asyncio.run(run())


def test_a_message_given_up_unfinished_is_taken_again_when_it_comes_again():
    import asyncio

    commits = safe_commits(5)

    async def run():
        for offset in (5, 6):
            assert await commits.skip_reason("compress", TOPIC, 0, offset) is None
            commits.took("compress", TOPIC, 0, offset)
        commits.finished("compress", TOPIC, 0, 6)
        commits.left_unfinished("compress", TOPIC, 0, 5)  # fenced
        assert await commits.skip_reason("compress", TOPIC, 0, 7) == "out_of_order"
        assert commits.app.consumer.sought == [{(TOPIC, 0): 5}]
        assert await commits.skip_reason("compress", TOPIC, 0, 5) is None

    asyncio.run(run())


def test_unfinished_counts_from_the_first_offset_a_reader_has_not_finished():
    import asyncio

    commits = safe_commits(5)
    commits.subscribe("other", TOPIC)
    commits.app.consumer.highwater = lambda tp: 9

    async def run():
        await commits.skip_reason("compress", TOPIC, 0, 5)  # learns the position: both readers at 5
        assert await commits.unfinished() == {TP: 4}
        for offset in (5, 6, 7):
            commits.finished("compress", TOPIC, 0, offset)
        assert await commits.unfinished() == {TP: 4}, "the other reader has finished nothing"
        commits.finished("other", TOPIC, 0, 5)
        assert await commits.unfinished() == {TP: 3}, "no commit needed to count what finished"

    asyncio.run(run())


def test_a_topic_waits_while_a_fetched_message_of_it_is_not_finished():
    import asyncio

    commits = safe_commits(5)
    consumer = commits.app.consumer
    assert not commits.waiting(frozenset({TOPIC})), "no position known yet: quiet"
    asyncio.run(commits.skip_reason("compress", TOPIC, 0, 5))  # learns the position
    consumer.highwater = lambda tp: 5
    assert not commits.waiting(frozenset({TOPIC})), "nothing fetched past the position"
    consumer.highwater = lambda tp: 7
    assert commits.waiting(frozenset({TOPIC}))
    assert not commits.waiting(frozenset({"m.other"})), "only the topics asked about"
    commits.finished("compress", TOPIC, 0, 5)
    assert commits.waiting(frozenset({TOPIC})), "one still to finish"
    commits.finished("compress", TOPIC, 0, 6)
    assert not commits.waiting(frozenset({TOPIC}))
