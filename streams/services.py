"""The process-wide adapters a worker needs, built once from Settings (no module globals)."""

from __future__ import annotations

import logging
import threading
import time
from functools import cached_property
from typing import Callable, TypeVar

from memstream.config import Settings
from memstream.instrumented import MeteredLLM, MeteredStore, TracedEmbedder
from memstream.llm_limits import ProviderLimiter
from memstream.metrics import Metrics
from memstream.ports import LLM, Compressor, Embedder, StoreUnavailable
from memstream.processors.operations.fingerprint import META, check_embedder
from memstream.processors.operations.record import RecordedStore
from memstream.processors.query.engine import QueryOptions
from memstream.processors.query.graph import GraphParams
from memstream.processors.query.retrieve import RetrievalParams
from memstream.processors.write.index import COLLECTIONS
from memstream.processors.write.segment import SegmentParams
from memstream.tracing import Tracing

log = logging.getLogger(__name__)
T = TypeVar("T")


def wait_for_store(call: Callable[[], T], timeout_s: float, poll_s: float = 2.0) -> T:
    """``call()`` once the vector store answers: a worker starting during a Qdrant outage waits up to
    ``timeout_s`` for it (as it waits for the broker) instead of failing at once."""
    deadline = time.monotonic() + timeout_s
    warned = False
    while True:
        try:
            return call()
        except StoreUnavailable as exc:
            if time.monotonic() >= deadline:
                raise
            if not warned:
                log.warning("vector store unavailable (%s): waiting up to %.0fs for it", exc, timeout_s)
                warned = True
            time.sleep(poll_s)


