"""OpenTelemetry traces across Kafka topics: the W3C trace context (``traceparent``, ``tracestate``)
travels in the headers of every message memstream produces, so a turn or a question is one trace
from its producer through every stage that handles it.

Configured by OpenTelemetry's standard variables, read by the SDK: ``OTEL_EXPORTER_OTLP_ENDPOINT``
(or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) turns it on and says where spans go (OTLP over HTTP),
``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER`` / ``_ARG``, ``OTEL_SDK_DISABLED``. Without an endpoint
it is off: no provider, no exporter, spans are the API's non-recording ones and no header is added.

Everything memstream touches of OpenTelemetry is here (a provider of its own, not the process-wide
global, so that a library embedding the SDK keeps its own)."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Mapping, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

__all__ = ["Headers", "Link", "Span", "SpanKind", "Tracing", "tracing_configured"]
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

Headers = Sequence[tuple[str, bytes]]

_PROPAGATOR = TraceContextTextMapPropagator()
TRACE_HEADERS = frozenset(_PROPAGATOR.fields)  # traceparent, tracestate


def tracing_configured(env: Mapping[str, str] = os.environ) -> bool:
    """An OTLP endpoint is set and the SDK is not disabled."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


class Tracing:
    """One process's tracer: spans, and the trace context in and out of Kafka headers."""

    def __init__(self, default_service: str = "memstream", *, enabled: bool | None = None, exporter: Any = None):
        """``exporter``: where spans go when on (default: OTLP over HTTP, as the variables say)."""
        self.enabled = tracing_configured() if enabled is None else enabled
        self._provider: Any = None
        if self.enabled:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the default names
            # the process when neither does. The provider reads OTEL_TRACES_SAMPLER(_ARG).
            service = os.environ.get("OTEL_SERVICE_NAME") or default_service
            self._provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
            self._provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
            self.tracer: trace.Tracer = self._provider.get_tracer("memstream")
        else:
            self.tracer = trace.NoOpTracer()

    # -- context in and out of Kafka headers ------------------------------------------------------
    def headers(self, span: Span | None = None) -> list[tuple[str, bytes]]:
        """The headers carrying ``span``'s context (the current span's by default); none when off."""
        if not self.enabled:
            return []
        carrier: dict[str, str] = {}
        ctx = trace.set_span_in_context(span) if span is not None else None
        _PROPAGATOR.inject(carrier, context=ctx)
        return [(k, v.encode()) for k, v in carrier.items()]

    @staticmethod
    def context_of(headers: Headers | Mapping[str, bytes] | None) -> Context | None:
        """The trace context a message's headers carry, or None (a producer that sent none)."""
        if not headers:
            return None
        items = headers.items() if isinstance(headers, Mapping) else headers
        carrier = {
            k.lower(): (v.decode("latin-1") if isinstance(v, bytes) else str(v))
            for k, v in items
            if k and k.lower() in TRACE_HEADERS and v is not None
        }
        if "traceparent" not in carrier:
            return None
        ctx = _PROPAGATOR.extract(carrier)
        return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None

    @staticmethod
    def link_to(headers: Headers | Mapping[str, bytes] | None) -> Link | None:
        """A span link to the context ``headers`` carry (a flush joining many turns links each)."""
        ctx = Tracing.context_of(headers)
        return Link(trace.get_current_span(ctx).get_span_context()) if ctx is not None else None

    # -- spans --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        parent: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] = (),
    ) -> Iterator[Span]:
        """A span, current within the block: a child of ``parent`` (a context from headers) when
        given, else of the current span, else a new root. An exception leaving the block marks it
        as an error."""
        with self.tracer.start_as_current_span(
            name, context=parent, kind=kind, attributes=dict(attributes or {}), links=list(links)
        ) as span:
            yield span

    @contextlib.contextmanager
    def joining(
        self, name: str, joined: Sequence[str], *, attributes: Mapping[str, Any] | None = None
    ) -> Iterator[Span]:
        """A span that starts a trace of its own for work joining many messages (a flush of many
        turns), with a link to each message's context (``joined``: their traceparent values)."""
        links = [link for tp in joined if (link := self.link_to([("traceparent", tp.encode())])) is not None]
        with self.span(name, parent=Context(), attributes=attributes, links=links) as span:
            yield span

    @staticmethod
    def trace_id_of(headers: Headers | Mapping[str, bytes] | None) -> str | None:
        """The trace id (32 hex digits) of the context ``headers`` carry, or None."""
        ctx = Tracing.context_of(headers)
        if ctx is None:
            return None
        return format(trace.get_current_span(ctx).get_span_context().trace_id, "032x")

    def current_traceparent(self) -> str | None:
        """The current span's context as a ``traceparent`` value, to carry on a message sent later."""
        return self.traceparent(self.headers())

    @staticmethod
    def traceparent(headers: Headers | Mapping[str, bytes] | None) -> str | None:
        """The ``traceparent`` value a message carries, kept to link to it later."""
        if not headers:
            return None
        items = headers.items() if isinstance(headers, Mapping) else headers
        for k, v in items:
            if k and k.lower() == "traceparent" and v:
                return v.decode("latin-1") if isinstance(v, bytes) else str(v)
        return None

    def steps(self, prefix: str) -> Any:
        """The ``Steps`` port (memstream.ports) as spans: a step ``plan`` is a span ``<prefix>.plan``
        holding the attributes its block filled in."""

        @contextlib.contextmanager
        def step(name: str) -> Iterator[dict[str, Any]]:
            attributes: dict[str, Any] = {}
            with self.span(f"{prefix}.{name}") as span:
                yield attributes
                span.set_attributes(attributes)

        return step

    @staticmethod
    def current_trace_id() -> str | None:
        """The current span's trace id as 32 hex digits (what Jaeger shows), or None."""
        context = trace.get_current_span().get_span_context()
        return format(context.trace_id, "032x") if context.is_valid else None

    @staticmethod
    def fail(span: Span, reason: str) -> None:
        """Mark ``span`` as an error with ``reason`` (a dead-lettered message's span)."""
        span.set_status(Status(StatusCode.ERROR, reason))
        span.set_attribute("memstream.error.reason", reason)

    def flush(self, timeout_s: float = 5.0) -> None:
        if self._provider is not None:
            self._provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()
            self._provider = None
