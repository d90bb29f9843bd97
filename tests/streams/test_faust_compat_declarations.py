"""faust_compat.retry_topic_declarations: a declaration that drew a broker that is down is tried
again on fresh metadata; an error that means a real failure is not (the 3-broker case end to end:
tests/integration/test_broker_down_start.py)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import NodeNotReadyError, TopicAuthorizationFailedError

from memstream.streams.runtime import faust_compat


class Client:
    def __init__(self) -> None:
        self.refreshed = 0

    async def force_metadata_update(self) -> bool:
        self.refreshed += 1
        return True


class Transport:
    """faust's ``_create_topic`` failing with ``errors`` first, one per call."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.calls = 0

    async def _create_topic(self, owner, client, topic, *args, **kwargs) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


class App:
    def __init__(self, transport: Transport) -> None:
        self.transport = self.producer_transport = transport


class Owner:
    should_stop = False


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faust_compat, "DECLARE_RETRY_S", 0.0)


def declare(transport: Transport, client: Client, deadline_s: float = 60.0) -> None:
    faust_compat.retry_topic_declarations(App(transport), deadline_s)
    faust_compat.retry_topic_declarations(App(transport), deadline_s)  # installed once
    asyncio.run(transport._create_topic(Owner(), client, "t-__assignor-__leader", 4, 3))


def test_a_dead_node_drawn_is_tried_again_on_fresh_metadata():
    transport, client = Transport([NodeNotReadyError("node 2"), NodeNotReadyError("node 2")]), Client()
    declare(transport, client)
    assert transport.calls == 3 and client.refreshed == 2


def test_a_real_failure_is_not_retried():
    transport, client = Transport([TopicAuthorizationFailedError("t")]), Client()
    with pytest.raises(TopicAuthorizationFailedError):
        declare(transport, client)
    assert transport.calls == 1 and client.refreshed == 0


def test_a_dead_node_past_the_deadline_fails_the_start():
    transport = Transport([NodeNotReadyError("node 2")] * 3)
    with pytest.raises(NodeNotReadyError):
        declare(transport, Client(), deadline_s=0.0)
    assert transport.calls == 1
