"""A hosted LLM provider's limits, obeyed before a call is sent rather than learnt from its 429s.

One :class:`ProviderLimiter` per model, shared by every stage of a worker (the provider counts the
worker's calls together): requests and tokens per minute as token buckets, and a concurrency limit
that adapts to the provider (AIMD: halved on a 429, one more after a run of successes). Pure logic:
the clock and the wait are injected, so the unit tests need no real time."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from memstream.ports import LLMError

CHARS_PER_TOKEN = 4  # a rough estimate; release() corrects the token budget with the usage reported
BACKOFF_BASE_S = 1.0  # pause after a 429 that names no Retry-After, doubled for each 429 in a row
BACKOFF_MAX_S = 60.0

Wait = Callable[[threading.Condition, "float | None"], object]


def estimate_tokens(
    messages: Sequence[Mapping[str, str]], max_tokens: int, json_schema: Mapping[str, Any] | None = None
) -> int:
    """Tokens a call may cost as the provider counts it when the request arrives: its prompt (the
    messages' text and the output schema, which is sent too) and the whole ``max_tokens``."""
    chars = sum(len(m.get("content", "")) for m in messages)
    if json_schema is not None:
        chars += len(json.dumps(json_schema))
    return math.ceil(chars / CHARS_PER_TOKEN) + max_tokens


def backoff_s(rate_limits_in_a_row: int) -> float:
    """The pause after the n-th 429 in a row (n >= 1) when the provider names none."""
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, rate_limits_in_a_row - 1))


