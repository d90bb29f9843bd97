"""What a worker spent on the LLM for one tenant in one budget window (``memory.llm.usage``), so that
every worker, and the inspector, can add up a tenant's spend over all workers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ID_PATTERN, Payload, UtcDatetime


class LlmUsage(Payload):
    """A worker's running totals for a tenant and window; key ``<tenant>/<window start>/<worker>``
    (the latest per key is all that counts: the topic is compacted, and old windows expire)."""

    kind: Literal["llm_usage"] = "llm_usage"
    tenant_id: str = Field(pattern=ID_PATTERN)
    window_start: UtcDatetime
    window_s: float = Field(gt=0)
    worker: str = Field(pattern=ID_PATTERN)
    calls: int = Field(0, ge=0)
    tokens: int = Field(0, ge=0)
    # Stage -> flushes extracted / consolidation chunks decided without the LLM because the tenant
    # was over its budget.
    fallbacks: dict[str, int] = Field(default_factory=dict)
    updated_at: UtcDatetime

    @property
    def key(self) -> str:
        return f"{self.tenant_id}/{int(self.window_start.timestamp())}/{self.worker}"
