"""Ports wrapped with their metrics and spans: an LLM per stage (calls' latency, errors and retries;
a span per attempt with OpenTelemetry's GenAI attributes), the vector store (latency per operation
and collection; a span per operation) and the embedder (a span per batch). Processors see the plain
ports."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np

from memstream.llm_limits import Permit, ProviderLimiter, backoff_s, estimate_tokens
from memstream.metrics import Metrics
from memstream.ports import LLM, Embedder, LLMError, LlmRequest, LlmResult
from memstream.tracing import SpanKind, Tracing

MIN_ATTEMPT_S = 1.0  # a retry needs at least this long before the caller's deadline to be worth starting
MIN_RATE_LIMIT_PAUSE_S = 0.5  # a provider answering "Retry-After: 0" again and again is not hammered
STORE_OPERATIONS = frozenset(
    {"upsert", "search", "search_text", "scroll", "count", "set_payload", "retrieve", "delete"}
)


class MeteredLLM(LLM):
    """An LLM as one stage uses it: each attempt is timed, failures are counted by kind, and
    transient ones (timeouts, connection, server errors) are retried ``retries`` times.

    With a ``limiter`` (one per model, shared by the worker's stages) each attempt first waits for a
    concurrency slot and the provider's request/token budget. A 429 is waited out (its Retry-After,
    else back-off) and tried again without using up ``retries``, while the caller's deadline allows
    and this call's waits for 429s stay within ``rate_limit_wait_s``; then it is raised as before."""

    def __init__(
        self,
        llm: LLM,
        metrics: Metrics,
        stage: str,
        *,
        retries: int = 1,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        tracing: Tracing | None = None,
        limiter: ProviderLimiter | None = None,
        rate_limit_wait_s: float = 300.0,
        default_max_tokens: int = 1024,
    ):
        self._llm = llm
        self._tracing = tracing or Tracing(enabled=False)
        self._metrics = metrics
        self.stage = stage
        self.model = llm.model
        self._retries = retries
        self._backoff_s = backoff_s
        self._sleep = sleep
        self._clock = clock
        self._limiter = limiter
        self._rate_limit_wait_s = rate_limit_wait_s
        self._default_max_tokens = default_max_tokens  # the adapter's, which the provider charges when none is given
        metrics.init_llm(stage, self.model)

    def answer(self, request: LlmRequest) -> LlmResult:
        """``request.timeout_s`` bounds the whole call, retries, 429 pauses and waits for budget
        included: an attempt that could not finish in time is not started."""
        m = self._metrics
        deadline = None if request.timeout_s is None else self._clock() + request.timeout_s
        estimate = estimate_tokens(
            request.messages, request.max_tokens or self._default_max_tokens, request.json_schema
        )
        failures = 0  # transient failures other than 429s: these use up the retries
        rate_limits = 0
        waited_out = 0.0  # seconds this call spent waiting out 429s
        for attempt in itertools.count(1):
            permit = self._admit(estimate, deadline, waited_out)
            try:
                started = time.perf_counter()
                remaining = None if deadline is None else deadline - self._clock()
                try:
                    result = self._attempt(replace(request, timeout_s=remaining), attempt)
                except LLMError as exc:
                    m.llm_latency.labels(self.stage, self.model).observe(time.perf_counter() - started)
                    m.llm_errors.labels(self.stage, self.model, exc.kind).inc()
                    if exc.kind == "rate_limit":
                        rate_limits += 1
                        m.llm_rate_limited.labels(self.stage, self.model).inc()
                        pause = self._rate_limited(permit, exc, rate_limits)
                        if not self._may_wait_out(pause, waited_out, deadline):
                            raise
                        waited_out += pause
                        self._sleep(pause)
                        continue
                    backoff = self._backoff_s * 2**failures
                    if (
                        not exc.retryable
                        or failures == self._retries
                        or (deadline is not None and deadline - self._clock() - backoff < MIN_ATTEMPT_S)
                    ):
                        raise
                    failures += 1
                    m.llm_retries.labels(self.stage, self.model).inc()
                    self._release_failed(permit)  # its slot is not held through the back-off
                    self._sleep(backoff)
                    continue
                m.llm_latency.labels(self.stage, self.model).observe(time.perf_counter() - started)
                m.llm_tokens.labels(self.stage, result.model or self.model, "cached_prompt").inc(
                    result.cached_prompt_tokens
                )
                if self._limiter is not None and permit is not None:
                    # No usage reported (some local servers): the estimate stays charged.
                    self._limiter.release(permit, (result.prompt_tokens + result.completion_tokens) or None)
                return result
            finally:
                self._release_failed(permit)  # whatever else ended the attempt; a no-op once released
        raise AssertionError("unreachable")

    def _admit(self, estimate: int, deadline: float | None, waited_out: float) -> Permit | None:
        """A permit from the limiter (None without one). It may wait until a call sent then still has
        MIN_ATTEMPT_S before the caller's deadline; a caller without one waits at most what is left of
        ``rate_limit_wait_s`` (a provider's pause of an hour must not hold a stage's thread for it)."""
        limiter = self._limiter
        if limiter is None:
            return None
        if deadline is not None:
            budget = deadline - self._clock() - MIN_ATTEMPT_S
        else:
            budget = self._rate_limit_wait_s - waited_out
        started = self._clock()
        try:
            return limiter.acquire(estimate, limiter.now() + budget)
        finally:
            self._metrics.llm_budget_wait.labels(self.model).observe(max(0.0, self._clock() - started))

    def _release_failed(self, permit: Permit | None) -> None:
        if self._limiter is not None and permit is not None:
            self._limiter.release_failed(permit)

    def _rate_limited(self, permit: Permit | None, exc: LLMError, rate_limits: int) -> float:
        """Seconds until the next attempt may be sent: the limiter's pause (which every stage now
        keeps), else the provider's Retry-After, else an exponential back-off."""
        if self._limiter is not None and permit is not None:
            pause = self._limiter.release_rate_limited(permit, exc.retry_after_s)
        else:
            pause = exc.retry_after_s if exc.retry_after_s is not None else backoff_s(rate_limits)
        return max(MIN_RATE_LIMIT_PAUSE_S, pause)

    def _may_wait_out(self, pause: float, waited_out: float, deadline: float | None) -> bool:
        if waited_out + pause > self._rate_limit_wait_s:
            return False
        return deadline is None or deadline - self._clock() - pause >= MIN_ATTEMPT_S

    def _attempt(self, request: LlmRequest, attempt: int) -> LlmResult:
        """One call to the endpoint, in its span."""
        with self._tracing.span(
            f"chat {self.model}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": self.model,
                "memstream.stage": self.stage,
                "memstream.attempt": attempt,
            },
        ) as span:
            try:
                result = request.send(self._llm)
            except LLMError as exc:
                self._tracing.fail(span, f"{exc.kind}: {exc}"[:300])
                raise
            span.set_attribute("gen_ai.response.model", result.model)
            span.set_attribute("gen_ai.usage.input_tokens", result.prompt_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", result.completion_tokens)
            return result


class MeteredStore:
    """The vector store with each data operation timed by operation and collection (both bounded)."""

    def __init__(self, store: Any, metrics: Metrics, tracing: Tracing | None = None):
        self._store = store
        self._metrics = metrics
        self._tracing = tracing or Tracing(enabled=False)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in STORE_OPERATIONS or not callable(attr):
            return attr
        histogram = self._metrics.store_latency

        tracing = self._tracing

        def timed(collection: str, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            attributes = {"db.system.name": "qdrant", "db.operation.name": name, "db.collection.name": collection}
            try:
                with tracing.span(f"qdrant {name} {collection}", kind=SpanKind.CLIENT, attributes=attributes):
                    return attr(collection, *args, **kwargs)
            finally:
                histogram.labels(name, collection).observe(time.perf_counter() - started)

        return timed


class TracedEmbedder:
    """The embedder with a span per batch (``embed <model>``: how many texts); everything else as it is."""

    def __init__(self, embedder: Embedder, tracing: Tracing):
        self._embedder = embedder
        self._tracing = tracing

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        attributes = {"memstream.embedder": self._embedder.name, "memstream.texts": len(texts)}
        with self._tracing.span(f"embed {self._embedder.name}", attributes=attributes):
            return self._embedder.embed(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)
