"""Small ports between the algorithms (processors/) and the outside world (adapters/)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Protocol, Sequence

import numpy as np

Vector = Sequence[float] | np.ndarray  # a dense vector: a list, or a row of an embedding matrix


@dataclass(frozen=True)
class LlmResult:
    content: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    data: dict[str, Any] | None = None  # parsed JSON when a schema was requested
    cached_prompt_tokens: int = 0  # of prompt_tokens, those the provider's prompt cache served


class LLMError(RuntimeError):
    """The LLM endpoint failed or answered something unusable.

    ``kind``: timeout, connection, rate_limit, server (5xx), client (other 4xx, bad request) or
    empty (no usable answer); the first four are transient and worth a retry. ``retry_after_s``:
    how long the provider asked to wait before the next call (a 429's Retry-After), when it said."""

    TRANSIENT = frozenset({"timeout", "connection", "rate_limit", "server"})

    def __init__(self, message: str, kind: str = "client", *, retry_after_s: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.retry_after_s = retry_after_s

    @property
    def retryable(self) -> bool:
        return self.kind in self.TRANSIENT


class StoreUnavailable(RuntimeError):
    """The vector store cannot be reached now (every server node down or unable to serve): an outage
    to wait out, never a reason to dead-letter the message being handled."""


@dataclass(frozen=True)
class LlmRequest:
    """One chat completion as asked: with ``json_schema`` the output is constrained and parsed.
    ``max_tokens`` None: the adapter's default. ``timeout_s`` bounds the call (None: the adapter's
    own timeout); past it, an LLMError of kind "timeout"."""

    messages: Sequence[Mapping[str, str]]
    json_schema: Mapping[str, Any] | None = None
    schema_name: str = "output"
    max_tokens: int | None = None
    timeout_s: float | None = None

    def send(self, llm: LLM) -> LlmResult:
        """This request made to ``llm`` through ``complete``, which every LLM has (a test's stand-in too)."""
        return llm.complete(
            self.messages,
            json_schema=self.json_schema,
            schema_name=self.schema_name,
            max_tokens=self.max_tokens,
            timeout_s=self.timeout_s,
        )


class LLM(Protocol):
    """A chat model. Callers use ``complete``; an adapter subclasses LLM and implements ``answer``,
    so the call's parameters and defaults are declared here only."""

    model: str

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        json_schema: Mapping[str, Any] | None = None,
        schema_name: str = "output",
        max_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> LlmResult:
        """One chat completion (the parameters: :class:`LlmRequest`)."""
        return self.answer(LlmRequest(messages, json_schema, schema_name, max_tokens, timeout_s))

    def answer(self, request: LlmRequest) -> LlmResult:
        """``request`` answered: what an adapter implements."""
        ...


class Embedder(Protocol):
    dim: int
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 vectors, shape (len(texts), dim)."""
        ...

    def clear_cache(self) -> None:
        """Drop every cached vector and the text it is keyed by (after a forget: no copy of a
        forgotten text may stay, not even in memory)."""
        ...


class Compressor(Protocol):
    name: str

    def compress(self, text: str, *, keep_rate: float, force_keep: Sequence[str] = ()) -> str:
        """A shorter text keeping roughly ``keep_rate`` of the tokens and every ``force_keep`` word."""
        ...


@dataclass(frozen=True)
class StoreFilter:
    """Conditions ANDed together; the tenant is not here: every store call takes it separately."""

    equals: Mapping[str, str | int | bool] = field(default_factory=dict)
    any_of: Mapping[str, Sequence[str | int]] = field(default_factory=dict)
    is_null: Sequence[str] = ()
    range_ts: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    # Excluded values: a point whose key is missing or different passes (must_not).
    not_equals: Mapping[str, str | int | bool] = field(default_factory=dict)
    # Excluded ranges (inclusive bounds): a point whose key is missing or outside passes (must_not).
    not_range_ts: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class StorePoint:
    id: str
    vector: Sequence[float]
    payload: Mapping[str, Any]
    text: str | None = None  # indexed for lexical (BM25) search; None = not lexically searchable


@dataclass(frozen=True)
class StoreHit:
    id: str
    score: float
    payload: Mapping[str, Any]
    vector: Sequence[float] | None = None  # the stored dense vector, when asked for (``with_vectors``)


class VectorStore(Protocol):
    """Tenant-scoped vector store: every read takes ``tenant_id`` and applies it as a hard filter."""

    def ensure_collections(self, names: Sequence[str], dim: int) -> None: ...

    def upsert(self, collection: str, points: Sequence[StorePoint], *, only_new: bool = False) -> None:
        """Write these points (a point replaces the one with its id, payload and vectors whole).
        ``only_new``: insert only the points whose ids the collection does not hold, and leave the
        others as they are; the engine decides per point, so a write racing with this one (another
        worker's) is never overwritten by it."""
        ...

    def search(
        self,
        collection: str,
        tenant_id: str,
        vector: Vector,
        *,
        where: StoreFilter | None = None,
        limit: int = 10,
        with_vectors: bool = False,
    ) -> list[StoreHit]: ...

    def search_text(
        self,
        collection: str,
        tenant_id: str,
        text: str,
        *,
        where: StoreFilter | None = None,
        limit: int = 10,
        with_vectors: bool = False,
    ) -> list[StoreHit]:
        """BM25 ranking over the points upserted with ``StorePoint.text``; scores are BM25 scores
        (``with_vectors``: the dense vectors come back too, as from ``search``).

        Same tenant and ``where`` filtering as :meth:`search`. IDF comes from the whole collection.
        """
        ...

    def scroll(
        self,
        collection: str,
        tenant_id: str,
        *,
        where: StoreFilter | None = None,
        limit: int = 1000,
        with_vectors: bool = False,
    ) -> list[StoreHit]: ...

    def count(self, collection: str, tenant_id: str | None = None, *, where: StoreFilter | None = None) -> int: ...

    def scan(self, collection: str, *, with_vectors: bool = False) -> Iterator[StoreHit]:
        """Every point of the collection, of every tenant, a page at a time. For operators' work on the
        whole store (backup, syncing the record) only: no query path reads with it."""
        ...

    def retrieve(
        self, collection: str, tenant_id: str, point_ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[StoreHit]:
        """The points of ``tenant_id`` with these ids (those that exist; scores 1.0)."""
        ...

    def set_payload(self, collection: str, tenant_id: str, point_id: str, fields: Mapping[str, Any]) -> bool:
        """Set these payload fields on one point of this tenant (other fields untouched). Returns False,
        changing nothing, when the point does not exist or belongs to another tenant.

        The tenant is enforced by the engine (a tenant_id AND has-id filter selects the point), not by
        a check in Python. A ``None`` value is stored as JSON null (the key stays, so
        ``StoreFilter.is_null`` matches it); vectors are kept. ``tenant_id`` itself cannot be set.
        """
        ...

    def delete(self, collection: str, tenant_id: str, point_ids: Sequence[str]) -> int:
        """Delete these points of this tenant (ids of another tenant or unknown ids are left alone,
        by the engine's filter). Returns how many were deleted."""
        ...

    def close(self) -> None: ...


class MemoryRecord(Protocol):
    """The durable record of the store: a compacted log, one entry per point (``<tenant>/<collection>/<id>``,
    its latest state; no value = deleted). ``write`` returns once the log has every entry."""

    def write(self, entries: Sequence[tuple[str, bytes | None]]) -> None: ...

    def close(self) -> None: ...


class Steps(Protocol):
    """Where a processor reports a step of its work: ``with steps("plan") as attributes:`` (the
    block fills in what the step did: counts, choices; never text)."""

    def __call__(self, name: str, /) -> AbstractContextManager[dict[str, Any]]: ...
