"""Common base of every topic payload: versioned, tenant-scoped, JSON via orjson."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Self

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

SCHEMA_VERSION = 4

# Ids travel inside Kafka keys (tenant/conversation) and Qdrant payloads: keep them plain. '#'
# marks a chunk of a long turn (``D3:4#2``), '~' a later version of an edited turn (``1712.05~1713``).
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@#~\-]{0,127}$"
CHUNK_MARK = "#"
VERSION_MARK = "~"


def base_turn_id(turn_id: str) -> str:
    """The turn a chunk or a version belongs to (``D3:4#2``, ``D3:4~17`` -> ``D3:4``): forgetting a
    turn forgets all of them; other ids are their own base."""
    return turn_id.split(CHUNK_MARK, 1)[0].split(VERSION_MARK, 1)[0]


def versioned_turn_id(turn_id: str, version: str) -> str:
    """The id of a later version of a turn (an edit on a chat platform): ``<turn>~<version>``."""
    return f"{base_turn_id(turn_id)}{VERSION_MARK}{version}"


class SchemaError(ValueError):
    """A payload that cannot be decoded or validated against its schema."""


def json_object(raw: bytes | str, error: type[Exception] = SchemaError) -> dict[str, Any]:
    """``raw`` decoded as a JSON object; anything else raises ``error`` with a short reason."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise error(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise error(f"expected a JSON object, got {type(data).__name__}")
    return data


class Payload(BaseModel):
    """Base of all topic payloads."""

    model_config = ConfigDict(extra="forbid", frozen=False, str_strip_whitespace=False)

    schema_version: int = Field(SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))

    @classmethod
    def from_bytes(cls, raw: bytes | str) -> Self:
        data = json_object(raw)
        try:
            return cls.model_validate(data)
        except ValueError as exc:
            raise SchemaError(f"invalid {cls.__name__}: {_short(exc)}") from exc


class TenantScoped(Payload):
    """A payload that belongs to one tenant's conversation; its Kafka key is ``tenant/conversation``."""

    tenant_id: str = Field(pattern=ID_PATTERN)
    conversation_id: str = Field(pattern=ID_PATTERN)

    @property
    def key(self) -> str:
        return conversation_key(self.tenant_id, self.conversation_id)


def conversation_key(tenant_id: str, conversation_id: str) -> str:
    return f"{tenant_id}/{conversation_id}"


class ScopeKeyed(Payload):
    """A payload about a tenant (or every tenant) that may name one conversation: its Kafka key is
    that conversation's ``tenant/conversation``, else ``tenant/*`` (``*/*``: every tenant), the key
    of a broadcast (one copy per partition) or of a read of the whole tenant."""

    if TYPE_CHECKING:  # each payload declares them, in its own field order (the wire's)
        tenant_id: str | None
        conversation_id: str | None

    @property
    def key(self) -> str:
        return f"{self.tenant_id or '*'}/{self.conversation_id or '*'}"


def utc(dt: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted to UTC."""
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


# Every timestamp on the wire is timezone-aware UTC.
UtcDatetime = Annotated[datetime, AfterValidator(utc)]


def _short(exc: ValueError) -> str:
    text = str(exc).replace("\n", "; ")
    return text if len(text) < 600 else text[:600] + "…"
