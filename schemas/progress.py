"""How far a tenant's history imports have come (``memory.import.progress``): importers publish the
turns they sent, workers the imported turns they let into the pipeline; a tenant's progress is the
sum of each (the inspector, ``memstream ingest --bulk --wait``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ID_PATTERN, Payload, UtcDatetime


class ImportProgress(Payload):
    """One party's running count for a tenant; key ``<tenant>/<counter>`` (the latest per key is all
    that counts: the topic is compacted). ``counter``: ``import-<id>`` for the turns an import sent,
    ``worker-<name>`` for the turns a worker let in (a restarted worker counts under a new name)."""

    kind: Literal["import_progress"] = "import_progress"
    tenant_id: str = Field(pattern=ID_PATTERN)
    counter: str = Field(pattern=ID_PATTERN)
    role: Literal["sent", "let_in"]
    turns: int = Field(ge=0)
    updated_at: UtcDatetime

    @property
    def key(self) -> str:
        return f"{self.tenant_id}/{self.counter}"