class Services:
    """Lazily built adapters: a stage that never embeds never loads the model."""

    def __init__(self, settings: Settings, metrics: Metrics | None = None):
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._metered_llms: dict[str, LLM] = {}
        self._llm_lock = threading.Lock()
        # Erasure and consolidation updates take turns on the store: an update decided before a
        # forget must not write back a merged card of forgotten turns after the erase.
        self.store_lock = threading.Lock()
        # Told when a model or the store is loaded (the worker marks its start-up phases with it).
        self.on_loaded: Callable[[str], object] = lambda _name: None

    @cached_property
    def tracing(self) -> Tracing:
        """Spans of this worker (off unless OTEL_EXPORTER_OTLP_ENDPOINT is set)."""
        return Tracing("memstream-worker")

    @cached_property
    def embedder(self) -> Embedder:
        from memstream.adapters.st_embedder import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder.from_settings(
            self.settings, cache_size=self.settings.embedding_cache, on_embed=self.metrics.count_embedded
        )
        log.info("embedder loaded: %s (%d-d, %s)", embedder.name, embedder.dim, embedder.backend)
        self.on_loaded("embedder")
        return TracedEmbedder(embedder, self.tracing) if self.tracing.enabled else embedder

    @cached_property
    def attention(self):  # EncoderAttention
        from memstream.adapters.encoder_attention import EncoderAttention

        s = self.settings
        # The attention pass runs as the embedder does: ONNX Runtime (fp32 for both onnx backends) or torch.
        backend = "torch" if s.embedding_backend == "torch" else "onnx"
        attention = EncoderAttention(s.segment_attention_model, backend=backend, threads=s.torch_threads)
        log.info(
            "attention encoder loaded: %s (%d layers x %d heads, %s)",
            attention.name,
            attention.layers,
            attention.heads,
            attention.backend,
        )
        self.on_loaded("attention")
        return attention

    @cached_property
    def query_options(self) -> QueryOptions:
        s = self.settings
        retrieval = RetrievalParams(
            evidence_k=s.evidence_k,
            candidates=s.query_candidates,
            trigger_threshold=s.trigger_threshold,
            cascade_topics=s.cascade_topics,
            evidence_policy=s.evidence_policy,
            evidence_dropoff=s.evidence_dropoff,
            evidence_max_tokens=s.evidence_max_tokens,
            research_rounds=s.research_rounds,
            graph=GraphParams(hops=s.graph_hops, per_hop=s.graph_per_hop, per_item=s.graph_per_item),
            content_query=s.content_query,
        )
        return QueryOptions(
            retrieval=retrieval,
            replay_window=s.replay_window,
            replay_max_tokens=s.replay_max_tokens,
            max_answer_tokens=s.answer_max_tokens,
            planner=s.effective_query_planner,
            fresh_k=s.fresh_turns_k,
        )

    @cached_property
    def segment_params(self) -> SegmentParams:
        s = self.settings
        heads: tuple[tuple[int, int], ...] = ()
        if s.segment_heads:
            heads = tuple((int(layer), int(h)) for layer, h in (item.split(":") for item in s.segment_heads.split(",")))
        elif s.segment_method != "similarity":
            from memstream.adapters.encoder_attention import load_heads
            from memstream.adapters.packaged_models import model_name, model_path

            name = model_name(model_path(s.segment_attention_model))
            heads = load_heads(name)
            if not heads:
                log.warning(
                    "no calibrated attention heads for %s: averaging every upper-layer head "
                    "(run `memstream bench calibrate-heads`)",
                    name,
                )
        return SegmentParams(
            method=s.segment_method,
            window_turns=s.segment_window_turns,
            carry_turns=min(s.segment_carry_turns, s.segment_window_turns - 1),
            theta_start=s.segment_threshold,
            theta_max=s.segment_threshold_max,
            coarse_radius=s.segment_coarse_radius,
            heads=heads,
        )

    @cached_property
    def store(self):  # a VectorStore, timed per operation
        from memstream.adapters import open_store

        store = open_store(self.settings)
        try:
            wait_for_store(
                lambda: store.ensure_collections((*COLLECTIONS, META), self.embedder.dim), self.settings.store_wait_s
            )
            check_embedder(store, self.embedder)  # same size, another model: refused here, not searched as noise
        except Exception:
            store.close()  # an embedded store's folder lock goes with it
            raise
        log.info("vector store: %s (%s)", store.location, "embedded" if store.embedded else "server")
        if self.settings.record_enabled:
            from memstream.adapters.kafka_record import KafkaRecord

            try:
                record = KafkaRecord(self.settings)
            except Exception:
                store.close()
                raise
            log.info("store writes recorded in %s", record.topic)
            store = RecordedStore(store, record, vectors=self.settings.record_vectors, embedder=self.embedder.name)
        self.on_loaded("store")
        return MeteredStore(store, self.metrics, self.tracing)

    @cached_property
    def llm(self) -> LLM | None:
        s = self.settings
        self.metrics.llm_enabled.set(1 if s.llm_enabled else 0)
        if not s.llm_base_url:
            log.warning("no LLM configured (MEMSTREAM_LLM_BASE_URL unset): extractive mode, evidence-only answers")
            return None
        from memstream.adapters.openai_llm import OpenAICompatibleLLM

        log.info("LLM: %s at %s", s.llm_model, s.llm_base_url)
        return OpenAICompatibleLLM(
            s.llm_base_url, s.llm_model, s.llm_api_key, timeout_s=s.llm_timeout_s, max_tokens=s.llm_max_tokens
        )

    @cached_property
    def llm_limiter(self) -> ProviderLimiter:
        """The provider's limits for the configured model, one for every stage of this worker: the
        provider counts the worker's calls together."""
        s = self.settings
        limiter = ProviderLimiter(s.llm_model, rpm=s.llm_rpm, tpm=s.llm_tpm, max_concurrency=s.llm_max_concurrency)
        self.metrics.watch_llm_limiter(s.llm_model, limiter)
        if s.llm_rpm or s.llm_tpm:
            log.info("LLM limits: %g requests/min, %g tokens/min (0 = none)", s.llm_rpm, s.llm_tpm)
        return limiter

    def llm_for(self, stage: str) -> LLM | None:
        """The LLM as ``stage`` uses it: its calls timed, failures counted, transient ones retried,
        and every call within the provider's limits."""
        with self._llm_lock:  # each stage gets one MeteredLLM, and the worker one limiter, whoever asks first
            if self.llm is None:
                return None
            if stage not in self._metered_llms:
                s = self.settings
                self._metered_llms[stage] = MeteredLLM(
                    self.llm,
                    self.metrics,
                    stage,
                    retries=s.llm_retries,
                    tracing=self.tracing,
                    limiter=self.llm_limiter,
                    rate_limit_wait_s=s.llm_rate_limit_wait_s,
                    default_max_tokens=s.llm_max_tokens,
                )
            return self._metered_llms[stage]

    @cached_property
    def compressor(self) -> Compressor | None:
        s = self.settings
        if not s.compressor_model:
            self.metrics.compression_enabled.set(0)
            log.warning("no compressor model (MEMSTREAM_COMPRESSOR_MODEL unset): turns pass through uncompressed")
            return None
        from memstream.adapters.llmlingua_compressor import LLMLinguaCompressor

        compressor = LLMLinguaCompressor(s.compressor_model)
        self.metrics.compression_enabled.set(1)
        log.info("compressor: %s, keep rate %.2f", compressor.name, s.compress_rate)
        self.on_loaded("compressor")
        return compressor

    def close(self) -> None:
        if "tracing" in self.__dict__:
            self.tracing.shutdown()  # sends the spans still batched
        if "store" in self.__dict__:
            self.store.close()
