"""Log lines that name their trace: every record gets the current span's ``trace_id`` and
``span_id`` (OpenTelemetry; empty outside a span or with tracing off), shown after the message in
text, and as fields of one JSON object per line with ``MEMSTREAM_LOG_FORMAT=json``."""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timezone
from typing import Literal

import orjson
from opentelemetry import trace

LogFormat = Literal["text", "json"]
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(trace_suffix)s"


class TraceContext(logging.Filter):
    """Adds ``trace_id``, ``span_id`` and ``trace_suffix`` (" trace=<id> span=<id>", or "") to a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        trace_id = format(context.trace_id, "032x") if context.is_valid else ""
        span_id = format(context.span_id, "016x") if context.is_valid else ""
        setattr(record, "trace_id", trace_id)  # LogRecord takes extra attributes
        setattr(record, "span_id", span_id)
        setattr(record, "trace_suffix", f" trace={trace_id} span={span_id}" if trace_id else "")
        return True


class JsonLines(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, trace_id, span_id, and
    the exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": getattr(record, "trace_id", ""),
            "span_id": getattr(record, "span_id", ""),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


def log_handler(fmt: LogFormat = "text") -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(TraceContext())
    handler.setFormatter(JsonLines() if fmt == "json" else logging.Formatter(TEXT))
    return handler
