"""ProviderLimiter: request and token budgets, concurrency slots, AIMD and 429 pauses (fake time),
and a smoke run with real threads."""

import threading
import time

import pytest

from memstream.llm_limits import BACKOFF_MAX_S, ProviderLimiter, backoff_s, estimate_tokens
from memstream.ports import LLMError


class FakeTime:
    """The limiter's clock, and a wait that lets the time it was asked for pass at once."""

    def __init__(self):
        self.now = 0.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    def wait(self, condition, timeout):
        assert timeout is not None, "a single-threaded test would wait forever"
        self.waits.append(timeout)
        self.now += timeout


def limiter(t: FakeTime, **kwargs) -> ProviderLimiter:
    return ProviderLimiter("m", clock=t.clock, wait=t.wait, **kwargs)


def test_the_estimate_counts_the_prompt_the_schema_and_the_whole_max_tokens():
    messages = [{"role": "system", "content": "x" * 40}, {"role": "user", "content": "y" * 41}]
    assert estimate_tokens(messages, 100) == 21 + 100  # 81 chars / 4, rounded up
    assert estimate_tokens(messages, 100, {"type": "object"}) > 121


def test_the_request_budget_is_a_minute_refilled_continuously():
    t = FakeTime()
    lim = limiter(t, rpm=60)
    for _ in range(60):
        lim.release(lim.acquire(10), 10)
    assert t.waits == []  # a full bucket: a minute's requests at once
    lim.acquire(10)
    assert t.waits == [pytest.approx(1.0)]  # then one a second


def test_the_token_budget_waits_for_the_estimate():
    t = FakeTime()
    lim = limiter(t, tpm=600)  # 10 tokens a second
    lim.acquire(500)
    lim.acquire(200)  # 100 left: 100 more to come
    assert t.waits == [pytest.approx(10.0)]


def test_the_token_charge_is_corrected_to_the_usage():
    t = FakeTime()
    lim = limiter(t, tpm=600)
    lim.release(lim.acquire(500), 100)  # 400 come back
    lim.acquire(500)
    assert t.waits == []
    lim.release(lim.acquire(0), 0)  # nothing left, and an exact estimate
    first = lim.acquire(50)
    assert t.waits == [pytest.approx(5.0)]
    lim.release(first, 150)  # used 100 more than charged: a debt
    lim.acquire(10)
    assert t.waits[-1] == pytest.approx(11.0)


def test_a_call_larger_than_the_whole_token_budget_goes_once_the_bucket_is_full():
    t = FakeTime()
    lim = limiter(t, tpm=600)
    lim.acquire(100)
    lim.acquire(1000)  # waits for a full bucket (10 s), not for 1000 tokens that never fit
    assert t.waits == [pytest.approx(10.0)]
    lim.acquire(60)  # then its debt: 400 below zero, plus 60
    assert t.waits[-1] == pytest.approx(46.0)


def test_no_limits_means_no_waits():
    t = FakeTime()
    lim = limiter(t)
    for _ in range(1000):
        lim.release(lim.acquire(100_000), 100_000)
    assert t.waits == [] and lim.in_flight == 0 and lim.waited_s == 0


def test_a_budget_that_frees_after_the_deadline_is_refused_at_once():
    t = FakeTime()
    lim = limiter(t, rpm=1)
    lim.acquire(10)
    with pytest.raises(LLMError) as caught:
        lim.acquire(10, deadline=10.0)
    assert caught.value.kind == "rate_limit" and caught.value.retryable
    assert caught.value.retry_after_s == pytest.approx(60.0)
    assert t.waits == [] and lim.queued == 0  # not waited in vain


def test_a_token_wait_with_calls_in_flight_waits_for_their_refund_until_the_deadline():
    t = FakeTime()
    lim = limiter(t, tpm=600)
    lim.acquire(600)  # in flight: its unused tokens could come back any moment
    with pytest.raises(LLMError, match="rate limit"):
        lim.acquire(300, deadline=5.0)
    assert sum(t.waits) == pytest.approx(5.0)


def test_a_slot_not_freed_by_the_deadline_is_refused():
    t = FakeTime()
    lim = limiter(t, max_concurrency=1)
    lim.acquire(1)
    with pytest.raises(LLMError, match="no slot"):
        lim.acquire(1, deadline=3.0)
    assert t.now == pytest.approx(3.0) and lim.in_flight == 1 and lim.waited_s == pytest.approx(3.0)


