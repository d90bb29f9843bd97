"""Prometheus metrics of one worker process (own registry: no module-level state)."""

from __future__ import annotations

from typing import Any, Generic, Protocol, Sequence, TypeVar, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from memstream.tracing import Tracing

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_TOKEN_BUCKETS = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
_PIPELINE_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_FRESH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)  # the fast path: seconds, not minutes
LLM_ERROR_KINDS = ("timeout", "connection", "rate_limit", "server", "client", "empty")
LLM_TOKEN_KINDS = ("prompt", "completion", "cached_prompt")  # cached_prompt: the part of prompt a cache served


M = TypeVar("M", Counter, Gauge, Histogram)


class Declared(Generic[M]):
    """A metric declared once on :class:`Metrics` (its name, help, labels, buckets) and made for each
    instance in that instance's own registry."""

    def __init__(self, kind: type[M], name: str, documentation: str, labelnames: Sequence[str] = (), **options: Any):
        self.kind: type[M] = kind
        self.name, self.documentation = name, documentation
        self.labelnames, self.options = tuple(labelnames), options
        self.attr = ""

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Declared[M]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> M: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Declared[M] | M:
        if obj is None:
            return self
        return obj.__dict__[self.attr]  # made by Metrics.__init__, which shadows this descriptor

    def make(self, registry: CollectorRegistry) -> M:
        return self.kind(self.name, self.documentation, self.labelnames, registry=registry, **self.options)


declare = Declared


class LimiterReadings(Protocol):
    """What a provider limiter (memstream.llm_limits.ProviderLimiter) shows at scrape time."""

    @property
    def in_flight(self) -> int: ...

    @property
    def queued(self) -> int: ...

    @property
    def limit(self) -> int: ...


class StageMetrics:
    """Stage handling: messages in and out, in flight, skipped, dead letters, latency."""

    messages_in = declare(Counter, "memstream_stage_messages_in_total", "Messages consumed by a stage", ["stage"])
    messages_out = declare(Counter, "memstream_stage_messages_out_total", "Messages produced by a stage", ["stage"])
    stage_in_flight = declare(
        Gauge, "memstream_stage_in_flight", "Messages a stage is handling now (LLM-bound stages: many)", ["stage"]
    )
    stage_queued = declare(
        Gauge,
        "memstream_stage_queued",
        "Messages a stage took and holds until their conversation's earlier ones or a slot are done",
        ["stage"],
    )
    errors = declare(Counter, "memstream_stage_errors_total", "Processing failures (before retry)", ["stage"])
    store_outages = declare(
        Counter,
        "memstream_store_unavailable_total",
        "Attempts at a message that found the vector store unreachable (the message is held and tried again)",
        ["stage"],
    )
    skipped = declare(
        Counter,
        "memstream_stage_messages_skipped_total",
        "Messages not handled: redelivered after the stage finished them, handed over out of order "
        "(the partition is sought back), or already in the stage's table entry (in_state)",
        ["stage", "reason"],
    )
    dead_letters = declare(
        Counter, "memstream_dead_letters_total", "Messages sent to the dead-letter topic", ["stage", "reason"]
    )
    latency = declare(
        Histogram, "memstream_stage_latency_seconds", "Processing time per message", ["stage"], buckets=_LATENCY_BUCKETS
    )
    startup = declare(
        Gauge,
        "memstream_worker_startup_seconds",
        "Seconds from the worker process's start to the end of each start-up phase (streams/runtime/startup.py)",
        ["phase"],
    )


class KafkaMetrics:
    """Consumer lag and the watchdog."""

    consumer_lag = declare(
        Gauge,
        "memstream_consumer_lag",
        "Messages of a partition this worker owns that its group has not committed",
        ["group", "topic", "partition"],
    )
    rewinds = declare(
        Counter,
        "memstream_watchdog_rewinds_total",
        "Partitions sought back by the watchdog (lagging while every agent idled)",
    )


