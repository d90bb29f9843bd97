"""Traces in a real Jaeger (built from the module proxy by infra/jaeger/jaeger.sh), through the real
broker and worker: a turn produced with the SDK is one trace holding a span of every stage it passes
before its flush, each the child of the one before; the flush starts a trace of its own, linked to
its turns' traces, holding the extraction and the indexing; a malformed message's trace ends in the
dead-letter span with error status and the reason. Nothing here passes without Jaeger's query API
returning those spans."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from memstream.bench import clusters
from memstream.config import Settings
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.schemas.topics import Topic
from memstream.streams import runtime
from memstream.streams.kafka_options import client_options
from memstream.streams.lag import partitions_of
from tests.factories import turn

from .test_observability import prometheus

pytestmark = pytest.mark.integration

JAEGER = runtime.INFRA / "jaeger" / "jaeger.sh"
WAIT_S = 60.0


class Jaeger:
    def __init__(self, data: Path, otlp_port: int, query_port: int):
        self.env = {
            **os.environ,
            "MEMSTREAM_JAEGER_DATA": str(data),
            "MEMSTREAM_JAEGER_OTLP_PORT": str(otlp_port),
            "MEMSTREAM_JAEGER_QUERY_PORT": str(query_port),
        }
        self.otlp = f"http://127.0.0.1:{otlp_port}"
        self.query = f"http://127.0.0.1:{query_port}"

    def run(self, verb: str) -> None:
        done = subprocess.run(["bash", str(JAEGER), verb], env=self.env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"jaeger.sh {verb} failed ({done.returncode}):\n{done.stderr[-3000:]}")

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.query}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())["data"]

    def traces(self, service: str, operation: str, tags: dict[str, str]) -> list[dict]:
        return self.get(
            "/api/traces", service=service, operation=operation, tags=json.dumps(tags), limit="100", lookback="1h"
        )

    def trace(self, trace_id: str) -> dict:
        return self.get(f"/api/traces/{trace_id}")[0]


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory) -> Iterator[Jaeger]:
    base = clusters.free_base_port(24318, (-1, 0, 12367, 12368, 12369), step=10)
    backend = Jaeger(tmp_path_factory.mktemp("jaeger"), base, base + 12368)
    backend.run("start")
    try:
        yield backend
    finally:
        backend.run("stop")


@pytest.fixture
def traced(jaeger: Jaeger, monkeypatch) -> dict[str, str]:
    """The standard variables that turn tracing on, for this process's SDK and the workers."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp, "OTEL_BSP_SCHEDULE_DELAY": "200"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    return env


@pytest.fixture
def traced_pipeline(shared_pipeline, traced, local_llm):
    """The module's traced deployment, for the tests that only write and read (each its own tenant)."""
    return shared_pipeline(**traced, **local_llm, MEMSTREAM_EXTRACT_MODE="extractive")


def until(found: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        got = found()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"Jaeger never returned {what} within {WAIT_S:.0f}s")
        time.sleep(0.5)