def test_a_429_halves_the_limit_once_per_generation_and_successes_raise_it_again():
    t = FakeTime()
    lim = limiter(t, max_concurrency=8)
    old = [lim.acquire(1) for _ in range(3)]
    lim.release_rate_limited(old[0])
    assert lim.limit == 4
    lim.release_rate_limited(old[1])  # sent before the decrease: says nothing new
    assert lim.limit == 4
    t.now = 100.0  # past the pauses
    lim.release_rate_limited(lim.acquire(1))
    assert lim.limit == 2
    lim.release_failed(old[2])
    t.now = 200.0
    lim.release_rate_limited(lim.acquire(1))
    t.now = 300.0
    lim.release_rate_limited(lim.acquire(1))
    assert lim.limit == 1  # never below one
    for expected in (2, 3, 4):
        for _ in range(lim.limit):
            lim.release(lim.acquire(1), 1)
        assert lim.limit == expected  # one more after as many successes as the limit
    for _ in range(100):
        lim.release(lim.acquire(1), 1)
    assert lim.limit == 8  # up to the maximum, not past it


def test_a_429_pauses_new_sends_for_its_retry_after():
    t = FakeTime()
    lim = limiter(t)
    assert lim.release_rate_limited(lim.acquire(1), retry_after_s=7.5) == pytest.approx(7.5)
    lim.acquire(1)
    assert t.waits == [pytest.approx(7.5)]


def test_429s_without_retry_after_back_off_exponentially_until_a_success():
    t = FakeTime()
    lim = limiter(t)
    assert lim.release_rate_limited(lim.acquire(1)) == pytest.approx(1.0)
    assert lim.release_rate_limited(lim.acquire(1)) == pytest.approx(2.0)
    assert lim.release_rate_limited(lim.acquire(1)) == pytest.approx(4.0)
    lim.release(lim.acquire(1), 1)
    assert lim.release_rate_limited(lim.acquire(1)) == pytest.approx(1.0)
    assert backoff_s(30) == BACKOFF_MAX_S


def test_a_permit_is_released_once():
    t = FakeTime()
    lim = limiter(t, max_concurrency=2)
    permit = lim.acquire(1)
    lim.release(permit, 1)
    lim.release_failed(permit)
    lim.release_rate_limited(permit)
    assert lim.in_flight == 0 and lim.limit == 2


def test_a_caller_waits_for_a_slot_until_one_is_released():
    lim = ProviderLimiter("m", max_concurrency=2)
    held = [lim.acquire(1), lim.acquire(1)]
    admitted = threading.Event()

    def third():
        lim.release(lim.acquire(1), 1)
        admitted.set()

    thread = threading.Thread(target=third)
    thread.start()
    deadline = time.monotonic() + 5
    while lim.queued == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert lim.queued == 1 and lim.in_flight == 2 and not admitted.is_set()
    lim.release(held[0], 1)
    assert admitted.wait(5)
    thread.join(5)
    assert lim.queued == 0 and lim.in_flight == 1 and lim.waited_s > 0


def test_threads_share_the_budgets_and_slots():
    """Real threads on a clock that runs 200 times faster: 60 calls under 30 requests a minute take
    at least the minute the last 30 need, and never more than 3 are in flight at once."""
    speed = 200.0
    lim = ProviderLimiter(
        "m",
        rpm=30,
        tpm=100_000,
        max_concurrency=3,
        clock=lambda: time.monotonic() * speed,
        wait=lambda condition, timeout: condition.wait(None if timeout is None else timeout / speed),
    )
    lock, in_flight, most = threading.Lock(), [0], [0]
    errors: list[BaseException] = []

    def worker(n: int):
        try:
            for i in range(6):
                permit = lim.acquire(100)
                with lock:
                    in_flight[0] += 1
                    most[0] = max(most[0], in_flight[0])
                time.sleep(0.0005)
                with lock:
                    in_flight[0] -= 1
                if (n + i) % 17 == 0:
                    lim.release_rate_limited(permit, retry_after_s=0.5)
                else:
                    lim.release(permit, 50)
        except BaseException as exc:  # surfaced below: a thread's failure must fail the test
            errors.append(exc)

    started = lim.now()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors and not any(thread.is_alive() for thread in threads)
    assert most[0] <= 3
    assert lim.now() - started >= 59.0  # 30 at once, then one every 2 s
    assert lim.in_flight == 0 and lim.queued == 0 and 1 <= lim.limit <= 3
