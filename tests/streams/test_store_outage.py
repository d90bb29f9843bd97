"""A vector-store outage holds a message and tries it again; only other failures dead-letter it
(a message's handling without Kafka: a fake event and output, the real retry loop)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.ports import StoreUnavailable
from memstream.streams.runtime import handling as handling_module
from memstream.streams.runtime.handling import Handling
from memstream.streams.stages.api import StageResult
from memstream.tracing import Tracing


def bare_handling(letters: list[str]) -> Handling:
    async def dead_letter(stage, event, raw, reason, exc):
        letters.append(reason)

    async def produce(stage, outputs):
        return None

    output = SimpleNamespace(dead_letter=dead_letter, produce=produce)
    return Handling(Settings(processing_retries=2), Tracing(enabled=False), Metrics(), output)  # type: ignore[arg-type]


EVENT = SimpleNamespace(
    value=b"{}",
    message=SimpleNamespace(topic="memory.cards", partition=1, offset=7, timestamp=1.0, key=b"acme/c1", headers=[]),
)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    async def instant(_seconds: float) -> None:
        return None

    monkeypatch.setattr(handling_module.asyncio, "sleep", instant)


def failing(times: int, error: Exception, calls: list[int]):
    async def handler(record):
        calls.append(1)
        if len(calls) <= times:
            raise error
        return StageResult()

    return handler


def test_an_outage_longer_than_every_retry_is_waited_out_and_never_dead_lettered():
    letters: list[str] = []
    calls: list[int] = []
    handling = bare_handling(letters)
    asyncio.run(handling.run("index", EVENT, failing(25, StoreUnavailable("no Qdrant node answers"), calls)))
    assert len(calls) == 26 and letters == []  # 25 outages (more than processing_retries), then done
    assert handling.metrics.store_outages.labels("index")._value.get() == 25
    assert handling.metrics.errors.labels("index")._value.get() == 0


def test_any_other_failure_is_retried_then_dead_lettered_with_its_reason():
    letters: list[str] = []
    calls: list[int] = []
    handling = bare_handling(letters)
    asyncio.run(handling.run("index", EVENT, failing(99, ValueError("bad card"), calls)))
    assert len(calls) == 3 and letters == ["processing failed: bad card"]  # 1 + processing_retries


def test_a_starting_worker_waits_for_the_store_then_gives_up_after_its_timeout(monkeypatch):
    from memstream.streams import services

    monkeypatch.setattr(services.time, "sleep", lambda _s: None)
    answers = iter([StoreUnavailable("down"), StoreUnavailable("down"), "ready"])

    def call() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert services.wait_for_store(call, timeout_s=60) == "ready"
    with pytest.raises(StoreUnavailable):
        services.wait_for_store(lambda: (_ for _ in ()).throw(StoreUnavailable("down")), timeout_s=0)
