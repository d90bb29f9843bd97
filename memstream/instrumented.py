"""Ports wrapped with their metrics and spans: an LLM per stage (calls' latency, errors and retries;
a span per attempt with OpenTelemetry's GenAI attributes), the vector store (latency per operation
and collection; a span per operation) and the embedder (a span per batch). Processors see the plain
ports."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from memstream.metrics import Metrics
from memstream.ports import LLM, Embedder, LLMError, LlmResult
from memstream.tracing import SpanKind, Tracing

MIN_ATTEMPT_S = 1.0  # a retry needs at least this long before the caller's deadline to be worth starting
STORE_OPERATIONS = frozenset(
    {"upsert", "search", "search_text", "scroll", "count", "set_payload", "retrieve", "delete"}
)


class MeteredLLM:
    """An LLM as one stage uses it: each attempt is timed, failures are counted by kind, and
    transient ones (timeouts, connection, rate limits, server errors) are retried ``retries`` times."""

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
        metrics.init_llm(stage, self.model)

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        json_schema: Mapping[str, Any] | None = None,
        schema_name: str = "output",
        max_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> LlmResult:
        """``timeout_s`` bounds the whole call, retries and their back-off included: a retry that
        could not finish in time is not started."""
        m = self._metrics
        deadline = None if timeout_s is None else self._clock() + timeout_s
        for attempt in range(self._retries + 1):
            started = time.perf_counter()
            remaining = None if deadline is None else deadline - self._clock()
            try:
                with self._tracing.span(
                    f"chat {self.model}",
                    kind=SpanKind.CLIENT,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": self.model,
                        "memstream.stage": self.stage,
                        "memstream.attempt": attempt + 1,
                    },
                ) as span:
                    try:
                        result = self._llm.complete(
                            messages,
                            json_schema=json_schema,
                            schema_name=schema_name,
                            max_tokens=max_tokens,
                            timeout_s=remaining,
                        )
                    except LLMError as exc:
                        self._tracing.fail(span, f"{exc.kind}: {exc}"[:300])
                        raise
                    span.set_attribute("gen_ai.response.model", result.model)
                    span.set_attribute("gen_ai.usage.input_tokens", result.prompt_tokens)
                    span.set_attribute("gen_ai.usage.output_tokens", result.completion_tokens)
            except LLMError as exc:
                m.llm_latency.labels(self.stage, self.model).observe(time.perf_counter() - started)
                m.llm_errors.labels(self.stage, self.model, exc.kind).inc()
                backoff = self._backoff_s * 2**attempt
                if (
                    not exc.retryable
                    or attempt == self._retries
                    or (deadline is not None and deadline - self._clock() - backoff < MIN_ATTEMPT_S)
                ):
                    raise
                m.llm_retries.labels(self.stage, self.model).inc()
                self._sleep(backoff)
            else:
                m.llm_latency.labels(self.stage, self.model).observe(time.perf_counter() - started)
                return result
        raise AssertionError("unreachable")


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
