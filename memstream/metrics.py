"""Prometheus metrics of one worker process (own registry: no module-level state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.messages_in = Counter("memstream_stage_messages_in_total", "Messages consumed by a stage", ["stage"], registry=r)
        self.messages_out = Counter("memstream_stage_messages_out_total", "Messages produced by a stage", ["stage"], registry=r)
        self.errors = Counter("memstream_stage_errors_total", "Processing failures (before retry)", ["stage"], registry=r)
        self.dead_letters = Counter("memstream_dead_letters_total", "Messages sent to the dead-letter topic", ["stage", "reason"], registry=r)
        self.latency = Histogram("memstream_stage_latency_seconds", "Processing time per message", ["stage"], buckets=_LATENCY_BUCKETS, registry=r)
        self.llm_calls = Counter("memstream_llm_calls_total", "LLM calls", ["stage", "model"], registry=r)
        self.llm_tokens = Counter("memstream_llm_tokens_total", "LLM tokens", ["stage", "model", "kind"], registry=r)
        self.compression_enabled = Gauge("memstream_compression_enabled", "1 when a compressor model is loaded, 0 when turns pass through", registry=r)
        self.compress_tokens = Counter("memstream_compress_tokens_total", "Tokens before and after compression", ["direction"], registry=r)
        self.stm_flushes = Counter("memstream_stm_flushes_total", "STM flushes by reason", ["reason"], registry=r)
        self.stm_duplicates = Counter("memstream_stm_duplicate_turns_total", "Redelivered turns dropped by the STM", registry=r)
        self.extract_mode = Counter("memstream_extractions_total", "Extractions by mode (llm, extractive, extractive_fallback)", ["mode"], registry=r)
        self.points_written = Counter("memstream_points_written_total", "Points upserted by collection", ["collection"], registry=r)
        self.llm_enabled = Gauge("memstream_llm_enabled", "1 when an LLM endpoint is configured", registry=r)

    def count_llm(self, stage: str, model: str | None, calls: int, prompt_tokens: int, completion_tokens: int) -> None:
        m = model or "unknown"
        self.llm_calls.labels(stage, m).inc(calls)
        self.llm_tokens.labels(stage, m, "prompt").inc(prompt_tokens)
        self.llm_tokens.labels(stage, m, "completion").inc(completion_tokens)

    def serve(self, port: int) -> None:
        if port:
            start_http_server(port, addr="127.0.0.1", registry=self.registry)
