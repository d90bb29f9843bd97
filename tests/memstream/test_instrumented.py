"""MeteredLLM retries transient failures and counts every attempt; MeteredStore times store calls."""

import pytest

from memstream.instrumented import MeteredLLM, MeteredStore
from memstream.llm_limits import ProviderLimiter
from memstream.metrics import Metrics
from memstream.ports import LLMError, LlmResult
from tests.fakes import Clock

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


def rate_limited(retry_after_s=None):
    return LLMError("429 Too Many Requests", "rate_limit", retry_after_s=retry_after_s)


class FakeTime(Clock):
    """One clock for MeteredLLM and its limiter; sleeping and waiting let the time pass at once."""

    def __init__(self):
        super().__init__()
        self.sleeps: list[float] = []

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def wait(self, condition, timeout):
        assert timeout is not None
        self.now += timeout


def test_a_429_is_waited_out_without_using_up_the_retries():
    t, m = FakeTime(), Metrics()
    llm = Scripted(rate_limited(2.0), rate_limited(3.0), OK)
    result = MeteredLLM(llm, m, "extract", retries=0, sleep=t.sleep, clock=t).complete([])
    assert result is OK and llm.calls == 3 and t.sleeps == [2.0, 3.0]
    assert value(m, "memstream_llm_rate_limited_total", stage="extract", model="m") == 2
    assert value(m, "memstream_llm_errors_total", stage="extract", error="rate_limit") == 2
    assert value(m, "memstream_llm_retries_total", stage="extract") == 0


def test_429s_without_retry_after_back_off_and_the_retries_stay_for_other_failures():
    t, m = FakeTime(), Metrics()
    llm = Scripted(rate_limited(), LLMError("503", "server"), rate_limited(), OK)
    MeteredLLM(llm, m, "plan", retries=1, backoff_s=0.5, sleep=t.sleep, clock=t).complete([])
    assert t.sleeps == [1.0, 0.5, 2.0] and llm.calls == 4
    assert value(m, "memstream_llm_retries_total", stage="plan") == 1


def test_429s_are_waited_out_for_at_most_rate_limit_wait_s():
    t = FakeTime()
    llm = Scripted(*[rate_limited(3.0)] * 5)
    metered = MeteredLLM(llm, Metrics(), "extract", sleep=t.sleep, clock=t, rate_limit_wait_s=7.0)
    with pytest.raises(LLMError) as caught:
        metered.complete([])
    assert caught.value.kind == "rate_limit" and llm.calls == 3 and t.sleeps == [3.0, 3.0]


def test_a_retry_after_past_the_callers_deadline_is_not_waited_for():
    t = FakeTime()
    llm = Scripted(rate_limited(4.5), OK)
    with pytest.raises(LLMError):
        MeteredLLM(llm, Metrics(), "answer", sleep=t.sleep, clock=t).complete([], timeout_s=5.0)
    assert llm.calls == 1 and t.sleeps == []  # 0.5 s would be left: too little for an answer


def test_the_limiter_is_told_of_each_attempt():
    t, m = FakeTime(), Metrics()
    limiter = ProviderLimiter("m", tpm=6000, max_concurrency=4, clock=t, wait=t.wait)
    m.watch_llm_limiter("m", limiter)
    cached = LlmResult(content="ok", prompt_tokens=300, completion_tokens=20, model="m", cached_prompt_tokens=256)
    llm = Scripted(rate_limited(2.0), cached)
    metered = MeteredLLM(llm, m, "extract", sleep=t.sleep, clock=t, limiter=limiter, default_max_tokens=1000)
    assert metered.complete([{"role": "user", "content": "x" * 400}]) is cached
    assert limiter.limit == 2 and limiter.in_flight == 0  # halved by the 429; both permits released
    # Charged 1100 twice (100 prompt + 1000 max_tokens), refilled over the 2 s pause (200), the
    # second charge corrected to the 320 used.
    assert limiter._tokens.level == pytest.approx(6000 - 1100 + 200 - 320)
    assert value(m, "memstream_llm_tokens_total", stage="extract", model="m", kind="cached_prompt") == 256
    assert value(m, "memstream_llm_budget_wait_seconds_count", model="m") == 2
    assert value(m, "memstream_llm_concurrency_limit", model="m") == 2
    assert value(m, "memstream_llm_in_flight", model="m") == 0


def test_a_call_whose_budget_frees_after_its_deadline_is_not_sent():
    t, m = FakeTime(), Metrics()
    limiter = ProviderLimiter("m", rpm=1, clock=t, wait=t.wait)
    llm = Scripted(OK, OK)
    metered = MeteredLLM(llm, m, "answer", sleep=t.sleep, clock=t, limiter=limiter)
    metered.complete([], timeout_s=5.0)
    with pytest.raises(LLMError) as caught:
        metered.complete([], timeout_s=5.0)
    assert caught.value.kind == "rate_limit" and llm.calls == 1 and t.now == 0
    assert value(m, "memstream_llm_errors_total", stage="answer") == 0  # never sent: not a failed attempt


def test_a_slot_is_given_back_whatever_ends_the_attempt():
    t = FakeTime()
    limiter = ProviderLimiter("m", max_concurrency=1, clock=t, wait=t.wait)
    llm = Scripted(LLMError("503", "server"), RuntimeError("a bug"), LLMError("bad", "client"))
    metered = MeteredLLM(llm, Metrics(), "plan", retries=1, sleep=t.sleep, clock=t, limiter=limiter)
    with pytest.raises(RuntimeError, match="a bug"):
        metered.complete([])
    assert limiter.in_flight == 0
    with pytest.raises(LLMError):
        metered.complete([])
    assert limiter.in_flight == 0 and limiter.limit == 1


def test_a_retry_after_of_zero_still_spaces_the_attempts():
    t = FakeTime()
    llm = Scripted(*[rate_limited(0.0)] * 30)
    with pytest.raises(LLMError):
        MeteredLLM(llm, Metrics(), "extract", sleep=t.sleep, clock=t, rate_limit_wait_s=5.0).complete([])
    assert llm.calls == 11 and t.sleeps == [0.5] * 10  # bounded by rate_limit_wait_s, not a busy loop
