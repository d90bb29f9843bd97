"""The trace context in and out of Kafka headers, and spans on and off (the SDK's in-memory exporter;
the real backend is tests/integration/test_tracing.py)."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from memstream.tracing import Tracing, tracing_configured


def on() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return Tracing("test", enabled=True, exporter=exporter), exporter


def test_off_without_an_endpoint_and_when_disabled():
    assert not tracing_configured({})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert not tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"})
    off = Tracing(enabled=False)
    with off.span("memstream.compress") as span:
        assert not span.is_recording()
        assert off.headers() == [] and off.current_trace_id() is None


def test_a_span_s_context_travels_in_headers_and_its_consumer_continues_the_trace():
    tracing, exporter = on()
    with tracing.span("memstream.remember", kind=SpanKind.PRODUCER) as root:
        headers = tracing.headers(root)
    assert [k for k, _ in headers] == ["traceparent"]
    parent = tracing.context_of(headers)
    with tracing.span("memstream.compress", parent=parent, kind=SpanKind.CONSUMER):
        downstream = tracing.headers()
        trace_id = tracing.current_trace_id()
    with tracing.span("memstream.segment", parent=tracing.context_of(dict(downstream))):
        pass
    tracing.flush()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"memstream.remember", "memstream.compress", "memstream.segment"}
    assert len({s.context.trace_id for s in spans.values()}) == 1
    assert format(spans["memstream.remember"].context.trace_id, "032x") == trace_id
    assert spans["memstream.compress"].parent.span_id == spans["memstream.remember"].context.span_id
    assert spans["memstream.segment"].parent.span_id == spans["memstream.compress"].context.span_id


def test_messages_without_a_valid_context_start_new_roots():
    tracing, _ = on()
    assert tracing.context_of(None) is None
    assert tracing.context_of([("other", b"x")]) is None
    assert tracing.context_of([("traceparent", b"not-a-traceparent")]) is None
    assert tracing.context_of([("traceparent", b"00-00000000000000000000000000000000-0000000000000000-01")]) is None
    good = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert tracing.context_of([("TraceParent", good)]) is not None
    assert tracing.link_to([("traceparent", good)]).context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736


def test_a_failed_span_has_error_status_and_its_reason():
    tracing, exporter = on()
    with tracing.span("memstream.dlq") as span:
        tracing.fail(span, "not JSON: expected value")
    tracing.flush()
    [finished] = exporter.get_finished_spans()
    assert finished.status.status_code is StatusCode.ERROR
    assert finished.attributes["memstream.error.reason"] == "not JSON: expected value"
