"""Prometheus metrics of one worker process (own registry: no module-level state)."""

from __future__ import annotations

from collections import OrderedDict

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_TOKEN_BUCKETS = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
# Per-conversation series are kept for the most recently active conversations only (bounded labels).
CONVERSATION_SERIES = 200


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
        self.turn_tokens = Histogram("memstream_compress_turn_tokens", "Tokens of one turn before (in) and after (out) compression", ["direction"], buckets=_TOKEN_BUCKETS, registry=r)
        self.segment_boundaries = Counter("memstream_segment_boundaries_total", "Segments opened, by reason (first, session, hybrid, similarity, attention)", ["reason"], registry=r)
        self.conversation_llm_calls = Counter("memstream_conversation_llm_calls_total", f"LLM calls per conversation and stage (the {CONVERSATION_SERIES} most recently active conversations)", ["tenant", "conversation", "stage"], registry=r)
        self.conversation_llm_tokens = Counter("memstream_conversation_llm_tokens_total", f"LLM tokens per conversation and stage (the {CONVERSATION_SERIES} most recently active conversations)", ["tenant", "conversation", "stage", "kind"], registry=r)
        self._recent: OrderedDict[tuple[str, str], set[str]] = OrderedDict()  # conversation -> stages seen
        self.stm_flushes = Counter("memstream_stm_flushes_total", "STM flushes by reason", ["reason"], registry=r)
        self.stm_duplicates = Counter("memstream_stm_duplicate_turns_total", "Redelivered turns dropped by the STM", registry=r)
        self.extract_mode = Counter("memstream_extractions_total", "Extractions by mode (llm, extractive, extractive_fallback)", ["mode"], registry=r)
        self.embedded_texts = Counter("memstream_embedded_texts_total", "Texts embedded by the model (computed) or answered by the embedding cache (cached)", ["source"], registry=r)
        self.points_written = Counter("memstream_points_written_total", "Points upserted by collection", ["collection"], registry=r)
        self.llm_enabled = Gauge("memstream_llm_enabled", "1 when an LLM endpoint is configured", registry=r)
        self.consolidation_runs = Counter("memstream_consolidation_runs_total", "Conversation consolidations by trigger (idle, schedule, command)", ["reason"], registry=r)
        self.consolidation_queues = Counter("memstream_consolidation_queues_total", "Update queues built (one per new card)", registry=r)
        self.consolidation_candidates = Histogram("memstream_consolidation_queue_candidates", "Candidates in one update queue", buckets=(0, 1, 2, 3, 5, 10, 20), registry=r)
        self.consolidation_decisions = Counter("memstream_consolidation_decisions_total", "Pair decisions by action and by who decided (llm, rules)", ["action", "decided_by"], registry=r)
        self.consolidation_lag = Histogram("memstream_consolidation_lag_seconds", "From a card's write to its consolidation", buckets=(1, 10, 60, 300, 600, 1800, 3600, 21600, 86400), registry=r)
        self.consolidation_seconds = Histogram("memstream_consolidation_seconds", "Duration of one conversation's consolidation", buckets=_LATENCY_BUCKETS, registry=r)

    def count_llm(self, stage: str, model: str | None, calls: int, prompt_tokens: int, completion_tokens: int,
                  *, tenant: str | None = None, conversation: str | None = None) -> None:
        m = model or "unknown"
        self.llm_calls.labels(stage, m).inc(calls)
        self.llm_tokens.labels(stage, m, "prompt").inc(prompt_tokens)
        self.llm_tokens.labels(stage, m, "completion").inc(completion_tokens)
        if tenant is not None and conversation is not None:
            self._touch(tenant, conversation, stage)
            self.conversation_llm_calls.labels(tenant, conversation, stage).inc(calls)
            self.conversation_llm_tokens.labels(tenant, conversation, stage, "prompt").inc(prompt_tokens)
            self.conversation_llm_tokens.labels(tenant, conversation, stage, "completion").inc(completion_tokens)

    def _touch(self, tenant: str, conversation: str, stage: str) -> None:
        key = (tenant, conversation)
        self._recent.setdefault(key, set()).add(stage)
        self._recent.move_to_end(key)
        while len(self._recent) > CONVERSATION_SERIES:
            (old_tenant, old_conv), stages = self._recent.popitem(last=False)
            for old_stage in stages:
                self.conversation_llm_calls.remove(old_tenant, old_conv, old_stage)
                for kind in ("prompt", "completion"):
                    self.conversation_llm_tokens.remove(old_tenant, old_conv, old_stage, kind)

    def count_embedded(self, computed: int, cached: int) -> None:
        self.embedded_texts.labels("computed").inc(computed)
        self.embedded_texts.labels("cached").inc(cached)

    def serve(self, port: int) -> None:
        if port:
            start_http_server(port, addr="127.0.0.1", registry=self.registry)
