"""Deterministic ids: a redelivered message must map to the same points and messages."""

from __future__ import annotations

import hashlib
import uuid
from typing import Iterable

# Fixed namespace for memstream point ids (never change: ids would change with it).
MEMSTREAM_NAMESPACE = uuid.UUID("6f1d7a52-3c4b-5e0a-9b1e-2d7c0f4a8e11")


def point_id(kind: str, tenant_id: str, conversation_id: str, provenance: Iterable[str], content: str) -> str:
    """UUIDv5 of tenant, conversation, provenance (order-free) and content."""
    name = "\x1f".join([kind, tenant_id, conversation_id, ",".join(sorted(set(provenance))), content])
    return str(uuid.uuid5(MEMSTREAM_NAMESPACE, name))


def stable_id(*parts: str, length: int = 16) -> str:
    """A short hex digest of the parts, for message ids (flushes, writes, scenes)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return digest[:length]