class WritePathMetrics:
    """The write path: freshness, compression, segmentation, the STM, extraction, indexing, forgets."""

    turn_to_memory = declare(
        Histogram,
        "memstream_turn_to_memory_seconds",
        "From a turn's arrival on the turns topic to its raw turn and memories in the store",
        buckets=_PIPELINE_BUCKETS,
    )
    turn_to_fresh = declare(
        Histogram,
        "memstream_turn_to_fresh_seconds",
        "From a turn's arrival on the turns topic to its raw turn being retrievable (written ahead of its flush)",
        buckets=_FRESH_BUCKETS,
    )
    fresh_turns = declare(
        Counter,
        "memstream_fresh_turns_total",
        "Fresh turns the index stage took: written (raw point stored early) or present (it had one already)",
        ["outcome"],
    )
    compression_enabled = declare(
        Gauge, "memstream_compression_enabled", "1 when a compressor model is loaded, 0 when turns pass through"
    )
    compress_tokens = declare(
        Counter, "memstream_compress_tokens_total", "Tokens before and after compression", ["direction"]
    )
    turn_tokens = declare(
        Histogram,
        "memstream_compress_turn_tokens",
        "Tokens of one turn before (in) and after (out) compression",
        ["direction"],
        buckets=_TOKEN_BUCKETS,
    )
    segment_boundaries = declare(
        Counter,
        "memstream_segment_boundaries_total",
        "Segments opened, by reason (first, session, hybrid, similarity, attention)",
        ["reason"],
    )
    stm_flushes = declare(Counter, "memstream_stm_flushes_total", "STM flushes by reason", ["reason"])
    turn_chunks = declare(
        Counter, "memstream_turn_chunks_total", "Chunks long turns were split into (over MAX_TURN_CHARS)"
    )
    forgotten = declare(
        Counter,
        "memstream_forgotten_total",
        "Items a forget removed, by where they were (store:<collection>, window, buffer, table, dropped)",
        ["where"],
    )
    stm_duplicates = declare(Counter, "memstream_stm_duplicate_turns_total", "Redelivered turns dropped by the STM")
    stm_buffer_turns = declare(
        Gauge, "memstream_stm_buffer_turns", "Turns waiting in the STM buffers of this worker's conversations"
    )
    stm_buffer_tokens = declare(
        Gauge, "memstream_stm_buffer_tokens", "Tokens waiting in the STM buffers of this worker's conversations"
    )
    stm_buffer_conversations = declare(
        Gauge, "memstream_stm_buffer_conversations", "Conversations with turns in their STM buffer on this worker"
    )
    state_evicted = declare(
        Counter,
        "memstream_state_evicted_total",
        "Per-conversation table entries deleted after STATE_EVICT_IDLE_S with nothing in flight, by stage",
        ["stage"],
    )
    state_entries = declare(
        Gauge, "memstream_state_entries", "Per-conversation table entries this worker holds, by stage", ["stage"]
    )
    llm_budget_fallbacks = declare(
        Counter,
        "memstream_llm_budget_fallbacks_total",
        "Flushes extracted and consolidation chunks decided without the LLM because their tenant was over its "
        "LLM budget (MEMSTREAM_LLM_TENANT_BUDGETS), by stage",
        ["stage"],
    )
    bulk_wait_seconds = declare(
        Histogram,
        "memstream_bulk_wait_seconds",
        "How long an imported turn (bulk.turns) waited for live work to let it into the pipeline",
        buckets=_LATENCY_BUCKETS,
    )
    background_yield_seconds = declare(
        Histogram,
        "memstream_background_yield_seconds",
        "How long a handling of background work (a history import's, in any stage) waited for a question "
        "of this worker to be answered first",
        buckets=_LATENCY_BUCKETS,
    )
    imported_turns = declare(
        Counter, "memstream_imported_turns_total", "Imported turns (bulk.turns) let into the pipeline"
    )
    extract_mode = declare(
        Counter, "memstream_extractions_total", "Extractions by mode (llm, extractive, extractive_fallback)", ["mode"]
    )
    embedded_texts = declare(
        Counter,
        "memstream_embedded_texts_total",
        "Texts embedded by the model (computed) or answered by the embedding cache (cached)",
        ["source"],
    )
    points_written = declare(
        Counter,
        "memstream_points_written_total",
        "Points upserted by collection (cards, scenes, triggers, turns, profiles)",
        ["collection"],
    )