class TokenBucket:
    """``per_minute`` units, refilled continuously; it starts full. 0 = unlimited. Its level may go
    below zero: a call larger than the estimate (or than the whole bucket) leaves a debt that later
    calls wait out."""

    def __init__(self, per_minute: float, now: float):
        self.capacity = per_minute
        self.level = per_minute
        self._rate_s = per_minute / 60.0
        self._at = now

    @property
    def unlimited(self) -> bool:
        return self.capacity <= 0

    def wait_s(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` can be taken; an amount over the capacity needs a full bucket
        only, or it would never go."""
        if self.unlimited:
            return 0.0
        self._refill(now)
        missing = min(amount, self.capacity) - self.level
        return max(0.0, missing / self._rate_s)

    def take(self, amount: float, now: float) -> None:
        if not self.unlimited:
            self._refill(now)
            self.level -= amount

    def give_back(self, amount: float, now: float) -> None:
        """Return ``amount`` (negative: take more), never above the capacity."""
        if not self.unlimited:
            self._refill(now)
            self.level = min(self.capacity, self.level + amount)

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self._at) * self._rate_s)
        self._at = now


@dataclass(slots=True)
class Permit:
    """One call's admission: the tokens charged for it, and the concurrency generation it was sent
    in (a 429 to a call sent before the last decrease does not halve the limit again)."""

    estimated_tokens: int
    generation: int
    released: bool = False


def _wait_on(condition: threading.Condition, timeout: float | None) -> object:
    return condition.wait(timeout)


class ProviderLimiter:
    """Admission to one model's endpoint for every thread of a worker.

    ``acquire`` blocks until a concurrency slot is free, no 429 pause is running and the RPM and TPM
    buckets hold the call; callers are admitted in arrival order (a large extraction is not starved
    by a stream of small planner calls). Each permit is released exactly once: ``release`` after an
    answer (corrects the token charge to the usage), ``release_rate_limited`` after a 429,
    ``release_failed`` after any other failure (the estimate stays charged: the provider may have
    counted it)."""

    def __init__(
        self,
        model: str,
        *,
        rpm: float = 0.0,
        tpm: float = 0.0,
        max_concurrency: int = 64,
        clock: Callable[[], float] = time.monotonic,
        wait: Wait = _wait_on,
    ):
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.model = model
        self.max_concurrency = max_concurrency
        self._clock = clock
        self._wait = wait  # waits on the condition (its lock held) up to a timeout; tests advance a fake clock
        self._cond = threading.Condition()
        now = clock()
        self._requests = TokenBucket(rpm, now)
        self._tokens = TokenBucket(tpm, now)
        self._limit = max_concurrency
        self._generation = 0
        self._successes = 0  # since the limit last changed
        self._rate_limits_in_a_row = 0
        self._paused_until = now
        self._in_flight = 0
        self._queue: deque[object] = deque()
        self._waited_s = 0.0

    # --- readings (for metrics) ---------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        """Callers waiting for a slot or budget."""
        return len(self._queue)

    @property
    def limit(self) -> int:
        """The concurrency limit now (AIMD), between 1 and max_concurrency."""
        return self._limit

    @property
    def waited_s(self) -> float:
        """Seconds callers waited in acquire, all of them together."""
        return self._waited_s

    def now(self) -> float:
        """The limiter's clock, which ``acquire``'s deadline is on."""
        return self._clock()

    # --- admission ----------------------------------------------------------------------------

    def acquire(self, estimated_tokens: int, deadline: float | None = None) -> Permit:
        """A permit to send one call charged ``estimated_tokens``. Raises LLMError (kind
        "rate_limit") when the slot or the budget cannot be had by ``deadline`` (on this limiter's
        clock): a call that would be sent late is not sent."""
        ticket = object()
        with self._cond:
            started = self._clock()
            self._queue.append(ticket)
            try:
                while True:
                    now = self._clock()
                    if self._queue[0] is ticket and self._in_flight < self._limit:
                        fixed, tokens = self._budget_wait_s(estimated_tokens, now)
                        wait = max(fixed, tokens)
                        if wait <= 0:
                            return self._admit(estimated_tokens, now)
                        # Only the calls in flight can shorten the wait (their unused max_tokens
                        # come back): without any, or past a pause or RPM wait, waiting is in vain.
                        if deadline is not None and now + (fixed if self._in_flight else wait) > deadline:
                            raise self._refusal(f"its budget frees in {wait:.1f}s", wait)
                        timeout: float | None = wait
                    else:
                        # Behind another caller or without a slot: woken by a release or a departure.
                        timeout = None
                    if deadline is not None:
                        if now >= deadline:
                            raise self._refusal("no slot or budget came free in time", None)
                        timeout = deadline - now if timeout is None else min(timeout, deadline - now)
                    self._wait(self._cond, timeout)
            finally:
                self._queue.remove(ticket)
                self._waited_s += self._clock() - started
                self._cond.notify_all()  # the next in line may go now (or re-check its deadline)

    def _budget_wait_s(self, estimated_tokens: int, now: float) -> tuple[float, float]:
        """Seconds to wait for what only time frees (a 429 pause, the request budget), and for the
        token budget (which a call that used less than its estimate also frees)."""
        fixed = max(self._paused_until - now, self._requests.wait_s(1, now))
        return fixed, self._tokens.wait_s(estimated_tokens, now)

    def _admit(self, estimated_tokens: int, now: float) -> Permit:
        self._requests.take(1, now)
        self._tokens.take(estimated_tokens, now)
        self._in_flight += 1
        return Permit(estimated_tokens, self._generation)

    def _refusal(self, why: str, retry_after_s: float | None) -> LLMError:
        return LLMError(
            f"rate limit: a call to {self.model} was not sent, {why} (after the caller's deadline)",
            "rate_limit",
            retry_after_s=retry_after_s,
        )

    # --- release ------------------------------------------------------------------------------

    def release(self, permit: Permit, actual_tokens: int | None = None) -> None:
        """The call answered: its slot frees, the token charge becomes ``actual_tokens`` (prompt +
        completion as reported; None keeps the estimate) and a run of successes widens the limit."""
        with self._cond:
            if not self._free(permit):
                return
            if actual_tokens is not None:
                self._tokens.give_back(permit.estimated_tokens - actual_tokens, self._clock())
            self._rate_limits_in_a_row = 0
            self._successes += 1
            if self._successes >= self._limit and self._limit < self.max_concurrency:
                self._limit += 1
                self._successes = 0

    def release_failed(self, permit: Permit) -> None:
        """The call failed otherwise (timeout, connection, server, client): its slot frees only."""
        with self._cond:
            self._free(permit)

    def release_rate_limited(self, permit: Permit, retry_after_s: float | None = None) -> float:
        """The provider answered 429: the limit halves (once per generation: the calls already in
        flight were sent under the old limit and their 429s say nothing new) and new sends pause for
        ``retry_after_s``, or an exponential back-off when the provider named none. Returns the
        seconds until sends resume."""
        with self._cond:
            now = self._clock()
            if not self._free(permit):
                return max(0.0, self._paused_until - now)
            if permit.generation == self._generation:
                self._limit = max(1, self._limit // 2)
                self._generation += 1
                self._successes = 0
            self._rate_limits_in_a_row += 1
            pause = retry_after_s if retry_after_s is not None else backoff_s(self._rate_limits_in_a_row)
            self._paused_until = max(self._paused_until, now + max(0.0, pause))
            return self._paused_until - now

    def _free(self, permit: Permit) -> bool:
        if permit.released:
            return False
        permit.released = True
        self._in_flight -= 1
        self._cond.notify_all()
        return True
