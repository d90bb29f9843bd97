"""The vector store: a Qdrant server or cluster, or the embedded engine."""

from __future__ import annotations

from typing import Literal, Self
from urllib.parse import urlparse

from pydantic import BaseModel, Field, SecretStr, model_validator

from memstream.settings.paths import AbsolutePath


def _tls_or_loopback(url: str) -> bool:
    """An https URL, or one to this machine (where no one else can read the key on the way)."""
    parsed = urlparse(url)
    return parsed.scheme == "https" or parsed.hostname in ("localhost", "127.0.0.1", "::1")


class StoreSettings(BaseModel):
    """Where memories are stored: a server's URLs and collections, or the embedded engine's folder."""

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
    qdrant_path: AbsolutePath | None = Field(
        None, description="Embedded store folder (default data_dir/qdrant-<engine>)"
    )
    qdrant_embedded: Literal["edge", "local"] = Field(
        "edge",
        description="Embedded engine without a server: Qdrant Edge (HNSW, payload indexes) or qdrant-client's "
        "local mode (brute force)",
    )

    record_enabled: bool = Field(
        True,
        description="Record every store write in the compacted topic <prefix>.record before it reaches the store: "
        "what `memstream rebuild` and a restore rebuild the store from (off: the store is the only copy)",
    )
    record_vectors: bool = Field(
        False,
        description="Keep each point's vector in the record too (a rebuild with the same embedder then skips "
        "embedding; about 8 KB more per point at 384 dimensions)",
    )
    record_timeout_s: float = Field(
        60.0, gt=0, description="How long a store write waits for the broker to acknowledge its record"
    )

    @model_validator(mode="after")
    def _store_writes_are_possible_and_safe(self) -> Self:
        if self.qdrant_write_consistency > self.qdrant_replication_factor:
            raise ValueError(
                f"MEMSTREAM_QDRANT_WRITE_CONSISTENCY={self.qdrant_write_consistency} is more than "
                f"MEMSTREAM_QDRANT_REPLICATION_FACTOR={self.qdrant_replication_factor}: no write could succeed"
            )
        urls = (self.qdrant_url or "").split(",")
        if self.qdrant_api_key and self.qdrant_url and not all(_tls_or_loopback(u.strip()) for u in urls):
            raise ValueError("MEMSTREAM_QDRANT_API_KEY is sent only over https: use an https:// MEMSTREAM_QDRANT_URL")
        return self