def by_name(trace: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for span in trace["spans"]:
        out.setdefault(span["operationName"], []).append(span)
    return out


def parent_of(span: dict) -> str | None:
    return next((r["spanID"] for r in span["references"] if r["refType"] == "CHILD_OF"), None)


def connected(trace: dict | None) -> dict | None:
    """The trace when every span's parent is in it, else None."""
    if not trace:
        return None
    ids = {s["spanID"] for s in trace["spans"]}
    return trace if all(parent_of(s) in ids for s in trace["spans"] if parent_of(s)) else None


def tag(span: dict, key: str) -> Any:
    return next((t["value"] for t in span["tags"] if t["key"] == key), None)


def test_a_turn_is_one_trace_through_the_stages_and_its_flush_links_back(traced_pipeline, jaeger):
    tenant = f"trace{uuid.uuid4().hex[:6]}"
    turns = [
        turn(f"D1:{i}", text, tenant=tenant, conversation="c1", seq=i, minutes=i)
        for i, text in enumerate(
            ["I adopted a grey cat named Miso last week.", "Miso sleeps on the piano every afternoon."], start=1
        )
    ]
    pipe = traced_pipeline
    pipe.produce(turns)
    pipe.drain()

    write_stages = ["memstream.remember", "memstream.compress", "memstream.segment", "memstream.stm"]

    def turn_traces() -> list[dict]:
        found = jaeger.traces("memstream-client", "memstream.remember", {"memstream.tenant_id": tenant})
        full = [jaeger.trace(t["traceID"]) for t in found]
        return full if len(full) == len(turns) and all(set(write_stages) <= set(by_name(t)) for t in full) else []

    traces = until(turn_traces, f"a trace per turn holding {write_stages}")
    for trace in traces:
        spans = by_name(trace)
        # Each stage's span is the child of the one before: the context crossed every topic.
        for before, after in zip(write_stages, write_stages[1:]):
            assert parent_of(spans[after][0]) == spans[before][0]["spanID"], (before, after)
        compress = spans["memstream.compress"][0]
        assert tag(compress, "memstream.tenant_id") == tenant
        assert tag(compress, "messaging.destination.name") == pipe.settings.topic(Topic.TURNS)
        assert not any("Miso" in str(t["value"]) for s in trace["spans"] for t in s["tags"])  # no text
    turn_trace_ids = {t["traceID"] for t in traces}

    def flush_traces() -> list[dict]:
        found = [jaeger.trace(t["traceID"]) for t in jaeger.traces("memstream-worker", "memstream.stm.flush", {})]
        mine = [
            t
            for t in found
            if any(r["traceID"] in turn_trace_ids for s in t["spans"] for r in s["references"])
            and {"memstream.extract", "memstream.index"} <= set(by_name(t))
        ]
        return mine

    [flush_trace] = until(flush_traces, "the flush's trace, linked to the turns, with extract and index")
    spans = by_name(flush_trace)
    flush = spans["memstream.stm.flush"][0]
    linked = {r["traceID"] for r in flush["references"] if r["traceID"] != flush_trace["traceID"]}
    assert linked == turn_trace_ids  # from the card's flush to each of its turns
    assert parent_of(spans["memstream.extract"][0]) == flush["spanID"]
    assert parent_of(spans["memstream.index"][0]) == spans["memstream.extract"][0]["spanID"]

    # A consolidation run joins the writes whose cards it decides: a trace of its own, linked to theirs.
    pipe.consolidate(tenant=tenant, conversation="c1")

    def run_traces() -> list[dict]:
        found = jaeger.traces("memstream-worker", "memstream.consolidate.run", {})
        return [
            t for t in found if any(r["traceID"] == flush_trace["traceID"] for s in t["spans"] for r in s["references"])
        ]

    [run] = until(run_traces, "the consolidation run's trace, linked to the flush's")
    assert by_name(jaeger.trace(run["traceID"]))["memstream.consolidate.run"]


def test_a_malformed_message_s_trace_ends_in_the_dead_letter_span_with_its_reason(traced_pipeline, jaeger):
    tenant = f"dlq{uuid.uuid4().hex[:6]}"
    pipe = traced_pipeline
    pipe.produce_raw(Topic.TURNS, f"{tenant}/c1".encode(), b"{not json")

    def dead_letter_trace() -> dict | None:
        found = jaeger.traces("memstream-client", "memstream.send_raw", {"memstream.tenant_id": tenant})
        trace = jaeger.trace(found[0]["traceID"]) if found else None
        return trace if trace and "memstream.dlq" in by_name(trace) else None

    spans = by_name(until(dead_letter_trace, "the malformed message's trace with a memstream.dlq span"))
    compress, dlq = spans["memstream.compress"][0], spans["memstream.dlq"][0]
    assert parent_of(dlq) == compress["spanID"]
    for span in (compress, dlq):
        assert tag(span, "otel.status_code") == "ERROR"
        assert "JSON" in tag(span, "memstream.error.reason")


def test_a_question_through_the_gateway_is_one_trace_whose_id_the_gateway_returns(traced_pipeline, traced, jaeger):
    tenant = f"ask{uuid.uuid4().hex[:6]}"
    sample = load_locomo(demo_conversation_path())[0]
    pipe = traced_pipeline
    pipe.produce(list(locomo_turns(sample, tenant_id=tenant, max_sessions=1)))
    pipe.drain()
    gateway = pipe.start_gateway({tenant: "k-trace"}, {**traced, "OTEL_SERVICE_NAME": "memstream-gateway"})
    try:
        with httpx.Client(base_url=gateway.url, timeout=120, headers={"Authorization": "Bearer k-trace"}) as http:
            response = http.post(
                "/v1/ask",
                json={"question": "Who teaches Nora's pottery class?", "conversation_id": sample.sample_id},
            )
    finally:  # the deployment is the module's; its gateway was this test's
        gateway.stop()
        pipe.gateways.remove(gateway)
    assert response.status_code == 200, response.text
    trace_id = response.headers.get("X-Trace-Id")
    assert trace_id and len(trace_id) == 32

    steps = ["memstream.query.plan", "memstream.query.embed", "memstream.query.hybrid", "memstream.query.rerank"]

    def question_trace() -> dict | None:
        try:
            trace = jaeger.trace(trace_id)
        except urllib.error.HTTPError:  # not stored yet
            return None
        names = set(by_name(trace))
        wanted = {"memstream.ask", "memstream.query", "memstream.query.answer", "memstream.reply", *steps}
        return trace if wanted <= names else None

    trace = until(question_trace, f"the question's trace {trace_id} with its steps")
    spans = by_name(trace)
    query = spans["memstream.query"][0]
    assert parent_of(query) == spans["memstream.ask"][0]["spanID"]
    for step in [*steps, "memstream.query.answer"]:
        assert parent_of(spans[step][0]) == query["spanID"], step
    assert tag(spans["memstream.query.hybrid"][0], "memstream.items_added") > 0
    assert tag(spans["memstream.query.answer"][0], "memstream.answer_mode") == "llm"
    # The answer's LLM call, in OpenTelemetry's GenAI conventions, under the answer step.
    chats = [s for s in trace["spans"] if tag(s, "gen_ai.operation.name") == "chat"]
    answer_calls = [s for s in chats if parent_of(s) == spans["memstream.query.answer"][0]["spanID"]]
    assert answer_calls, [s["operationName"] for s in trace["spans"]]
    call = answer_calls[0]
    assert tag(call, "gen_ai.request.model") and tag(call, "gen_ai.usage.input_tokens") > 0
    assert tag(call, "gen_ai.usage.output_tokens") > 0
    # The store calls the query made, each a span.
    assert any(tag(s, "db.system.name") == "qdrant" for s in trace["spans"])
    # And the reply went back on the same trace, from its own span.
    assert parent_of(spans["memstream.reply"][0]) == query["spanID"]
    assert trace["processes"][query["processID"]]["serviceName"] == "memstream-worker"
    assert any(p["serviceName"] == "memstream-gateway" for p in trace["processes"].values())


def test_a_latency_point_in_prometheus_carries_the_trace_of_its_question(traced_pipeline, jaeger, tmp_path):
    """Metrics to traces: the worker's query latency histogram has an exemplar with the trace id
    (OpenMetrics), Prometheus (exemplar storage on) keeps it, and Jaeger has that trace."""
    tenant = f"ex{uuid.uuid4().hex[:6]}"
    sample = load_locomo(demo_conversation_path())[0]
    pipe = traced_pipeline
    pipe.produce(list(locomo_turns(sample, tenant_id=tenant, max_sessions=1)))
    pipe.drain()
    with prometheus(tmp_path / "prometheus", pipe.workers[0].metrics_port) as url:
        reply = pipe.ask(
            "Who teaches Nora's pottery class?", tenant=tenant, conversation=sample.sample_id, answer=False
        )
        assert reply.trace_id

        def exemplar_trace_ids() -> set[str]:
            query = urllib.parse.urlencode(
                {"query": "memstream_query_seconds_bucket", "start": str(time.time() - 600), "end": str(time.time())}
            )
            with urllib.request.urlopen(f"{url}/api/v1/query_exemplars?{query}", timeout=10) as response:
                data = json.loads(response.read())["data"]
            return {e["labels"].get("trace_id") for series in data for e in series["exemplars"]}

        assert reply.trace_id in until(
            lambda: (ids := exemplar_trace_ids()) and reply.trace_id in ids and ids, "the question's exemplar"
        )
    names = set(by_name(until(lambda: trace_or_none(jaeger, reply.trace_id), "the exemplar's trace")))
    assert {"memstream.ask", "memstream.query", "memstream.reply"} <= names


def trace_or_none(jaeger: Jaeger, trace_id: str) -> dict | None:
    try:
        return jaeger.trace(trace_id)
    except urllib.error.HTTPError:  # not stored yet
        return None


def rewind_group(settings: Settings, group: str, topic: str, timeout_s: float = 60.0) -> None:
    """Set ``group``'s committed offsets on ``topic`` back to 0 once the group is empty (its killed
    member's session has expired): what a kill -9 before the commit leaves, for the messages since."""

    async def go() -> None:
        partitions = (await partitions_of(settings, topic))[topic]
        consumer = AIOKafkaConsumer(**client_options(settings), group_id=group, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    await consumer.commit({tp: 0 for tp in tps})
                    return
                except KafkaError:  # the group still has its killed member
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(1.0)
        finally:
            await consumer.stop()

    asyncio.run(go())


def test_a_message_redelivered_after_a_kill_shows_as_a_retry_in_its_trace(make_pipeline, traced, jaeger):
    tenant = f"rd{uuid.uuid4().hex[:6]}"
    pipe = make_pipeline(**traced, MEMSTREAM_EXTRACT_MODE="extractive")
    worker = pipe.start_worker()
    pipe.produce([turn("D1:1", "I adopted a grey cat named Miso last week.", tenant=tenant, conversation="c1")])

    def turn_trace(compress_spans: int) -> dict | None:
        found = jaeger.traces("memstream-client", "memstream.remember", {"memstream.tenant_id": tenant})
        trace = jaeger.trace(found[0]["traceID"]) if found else None
        return trace if trace and len(by_name(trace).get("memstream.compress", [])) >= compress_spans else None

    first = until(lambda: turn_trace(1), "the turn's trace")
    pipe.drain(flush=False)
    # A stage's inner spans (embed, qdrant) end and may be exported before the stage span itself: wait for
    # the whole first handling to be in Jaeger before the kill, and for the whole retry before reading it.
    until(lambda: connected(turn_trace(1)), "the first handling's spans, each with its parent")
    worker.kill()  # kill -9
    pipe.workers = []
    rewind_group(pipe.settings, pipe.group, pipe.settings.topic(Topic.TURNS))
    pipe.start_worker("after-kill")
    trace = until(lambda: connected(turn_trace(2)), "a second compress span in the turn's trace, every parent in it")
    spans = by_name(trace)
    assert trace["traceID"] == first["traceID"]
    remember = spans["memstream.remember"][0]
    first_try, retry = sorted(spans["memstream.compress"], key=lambda s: s["startTime"])
    assert parent_of(first_try) == parent_of(retry) == remember["spanID"]  # both handlings, same parent
    assert tag(first_try, "messaging.kafka.offset") == tag(retry, "messaging.kafka.offset")  # the same message
