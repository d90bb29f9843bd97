"""`bench trace-figures`: which of Jaeger's traces are shown (no Jaeger)."""

from memstream.bench.trace_figures import earliest, linked_to


def trace(trace_id: str, start: int, links: tuple[str, ...] = ()) -> dict:
    spans = [{"startTime": start + 5, "references": []}, {"startTime": start, "references": []}]
    spans[0]["references"] = [{"traceID": link} for link in links]
    return {"traceID": trace_id, "spans": spans}


def test_the_first_turns_trace_is_the_one_that_started_first():
    assert earliest([trace("b", 20), trace("a", 10), trace("c", 30)])["traceID"] == "a"


def test_a_flush_is_shown_when_it_links_to_one_of_the_turns():
    flushes = [trace("f1", 0, ("other",)), trace("f2", 0, ("t2",))]
    assert [t["traceID"] for t in linked_to(flushes, {"t1", "t2"})] == ["f2"]
