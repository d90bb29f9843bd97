"""faust internals memstream relies on: an upgrade that moves one fails here, loudly."""

from importlib.metadata import version

import faust
import pytest
from mode.utils.queues import FlowControlQueue
from packaging.specifiers import SpecifierSet

from memstream.streams.runtime import faust_compat


def test_installed_faust_is_in_the_tested_range():
    assert version("faust-streaming") in SpecifierSet(faust_compat.TESTED_VERSIONS)


def test_every_internal_memstream_reaches_into_is_there():
    assert faust_compat.check() == []
    app = faust.App("compat-check", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    assert faust_compat.check_consumer(app.consumer) == []
    faust_compat.require(app)  # what a worker runs at start-up


def test_a_missing_internal_is_named():
    class Bare:
        pass

    assert faust_compat.check_consumer(Bare()) == [f"consumer.{n}" for n in faust_compat.CONSUMER_STATE]


def test_trim_bookkeeping_drops_acked_offsets_below_the_commit():
    class Consumer:
        _committed_offset: dict = {}
        _acked = {("t", 0): [3, 4, 5, 7]}
        _acked_index = {("t", 0): {3, 4, 5, 7}}
        _gap: dict = {}

    c = Consumer()
    faust_compat.trim_bookkeeping(c, {("t", 0): 5})
    assert c._committed_offset == {("t", 0): 5}
    assert c._acked[("t", 0)] == [5, 7] and c._acked_index[("t", 0)] == {5, 7}


class Consumer:
    """The two calls ``seek`` makes, with a rebalance that can land between them."""

    def __init__(self, assigned, revoke_on_seek=False):
        self.assigned = set(assigned)
        self.revoke_on_seek = revoke_on_seek
        self.sought = {}

    def assignment(self):
        return set(self.assigned)

    async def seek_wait(self, positions):
        from aiokafka.errors import IllegalStateError

        if self.revoke_on_seek:
            raise IllegalStateError("No current assignment for partition")
        self.sought.update(positions)


def test_seek_moves_only_assigned_partitions_and_survives_a_rebalance_in_between():
    import asyncio

    from aiokafka import TopicPartition

    from memstream.streams.runtime.faust_compat import seek

    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    consumer = Consumer([a])
    assert asyncio.run(seek(consumer, {a: 5, b: 7})) == [a]
    assert consumer.sought == {a: 5}
    assert asyncio.run(seek(Consumer([a], revoke_on_seek=True), {a: 5})) == []  # no crash
    assert asyncio.run(seek(Consumer([]), {a: 5})) == []


def test_a_commit_keeps_only_partitions_still_assigned_and_never_hands_faust_an_empty_one():
    import asyncio

    from memstream.streams.runtime.offsets import Partition

    class Consumer:
        def __init__(self, *assigned: Partition):
            self.assigned, self.committed = set(assigned), []

        def assignment(self):
            return self.assigned

        async def _commit(self, offsets):
            self.committed.append(dict(offsets))
            return True

    kept, gone = Partition("m.turns", 0), Partition("m.turns", 1)
    consumer = Consumer(kept)
    assert asyncio.run(faust_compat.commit_offsets(consumer, {kept: 5, gone: 7}))
    assert consumer.committed == [{kept: 5}]
    revoked = Consumer()  # a rebalance took every partition meanwhile
    assert not asyncio.run(faust_compat.commit_offsets(revoked, {gone: 7}))
    assert revoked.committed == [], "an empty commit raises in aiokafka and crashes the worker"


@pytest.mark.parametrize("records, partitions", [(4096, 4), (4096, 12), (128, 4), (16, 1), (16, 64), (100_000, 8)])
def test_fetches_never_fill_a_stream_buffer_past_faust_s_pressure_mark(records, partitions):
    """After a record lands past the mark, each of the topic's partitions is fetched at most once more
    (the fetch it is in): the buffer must have room for the fetch that crossed the mark and one per
    partition, or a delivery waits, and with it every topic of the worker."""
    conf = faust_compat.delivery_config(records, partitions)
    assert conf["stream_buffer_maxsize"] == records
    poll = conf["broker_max_poll_records"]
    high = int(records / FlowControlQueue.pressure_high_ratio)
    assert poll >= 1
    if records - high >= partitions + 1:  # at 16 records and 64 partitions even one record each cannot fit
        assert high + poll * (partitions + 1) <= records
    app = faust.App("buffer-check", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False, **conf)
    assert app.conf.broker_max_poll_records == poll and app.conf.stream_buffer_maxsize == records
    # No commit from inside the delivery loop: it would hold every topic for a round trip to the broker.
    assert app.conf.broker_commit_every >= 10**15


def test_a_consumer_built_as_faust_builds_it_fetches_again_within_a_few_ms(monkeypatch):
    """aiokafka's start() builds its Fetcher without ``prefetch_backoff``; after fetch_promptly a fetch
    waits at most 5 ms on records faust has not taken yet, not 100."""
    import asyncio

    from aiokafka.client import AIOKafkaClient
    from aiokafka.consumer.fetcher import Fetcher
    from aiokafka.consumer.subscription_state import SubscriptionState

    defaults = Fetcher.__init__.__kwdefaults__
    monkeypatch.setitem(defaults, "prefetch_backoff", 0.1)  # aiokafka's own default; restored after the test

    async def backoff() -> float:
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1")
        fetcher = Fetcher(client, SubscriptionState())
        try:
            return fetcher._prefetch_backoff
        finally:
            await fetcher.close()
            await client.close()

    assert asyncio.run(backoff()) == 0.1
    faust_compat.fetch_promptly()
    assert asyncio.run(backoff()) == faust_compat.PREFETCH_BACKOFF_S == 0.005