class LlmMetrics:
    """LLM calls, tokens, errors, latency and the provider limiter, per stage and model."""

    llm_enabled = declare(Gauge, "memstream_llm_enabled", "1 when an LLM endpoint is configured")
    llm_calls = declare(Counter, "memstream_llm_calls_total", "LLM calls", ["stage", "model"])
    llm_tokens = declare(Counter, "memstream_llm_tokens_total", "LLM tokens", ["stage", "model", "kind"])
    llm_errors = declare(
        Counter,
        "memstream_llm_errors_total",
        "Failed LLM attempts by kind (timeout, connection, rate_limit, server, client, empty)",
        ["stage", "model", "error"],
    )
    llm_retries = declare(
        Counter, "memstream_llm_retries_total", "LLM attempts retried after a transient failure", ["stage", "model"]
    )
    llm_latency = declare(
        Histogram,
        "memstream_llm_latency_seconds",
        "Duration of one LLM attempt",
        ["stage", "model"],
        buckets=_LATENCY_BUCKETS,
    )
    llm_rate_limited = declare(
        Counter,
        "memstream_llm_rate_limited_total",
        "LLM attempts the provider refused with a 429 (waited out, not counted against the retries)",
        ["stage", "model"],
    )
    llm_in_flight = declare(
        Gauge, "memstream_llm_in_flight", "LLM calls sent and not answered yet, all stages", ["model"]
    )
    llm_queued = declare(
        Gauge,
        "memstream_llm_queued",
        "LLM calls waiting for a concurrency slot or for the provider's request/token budget",
        ["model"],
    )
    llm_concurrency_limit = declare(
        Gauge,
        "memstream_llm_concurrency_limit",
        "Calls allowed in flight now (halved on a 429, one more after a run of successes)",
        ["model"],
    )
    llm_budget_wait = declare(
        Histogram,
        "memstream_llm_budget_wait_seconds",
        "Time an LLM attempt waited for a slot and the provider's budget before it was sent",
        ["model"],
        buckets=_LATENCY_BUCKETS,
    )


class ConsolidationMetrics:
    """Sleep-time consolidation: runs, queues, decisions, lag."""

    consolidation_runs = declare(
        Counter,
        "memstream_consolidation_runs_total",
        "Conversation consolidations by trigger (idle, schedule, command)",
        ["reason"],
    )
    consolidation_queues = declare(
        Counter, "memstream_consolidation_queues_total", "Update queues built (one per new card)"
    )
    consolidation_candidates = declare(
        Histogram,
        "memstream_consolidation_queue_candidates",
        "Candidates in one update queue",
        buckets=(0, 1, 2, 3, 5, 10, 20),
    )
    consolidation_decisions = declare(
        Counter,
        "memstream_consolidation_decisions_total",
        "Pair decisions by action and by who decided (llm, rules)",
        ["action", "decided_by"],
    )
    consolidation_lag = declare(
        Histogram,
        "memstream_consolidation_lag_seconds",
        "From a card's write to its consolidation",
        buckets=(1, 10, 60, 300, 600, 1800, 3600, 21600, 86400),
    )
    consolidation_seconds = declare(
        Histogram,
        "memstream_consolidation_seconds",
        "Duration of one conversation's consolidation",
        buckets=_LATENCY_BUCKETS,
    )


class QueryMetrics:
    """Questions and reads: outcomes, latency per profile and step, evidence returned."""

    queries = declare(
        Counter,
        "memstream_queries_total",
        "Queries answered, by access profile and outcome (ok, error)",
        ["profile", "outcome"],
    )
    reads = declare(
        Counter,
        "memstream_reads_total",
        "Reads of what memory holds answered, by kind (conversations, timeline, lineage, export) and outcome",
        ["kind", "outcome"],
    )
    query_latency = declare(
        Histogram,
        "memstream_query_seconds",
        "Time to answer one query in the worker, by access profile",
        ["profile"],
        buckets=_LATENCY_BUCKETS,
    )
    query_step_latency = declare(
        Histogram,
        "memstream_query_step_seconds",
        "Time of one step of a query (plan, retrieval steps, answer)",
        ["step"],
        buckets=_LATENCY_BUCKETS,
    )
    query_evidence = declare(
        Histogram,
        "memstream_query_evidence_items",
        "Evidence items returned by one query, by access profile",
        ["profile"],
        buckets=(0, 1, 2, 5, 10, 20, 40, 80),
    )
    query_context_tokens = declare(
        Histogram,
        "memstream_query_context_tokens",
        "Tokens of the evidence returned by one query, by access profile",
        ["profile"],
        buckets=_TOKEN_BUCKETS,
    )


