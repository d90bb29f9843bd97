"""A worker process: the stages it runs, its local state, its metrics endpoint and log lines."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from memstream.settings.paths import AbsolutePath, default_data_dir


class WorkerSettings(BaseModel):
    """What one worker process runs, and where it keeps its state."""

    stages: str = Field("all", description="Comma-separated stages this worker runs, or 'all'")
    data_dir: AbsolutePath = Field(
        default_factory=default_data_dir,
        description="Local state: broker data, embedded Qdrant, worker state (a relative path is read against "
        "the directory memstream starts in)",
    )
    kafka_data: AbsolutePath | None = Field(
        None, description="Data folder of the local broker started by memstream up / demo (default data_dir/kafka)"
    )
    metrics_port: int = Field(9464, description="Prometheus /metrics port of the worker (0 disables)")
    metrics_host: str = Field("127.0.0.1", description="Address the /metrics endpoint binds (0.0.0.0 in containers)")
    log_level: str = Field("info")
    log_format: Literal["text", "json"] = Field(
        "text", description="Worker log lines: text, or one JSON object a line; both carry trace_id and span_id"
    )
    gil_switch_ms: float = Field(
        5.0,
        gt=0,
        description="Python's GIL switch interval in the worker (5 is the interpreter's own): a thread that gave up "
        "the GIL for a socket write, a model or a store call waits up to this long to get it back while other "
        "threads run Python. 1 ms made no measured difference in bench fairness (docs/benchmarks.md)",
    )
    stall_s: float = Field(
        30.0, ge=0, description="Restart a worker whose delivered messages sit unprocessed this long (0 = never)"
    )

    state_evict_idle_s: float = Field(
        86400.0,
        gt=0,
        description="A conversation's table entries (window, buffer, consolidation marks) that hold nothing in "
        "flight are deleted after this many idle seconds (never sooner than STM_IDLE_S and SLEEP_IDLE_S)",
    )
    bulk_backlog: int = Field(
        16,
        ge=1,
        description="An imported turn (bulk.turns) enters the pipeline only while fewer than this many messages are "
        "unfinished on the topics after the turns topic, and no live turn or question waits",
    )
    stream_buffer_records: int = Field(
        4096,
        ge=16,
        description="Records a stage's stream holds per topic before that topic's partitions stop being fetched "
        "(faust's stream_buffer_maxsize); fetches are sized so that a stream that does not take its records (a "
        "waiting history import, a stage behind) never holds up the others",
    )
    state_seen_piece_ids: int = Field(
        32,
        ge=1,
        description="The recent turn ids a window or buffer keeps to drop redelivered turns are written in pieces "
        "of this many (a turn rewrites only the newest piece, whatever the conversation's length)",
    )

    @property
    def kafka_data_dir(self) -> Path:
        """Where the local broker (memstream up, infra/kafka/kafka.sh) keeps its data."""
        return self.kafka_data or (self.data_dir / "kafka")
