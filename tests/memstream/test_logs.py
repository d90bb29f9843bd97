"""Log lines name the trace they belong to: in text after the message, in JSON as fields; nothing
outside a span."""

from __future__ import annotations

import io
import logging

import orjson
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memstream.logs import JsonLines, TraceContext, log_handler
from memstream.tracing import Tracing


def logged(fmt: str, emit) -> str:
    handler = log_handler(fmt)  # type: ignore[arg-type]
    out = io.StringIO()
    handler.setStream(out)
    logger = logging.getLogger(f"test-logs-{fmt}")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        emit(logger)
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


def test_text_lines_carry_the_trace_inside_a_span_and_nothing_outside():
    tracing = Tracing(enabled=True, exporter=InMemorySpanExporter())

    def emit(logger: logging.Logger) -> None:
        logger.info("outside")
        with tracing.span("memstream.compress"):
            logger.info("inside")

    outside, inside = logged("text", emit).splitlines()
    assert outside.endswith("outside")
    trace_id = inside.split("trace=")[1].split()[0]
    assert len(trace_id) == 32 and " span=" in inside and "inside" in inside


def test_json_lines_are_objects_with_the_trace_fields():
    tracing = Tracing(enabled=True, exporter=InMemorySpanExporter())

    def emit(logger: logging.Logger) -> None:
        with tracing.span("memstream.query") as span:
            logger.warning("slow step %s", "plan")
            expected = format(span.get_span_context().trace_id, "032x")
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed")
        emit.expected = expected  # type: ignore[attr-defined]

    first, second = (orjson.loads(line) for line in logged("json", emit).splitlines())
    assert first["message"] == "slow step plan" and first["level"] == "WARNING"
    assert first["trace_id"] == emit.expected and len(first["span_id"]) == 16  # type: ignore[attr-defined]
    assert second["trace_id"] == "" and "ValueError: boom" in second["exception"]


def test_a_record_through_the_filter_alone_gets_empty_fields():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    assert TraceContext().filter(record) and record.trace_id == "" and record.trace_suffix == ""
    assert orjson.loads(JsonLines().format(record))["span_id"] == ""
