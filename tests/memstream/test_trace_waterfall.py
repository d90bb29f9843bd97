"""A Jaeger trace (as its API returns it) laid out as a waterfall: tree order, times from the
first span, links and errors counted, orphans as roots."""

from __future__ import annotations

from memstream.trace_waterfall import plot_waterfall, waterfall_rows


def span(span_id, name, start, duration, parent=None, *, links=(), error=False, process="p1"):
    refs = [{"refType": "CHILD_OF", "traceID": "t", "spanID": parent}] if parent else []
    refs += [{"refType": "FOLLOWS_FROM", "traceID": "other", "spanID": s} for s in links]
    tags = [{"key": "otel.status_code", "type": "string", "value": "ERROR"}] if error else []
    return {
        "spanID": span_id,
        "operationName": name,
        "startTime": start,
        "duration": duration,
        "references": refs,
        "tags": tags,
        "processID": process,
    }


TRACE = {
    "spans": [
        span("c", "memstream.segment", 1_003_000, 500, "b"),
        span("b", "memstream.compress", 1_001_000, 1500, "a", process="p2"),
        span("a", "memstream.remember", 1_000_000, 200, links=["x", "y"]),
        span("d", "memstream.dlq", 1_002_000, 300, "b", error=True, process="p2"),
        span("e", "memstream.stm", 1_004_000, 100, "gone"),  # its parent was not sampled
    ],
    "processes": {"p1": {"serviceName": "memstream-client"}, "p2": {"serviceName": "memstream-worker"}},
}


def test_spans_in_tree_order_with_times_from_the_first_span(tmp_path):
    rows = waterfall_rows(TRACE)
    assert [(r.depth, r.name) for r in rows] == [
        (0, "memstream.remember"),
        (1, "memstream.compress"),
        (2, "memstream.dlq"),  # children by start time
        (2, "memstream.segment"),
        (0, "memstream.stm"),
    ]
    remember, compress, dlq, segment, _ = rows
    assert remember.links == 2 and remember.service == "memstream-client"
    assert compress.start_ms == 1.0 and compress.duration_ms == 1.5 and compress.service == "memstream-worker"
    assert dlq.error and not segment.error
    out = plot_waterfall(rows, tmp_path / "w.png", "trace t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