class StoreMetrics:
    """Vector store operations."""

    store_latency = declare(
        Histogram,
        "memstream_store_seconds",
        "Vector store operations by operation and collection",
        ["operation", "collection"],
        buckets=_LATENCY_BUCKETS,
    )
    rebuild_points = declare(
        Counter,
        "memstream_rebuild_points_total",
        "Points a rebuild applied to the new generation of the store, by op (upsert, delete)",
        ["op"],
    )
    rebuild_remaining = declare(
        Gauge, "memstream_rebuild_remaining_entries", "Record entries a rebuild has still to read before it is done"
    )
    rebuild_rate = declare(Gauge, "memstream_rebuild_entries_per_second", "Record entries a rebuild reads per second")


class Metrics(
    StageMetrics, KafkaMetrics, WritePathMetrics, LlmMetrics, ConsolidationMetrics, QueryMetrics, StoreMetrics
):
    """Every series is labelled by bounded values only (stage, topic, partition, model, reason,
    collection, profile, step): conversations and tenants are never labels. docs/metrics.md is the
    catalogue."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        for cls in type(self).__mro__:
            for attr, declared in vars(cls).items():
                if isinstance(declared, Declared):
                    setattr(self, attr, declared.make(self.registry))

    def count_llm(self, stage: str, model: str | None, calls: int, prompt_tokens: int, completion_tokens: int) -> None:
        m = model or "unknown"
        self.llm_calls.labels(stage, m).inc(calls)
        self.llm_tokens.labels(stage, m, "prompt").inc(prompt_tokens)
        self.llm_tokens.labels(stage, m, "completion").inc(completion_tokens)

    def init_stage(self, stage: str) -> None:
        """A stage's series exist from start (at 0), so rates and dashboards see it before its first message."""
        for metric in (self.messages_in, self.messages_out, self.errors, self.stage_in_flight, self.stage_queued):
            metric.labels(stage)
        self.latency.labels(stage)
        for reason in ("redelivered", "out_of_order", "fenced", "in_state"):
            self.skipped.labels(stage, reason)

    def init_llm(self, stage: str, model: str) -> None:
        self.llm_calls.labels(stage, model)
        for kind in LLM_TOKEN_KINDS:
            self.llm_tokens.labels(stage, model, kind)
        for error in LLM_ERROR_KINDS:
            self.llm_errors.labels(stage, model, error)
        self.llm_retries.labels(stage, model)
        self.llm_latency.labels(stage, model)
        self.llm_rate_limited.labels(stage, model)
        for gauge in (self.llm_in_flight, self.llm_queued, self.llm_concurrency_limit):
            gauge.labels(model)
        self.llm_budget_wait.labels(model)

    def watch_llm_limiter(self, model: str, limiter: LimiterReadings) -> None:
        """The limiter's gauges, read at each scrape (the limiter keeps its own counts, under its lock)."""
        self.llm_in_flight.labels(model).set_function(lambda: limiter.in_flight)
        self.llm_queued.labels(model).set_function(lambda: limiter.queued)
        self.llm_concurrency_limit.labels(model).set_function(lambda: limiter.limit)

    def count_embedded(self, computed: int, cached: int) -> None:
        self.embedded_texts.labels("computed").inc(computed)
        self.embedded_texts.labels("cached").inc(cached)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        if port:
            start_http_server(port, addr=host, registry=self.registry)


def trace_exemplar() -> dict[str, str] | None:
    """The current span's trace id as a histogram exemplar (OpenMetrics): a slow point on a latency
    panel opens its trace. None outside a span or with tracing off."""
    trace_id = Tracing.current_trace_id()
    return {"trace_id": trace_id} if trace_id else None
