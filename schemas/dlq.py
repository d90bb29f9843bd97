"""Dead letters: what a stage could not process, with its reason and the original bytes."""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import Field

from .base import Payload, UtcDatetime


class DeadLetter(Payload):
    kind: Literal["dead_letter"] = "dead_letter"
    stage: str
    reason: str
    error_type: str
    topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    tenant_id: str | None = Field(None, description="When it could be read from the message")
    original_b64: str = Field(description="The message value exactly as consumed, base64")
    original_size: int
    failed_at: UtcDatetime

    @property
    def original(self) -> bytes:
        return base64.b64decode(self.original_b64)

    @staticmethod
    def encode(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")
