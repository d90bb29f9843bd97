"""MeteredLLM retries transient failures and counts every attempt; MeteredStore times store calls."""

import pytest

from memstream.instrumented import MeteredLLM, MeteredStore
from memstream.metrics import Metrics
from memstream.ports import LLMError, LlmResult

OK = LlmResult(content="fine", prompt_tokens=10, completion_tokens=2, model="m")


class Scripted:
    model = "m"

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.calls = 0

    def complete(self, messages, **kwargs):
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def value(m: Metrics, name: str, **labels) -> float:
    return sum(
        s.value
        for f in m.registry.collect()
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_a_transient_failure_is_retried_and_counted():
    m, llm = Metrics(), Scripted(LLMError("read timeout", "timeout"), OK)
    result = MeteredLLM(llm, m, "extract", retries=1, sleep=lambda s: None).complete([{"role": "user", "content": "x"}])
    assert result is OK and llm.calls == 2
    assert value(m, "memstream_llm_errors_total", stage="extract", error="timeout") == 1
    assert value(m, "memstream_llm_retries_total", stage="extract") == 1
    assert value(m, "memstream_llm_latency_seconds_count", stage="extract", model="m") == 2


def test_a_client_error_is_not_retried():
    m, llm = Metrics(), Scripted(LLMError("bad request", "client"), OK)
    with pytest.raises(LLMError):
        MeteredLLM(llm, m, "plan", retries=3, sleep=lambda s: None).complete([])
    assert llm.calls == 1 and value(m, "memstream_llm_retries_total") == 0
    assert value(m, "memstream_llm_errors_total", stage="plan", error="client") == 1


def test_retries_give_up_after_the_limit():
    m, llm = Metrics(), Scripted(*[LLMError("503", "server")] * 3)
    with pytest.raises(LLMError):
        MeteredLLM(llm, m, "answer", retries=2, sleep=lambda s: None).complete([])
    assert llm.calls == 3 and value(m, "memstream_llm_retries_total", stage="answer") == 2


def test_store_calls_are_timed_by_operation_and_collection():
    class Store:
        location = "here"

        def search(self, collection, tenant_id, vector, limit=10):
            return [collection, tenant_id, limit]

    m = Metrics()
    store = MeteredStore(Store(), m)
    assert store.search("cards", "acme", [0.1], limit=3) == ["cards", "acme", 3]
    assert store.location == "here"
    assert value(m, "memstream_store_seconds_count", operation="search", collection="cards") == 1


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_retries_stay_within_the_callers_timeout():
    clock, seen = Clock(), []

    class TimesOut:
        model = "m"

        def complete(self, messages, *, timeout_s=None, **kwargs):
            seen.append(timeout_s)
            clock.now += 3.0  # each attempt runs 3 s, then times out
            raise LLMError("timed out", "timeout")

    def sleep(s):
        clock.now += s

    m = Metrics()
    with pytest.raises(LLMError):
        MeteredLLM(TimesOut(), m, "answer", retries=5, sleep=sleep, clock=clock).complete([], timeout_s=8.0)
    # 8 s: attempt 1 gets 8, attempt 2 what is left after 3 s and a 0.5 s back-off; then 1.5 s is
    # left, too little for a third after a 1 s back-off.
    assert seen == [8.0, 4.5]
    assert value(m, "memstream_llm_retries_total", stage="answer") == 1
