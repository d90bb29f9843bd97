"""The ways in, end to end over the real broker and a real worker: the Python SDK (sync), the HTTP
gateway (JSON API, Slack webhook, keys, limits, 503 without a broker) and the MCP server over
streamable HTTP and over stdio."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any, Iterator

import httpx
import orjson
import pytest

from memstream.bench.deployment import GatewayProcess, free_port
from memstream.client import BrokerUnavailable, MemoryClient
from memstream.config import Settings
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.gateway.auth import slack_signature

from .conftest import Pipeline

pytestmark = pytest.mark.integration

KEYS = {"T0ACME": "key-of-acme", "T0GLOBEX": "key-of-globex"}
SLACK_SECRET = "slack-signing-secret-for-tests"
CHANNEL = "C0GENERAL"
SLACK_MESSAGES = [
    ("1714560000.000100", "U01NORA", "I adopted a three-legged cat called Biscuit from the shelter on Elm Street."),
    ("1714560060.000200", "U02TOMAS", "Lovely! Does Biscuit get along with your parrot?"),
    ("1714560120.000300", "U01NORA", "Mostly. The parrot, Captain, taught himself to meow within a week."),
]


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def slack_envelope(ts: str, user: str, text: str) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T0ACME",
        "api_app_id": "A0MEMSTREAM",
        "event_id": f"Ev{ts.replace('.', '')}",
        "event_time": int(float(ts)),
        "event": {
            "type": "message",
            "channel": CHANNEL,
            "channel_type": "channel",
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
        },
    }


def signed(body: bytes, secret: str = SLACK_SECRET, at: float | None = None) -> dict[str, str]:
    timestamp = str(int(at if at is not None else time.time()))
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": slack_signature(secret, timestamp, body),
        "Content-Type": "application/json",
    }


GATEWAY_ENV = {
    "MEMSTREAM_GATEWAY_SLACK_SIGNING_SECRET": SLACK_SECRET,
    "MEMSTREAM_GATEWAY_MAX_REQUEST_BYTES": str(64 * 1024),
}


@pytest.fixture(scope="module")
def stack(kafka: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pipeline, GatewayProcess]]:
    pipe = Pipeline(kafka, tmp_path_factory.mktemp("gateway"), {"MEMSTREAM_EXTRACT_MODE": "extractive"})
    try:
        pipe.start_worker()
        yield pipe, pipe.start_gateway(KEYS, GATEWAY_ENV)
    finally:
        pipe.stop_workers()


def test_the_sync_sdk_remembers_a_conversation_and_answers_only_its_tenant(stack):
    pipe, _ = stack
    sample = load_locomo(demo_conversation_path())[0]
    turns = list(locomo_turns(sample, tenant_id="T0ACME", max_sessions=1))
    with MemoryClient(pipe.settings) as memory:
        assert memory.remember(turns) == len(turns)
        pipe.drain()
        reply = memory.ask(
            "Who teaches Nora's pottery class?", tenant_id="T0ACME", conversation_id=sample.sample_id, answer=False
        )
        assert "D1:3" in {t for e in reply.evidence for t in e.turn_ids}
        other = memory.ask(
            "Who teaches Nora's pottery class?", tenant_id="T0GLOBEX", conversation_id=sample.sample_id, answer=False
        )
        assert other.ok and other.evidence == []


def test_the_sdk_says_clearly_when_the_broker_cannot_be_reached(kafka):
    dead = kafka.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{free_port()}"})
    with pytest.raises(BrokerUnavailable, match="cannot reach Kafka at 127.0.0.1"):
        with MemoryClient(dead):
            pass


def test_a_slack_webhook_becomes_memory_that_http_and_mcp_can_ask(stack):
    pipe, gateway = stack
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        challenge = orjson.dumps({"type": "url_verification", "challenge": "c-123", "token": "x"})
        assert http.post("/v1/webhooks/slack", content=challenge, headers=signed(challenge)).json() == {
            "challenge": "c-123"
        }
        first = orjson.dumps(slack_envelope(*SLACK_MESSAGES[0]))
        assert http.post("/v1/webhooks/slack", content=first, headers=signed(first, "wrong")).status_code == 401
        stale = signed(first, at=time.time() - 3600)
        assert http.post("/v1/webhooks/slack", content=first, headers=stale).status_code == 401
        for message in SLACK_MESSAGES:
            body = orjson.dumps(slack_envelope(*message))
            response = http.post("/v1/webhooks/slack", content=body, headers=signed(body))
            assert response.status_code == 200 and response.json()["turns"] == 1, response.text
        # Slack redelivers when it does not hear back in time: the same event again changes nothing.
        assert http.post("/v1/webhooks/slack", content=first, headers=signed(first)).status_code == 200
        pipe.drain()

        question = {"conversation_id": CHANNEL, "question": "What is the name of the cat?", "answer": False}
        reply = http.post("/v1/ask", json=question, headers=auth("T0ACME"))
        assert reply.status_code == 200, reply.text
        assert reply.json()["tenant_id"] == "T0ACME"
        assert SLACK_MESSAGES[0][0] in {t for e in reply.json()["evidence"] for t in e["turn_ids"]}
        assert http.post("/v1/ask", json=question, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert http.post("/v1/ask", json=question).status_code == 401
        assert http.post("/v1/ask", json=question, headers=auth("T0GLOBEX")).json()["evidence"] == []

    mcp = asyncio.run(mcp_over_http(gateway.url, "What is the name of the cat?"))
    assert mcp["tools"] >= {"remember", "recall", "forget"}
    assert SLACK_MESSAGES[0][0] in {t for e in mcp["evidence"] for t in e["turn_ids"]}
    assert mcp["unauthorized_status"] == 401


async def mcp_over_http(url: str, question: str) -> dict[str, Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=auth("T0ACME"), timeout=60) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("recall", {"question": question, "conversation_id": CHANNEL})
    async with httpx2.AsyncClient(timeout=10) as anonymous:
        refused = await anonymous.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert not result.is_error, result
    return {
        "tools": tools,
        "evidence": result.structured_content["evidence"],
        "unauthorized_status": refused.status_code,
    }


def test_the_mcp_stdio_server_recalls_for_its_tenant(stack):
    pipe, _ = stack
    question = "What did the parrot teach himself?"

    async def go(tenant: str) -> list[dict[str, Any]]:
        from mcp import Client, StdioServerParameters

        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "memstream.streams.cli", "gateway", "mcp", "--tenant", tenant],
            env={**os.environ, **pipe.env},
        )
        async with Client(params, read_timeout_seconds=60) as client:
            result = await client.call_tool("recall", {"question": question, "conversation_id": CHANNEL})
        assert not result.is_error, result
        return result.structured_content["evidence"]

    async def both() -> list[list[dict[str, Any]]]:  # two servers side by side: each mostly starts Python
        return list(await asyncio.gather(go("T0ACME"), go("T0GLOBEX")))

    acme, globex = asyncio.run(both())
    assert SLACK_MESSAGES[2][0] in {t for e in acme for t in e["turn_ids"]}
    assert globex == []


def test_the_http_api_refuses_bad_input_with_a_clear_status(stack):
    _, gateway = stack
    good = {
        "conversation_id": "c-http",
        "session_id": "S1",
        "turn_id": "m1",
        "speaker": "Ana",
        "text": "I keep bees on the roof of the library.",
        "event_time": "2024-05-01T10:00:00Z",
    }
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        ok = http.post("/v1/turns", json={"turns": [good]}, headers=auth("T0ACME"))
        assert ok.status_code == 202 and ok.json() == {"accepted": 1, "tenant_id": "T0ACME"}
        other = http.post("/v1/turns", json={"turns": [{**good, "tenant_id": "T0GLOBEX"}]}, headers=auth("T0ACME"))
        assert other.status_code == 403 and "T0GLOBEX" in other.json()["detail"]
        bad = http.post("/v1/turns", json={"turns": [{**good, "event_time": "yesterday"}]}, headers=auth("T0ACME"))
        assert bad.status_code == 422 and "turn 0" in bad.json()["detail"] and "event_time" in bad.json()["detail"]
        huge = {"turns": [{**good, "text": "x" * (100 * 1024)}]}
        assert http.post("/v1/turns", json=huge, headers=auth("T0ACME")).status_code == 413
        assert http.get("/healthz").json() == {"status": "ok", "broker": "up"}
        metrics = http.get("/metrics").text
        assert 'memstream_gateway_requests_total{route="/v1/turns",status="403"} 1.0' in metrics


def test_without_a_broker_the_gateway_answers_503_with_retry_after(stack):
    pipe, _ = stack
    gateway = pipe.start_gateway(KEYS, {**GATEWAY_ENV, "MEMSTREAM_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"})
    try:
        with httpx.Client(base_url=gateway.url, timeout=60) as http:
            turn = {
                "conversation_id": "c1",
                "session_id": "S1",
                "turn_id": "m1",
                "speaker": "Ana",
                "text": "hello",
                "event_time": "2024-05-01T10:00:00Z",
            }
            response = http.post("/v1/turns", json={"turns": [turn]}, headers=auth("T0ACME"))
            assert response.status_code == 503 and response.headers["retry-after"] == "5"
            assert "broker is unavailable" in response.json()["detail"]
            assert http.get("/healthz").status_code == 503
    finally:
        gateway.stop()


def test_a_flooding_tenant_gets_429_and_nothing_of_a_refused_batch_while_others_go_on(stack):
    pipe, _ = stack
    limits = {"T0GLOBEX": {"turns_per_s": 2, "questions_per_s": 0.2, "burst_s": 5}}
    gateway = pipe.start_gateway(KEYS, {**GATEWAY_ENV, "MEMSTREAM_GATEWAY_RATE_LIMITS": orjson.dumps(limits).decode()})
    conversation = f"c-flood-{time.time_ns()}"

    def batch(prefix: str, n: int) -> dict[str, Any]:
        return {
            "turns": [
                {
                    "conversation_id": conversation,
                    "session_id": "S1",
                    "turn_id": f"{prefix}{i}",
                    "speaker": "Flo",
                    "text": f"Flood line {prefix}{i}.",
                    "event_time": "2024-05-01T10:00:00Z",
                }
                for i in range(n)
            ]
        }

    try:
        with httpx.Client(base_url=gateway.url, timeout=60) as http:
            assert http.post("/v1/turns", json=batch("a", 10), headers=auth("T0GLOBEX")).status_code == 202
            refused = http.post("/v1/turns", json=batch("r", 6), headers=auth("T0GLOBEX"))
            assert refused.status_code == 429 and refused.json()["limit"] == "turns"
            wait_s = int(refused.headers["retry-after"])
            assert 1 <= wait_s <= 3  # 6 turns at 2/s
            # Another tenant is not held by globex's flood.
            assert http.post("/v1/turns", json=batch("g", 20), headers=auth("T0ACME")).status_code == 202
            question = {"conversation_id": conversation, "question": "What flooded?", "answer": False}
            assert http.post("/v1/ask", json=question, headers=auth("T0GLOBEX")).status_code == 200
            asked = http.post("/v1/ask", json=question, headers=auth("T0GLOBEX"))
            assert asked.status_code == 429 and int(asked.headers["retry-after"]) >= 4
            time.sleep(wait_s)
            assert http.post("/v1/turns", json=batch("r", 6), headers=auth("T0GLOBEX")).status_code == 202
            metrics = http.get("/metrics").text
        # The refused batch was written only when sent again: once, after its wait.
        ids = [
            orjson.loads(value)["turn_id"]
            for key, value in pipe.read_topic("turns")
            if key == f"T0GLOBEX/{conversation}".encode()
        ]
        assert sorted(ids) == sorted([f"a{i}" for i in range(10)] + [f"r{i}" for i in range(6)])
        assert 'memstream_gateway_rate_limited_total{limit="turns",route="/v1/turns"} 1.0' in metrics
        assert 'memstream_gateway_rate_limited_total{limit="questions",route="/v1/ask"} 1.0' in metrics
    finally:
        gateway.stop()


def test_the_inspectors_reads_questions_and_forgets_count_against_the_tenants_limits(stack):
    pipe, _ = stack
    limits = {"T0GLOBEX": {"questions_per_s": 0.2, "reads_per_s": 0.5, "burst_s": 2}}  # one of each at once
    gateway = pipe.start_gateway(KEYS, {**GATEWAY_ENV, "MEMSTREAM_GATEWAY_RATE_LIMITS": orjson.dumps(limits).decode()})
    page = f"/ui/api/conversations/c-inspect-{time.time_ns()}"
    try:
        with httpx.Client(base_url=gateway.url, timeout=60) as http:
            csrf = {"x-csrf-token": http.post("/ui/login", json={"key": KEYS["T0GLOBEX"]}).json()["csrf"]}
            assert http.get("/ui/api/conversations").status_code == 200
            read = http.get("/ui/api/llm-usage")
            assert read.status_code == 429 and read.json()["limit"] == "reads"
            assert 1 <= int(read.headers["retry-after"]) <= 2
            question = {"question": "What was said?", "answer": False}
            assert http.post(f"{page}/ask", json=question).status_code == 403  # no CSRF token
            assert http.post(f"{page}/ask", json=question, headers=csrf).status_code == 200  # the 403 took nothing
            asked = http.post(f"{page}/ask", json=question, headers=csrf)
            assert asked.status_code == 429 and asked.json()["limit"] == "questions"
            forgot = http.post(f"{page}/forget", json={"speaker": "Flo"}, headers=csrf)
            assert forgot.status_code == 429 and int(forgot.headers["retry-after"]) >= 4
            # acme has no limits: its page reads on while globex waits.
            http.cookies.clear()
            http.post("/ui/login", json={"key": KEYS["T0ACME"]})
            assert all(http.get("/ui/api/conversations").status_code == 200 for _ in range(5))
            metrics = http.get("/metrics").text
        assert 'memstream_gateway_rate_limited_total{limit="reads",route="/ui"} 1.0' in metrics
        assert 'memstream_gateway_rate_limited_total{limit="questions",route="/ui"} 2.0' in metrics
    finally:
        gateway.stop()


def test_a_history_import_goes_through_the_bulk_lane_resumes_after_a_turn_and_shows_its_progress(stack):
    from memstream.client.history import import_progress

    pipe, gateway = stack
    conversation = f"c-import-{time.time_ns()}"
    lines = [
        {
            "conversation_id": conversation,
            "session_id": "S1",
            "turn_id": f"h{i}",
            "speaker": "Ivo",
            "text": f"Old line {i} about the lighthouse.",
            "event_time": f"2019-05-0{9 - i}T10:00:00Z",  # given newest first: the import reorders
        }
        for i in range(4)
    ]
    body = b"\n".join(orjson.dumps(line) for line in lines)
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        first = http.post("/v1/import", content=body, headers=auth("T0ACME"))
        assert first.status_code == 202, first.text
        assert first.json() == {"accepted": 4, "tenant_id": "T0ACME", "last": f"{conversation}/h0"}
        # Resumed after the second turn (in event-time order: h3, h2, h1, h0): two are sent again.
        key = auth("T0ACME")
        resumed = http.post("/v1/import", params={"after": f"{conversation}/h2"}, content=body, headers=key)
        assert resumed.status_code == 202 and resumed.json()["accepted"] == 2
        unknown = http.post(
            "/v1/import", params={"after": f"{conversation}/nope"}, content=body, headers=auth("T0ACME")
        )
        assert unknown.status_code == 422 and "names no turn" in unknown.json()["detail"]
    sent = [orjson.loads(v) for k, v in pipe.read_topic("bulk.turns") if k == f"T0ACME/{conversation}".encode()]
    assert [(t["turn_id"], t["metadata"]["seq"]) for t in sent] == [
        ("h3", -4),
        ("h2", -3),
        ("h1", -2),
        ("h0", -1),
        ("h1", -2),
        ("h0", -1),
    ]
    assert pipe.read_topic("turns") == [] or all(
        k != f"T0ACME/{conversation}".encode() for k, _ in pipe.read_topic("turns")
    )
    # The drain's flush names the conversations on memory.turns; imported ones are on memory.bulk.turns,
    # so this one is flushed by name once its turns are in (it does not wait for an idle timer).
    pipe.drain(flush=False)
    with MemoryClient(pipe.settings) as memory:
        assert memory.flush([("T0ACME", conversation)]) == 1
        pipe.drain(flush=False)
        page = memory.read("timeline", tenant_id="T0ACME", conversation_id=conversation)
    assert [(r["turn_id"], r["seq"]) for r in page.records if r["collection"] == "turns"] == [
        ("h3", -4),
        ("h2", -3),
        ("h1", -2),
        ("h0", -1),
    ], "stored once each, in the order they happened"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        progress = asyncio.run(import_progress(pipe.settings, "T0ACME"))
        if progress["sent"] >= 4 and not progress["remaining"]:
            break
        time.sleep(1)
    assert progress["sent"] >= 4 and progress["remaining"] == 0, progress
