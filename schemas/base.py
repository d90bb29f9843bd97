"""Common base of every topic payload: versioned, tenant-scoped, JSON via orjson."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Self

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 4
# A payload is written as the oldest version that carries it: what uses nothing of v4 says v3, so the
# workers of the previous release keep reading what this one writes during a rolling upgrade
# (docs/wire-contract.md, "Version history"). ``written_version`` knows what v4 added.
OLDEST_WRITTEN = 3

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

    @model_validator(mode="after")
    def _this_release(self) -> Self:
        # The bound above is checked on the way in; held, a payload is this release's (what it is
        # written as is decided by its content, in ``to_bytes``), so a payload read back equals it.
        self.__dict__["schema_version"] = SCHEMA_VERSION
        return self

    def wire(self) -> dict[str, Any]:
        """The payload as JSON, as it is written: to a topic, or into a table entry a worker of the
        previous release may recover (a window's pending turns)."""
        data = self.model_dump(mode="json")
        written_version(data)  # sets its schema_version, and those of the payloads nested in it
        return data

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.wire())

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


def written_version(data: Any) -> int:
    """The oldest contract version whose readers take ``data`` (a payload's JSON, changed in place: a
    v4 field at its default is left out, as a v3 payload has none). v4 added imported history: the
    ``imported`` mark, positions (``seq``) below 0, ``import_progress``, and a read's ``cursor`` that
    may be below 0 or left to start from the first turn."""
    version = OLDEST_WRITTEN
    if isinstance(data, dict):
        if data.get("imported") is False:
            del data["imported"]
        if data.get("imported") is True or data.get("kind") == "import_progress":
            version = 4
        seq = data.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool) and seq < 0:
            version = 4
        if data.get("kind") == "read" and (data.get("cursor") is None or data["cursor"] < 0):
            version = 4
        for value in data.values():
            if isinstance(value, (dict, list)):
                version = max(version, written_version(value))
        if "schema_version" in data:  # a payload, or one nested in another (a turn in a compressed turn)
            data["schema_version"] = version
    elif isinstance(data, list):
        for value in data:
            version = max(version, written_version(value))
    return version


def utc(dt: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted to UTC."""
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


# Every timestamp on the wire is timezone-aware UTC.
UtcDatetime = Annotated[datetime, AfterValidator(utc)]


def _short(exc: ValueError) -> str:
    text = str(exc).replace("\n", "; ")
    return text if len(text) < 600 else text[:600] + "…"
