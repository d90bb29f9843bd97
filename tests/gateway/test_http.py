"""The gateway's refusals, in process (FastAPI's test client): none of these requests reaches the
broker, so none is needed. The accepted paths run against the real stack in
tests/integration/test_gateway.py."""

from __future__ import annotations

import time

import orjson
import pytest
from fastapi.testclient import TestClient

from memstream.config import Settings
from memstream.gateway.auth import hash_key, slack_signature
from memstream.gateway.http import create_app
from tests import factories

TURN = {
    "conversation_id": "c1",
    "session_id": "S1",
    "turn_id": "m1",
    "speaker": "Ana",
    "text": "I keep bees.",
    "event_time": "2024-05-01T10:00:00Z",
}


@pytest.fixture
def http() -> TestClient:
    settings = Settings(
        gateway_api_keys={"acme": [hash_key("k-acme")]},
        gateway_max_request_bytes=4096,
        gateway_slack_signing_secret="s3cret",
        kafka_bootstrap="127.0.0.1:1",  # nothing here needs it
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_requests_without_a_valid_key_get_401(http):
    assert http.post("/v1/turns", json={"turns": [TURN]}).status_code == 401
    wrong = http.post("/v1/ask", json={"conversation_id": "c1", "question": "q"}, headers={"Authorization": "Bearer x"})
    assert wrong.status_code == 401 and "API key" in wrong.json()["detail"]
    assert http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code == 401


def test_without_configured_keys_every_keyed_request_is_refused():
    with TestClient(create_app(Settings(kafka_bootstrap="127.0.0.1:1"), mcp=False)) as client:
        refused = client.post("/v1/turns", json={"turns": [TURN]}, headers={"Authorization": "Bearer anything"})
    assert refused.status_code == 401 and "MEMSTREAM_GATEWAY_API_KEYS" in refused.json()["detail"]


def test_a_turn_of_another_tenant_is_403_and_an_invalid_one_422(http):
    key = {"Authorization": "Bearer k-acme"}
    other = http.post("/v1/turns", json={"turns": [TURN, {**TURN, "tenant_id": "globex"}]}, headers=key)
    assert other.status_code == 403 and "turn 1 names tenant 'globex'" in other.json()["detail"]
    bad = http.post("/v1/turns", json={"turns": [{**TURN, "turn_id": "has space"}]}, headers=key)
    assert bad.status_code == 422 and "turn 0" in bad.json()["detail"] and "turn_id" in bad.json()["detail"]
    assert http.post("/v1/turns", json={"turns": []}, headers=key).status_code == 422
    assert http.post("/v1/ask", json={"question": "q"}, headers=key).status_code == 422  # no conversation


def test_an_invisible_speaker_is_a_422_naming_the_rule(http):
    key = {"Authorization": "Bearer k-acme"}
    refused = http.post("/v1/turns", json={"turns": [{**TURN, "speaker": "\u200b\u202e "}]}, headers=key)
    assert refused.status_code == 422 and "speaker has no visible character" in refused.json()["detail"]


def test_an_answer_shows_its_bidi_controls_isolated(http):
    rlo, fsi, pdf, pdi = "\u202e", "\u2068", "\u202c", "\u2069"
    reply = factories.reply(factories.evidence("Ana: " + rlo + "cat"), answer="the " + rlo + "cat")

    async def asked(_use):  # the SDK's ask, answered at once
        return reply

    http.app.state.shared.call = asked
    got = http.post(
        "/v1/ask", json={"conversation_id": "c1", "question": "q"}, headers={"Authorization": "Bearer k-acme"}
    )
    assert got.status_code == 200
    assert got.json()["answer"] == fsi + "the " + rlo + "cat" + pdf + pdi
    assert got.json()["evidence"][0]["text"] == fsi + "Ana: " + rlo + "cat" + pdf + pdi


def test_a_body_over_the_limit_is_413_before_it_is_read(http):
    big = {"turns": [{**TURN, "text": "x" * 5000}]}
    response = http.post("/v1/turns", json=big, headers={"Authorization": "Bearer k-acme"})
    assert response.status_code == 413 and "MEMSTREAM_GATEWAY_MAX_REQUEST_BYTES" in response.json()["detail"]


def test_the_slack_webhook_checks_the_signature_and_answers_the_challenge(http):
    body = orjson.dumps({"type": "url_verification", "challenge": "abc"})
    now = str(int(time.time()))
    good = {"X-Slack-Request-Timestamp": now, "X-Slack-Signature": slack_signature("s3cret", now, body)}
    assert http.post("/v1/webhooks/slack", content=body, headers=good).json() == {"challenge": "abc"}
    forged = {**good, "X-Slack-Signature": slack_signature("guess", now, body)}
    refused = http.post("/v1/webhooks/slack", content=body, headers=forged)
    assert refused.status_code == 401 and "bad signature" in refused.json()["detail"]
    assert http.post("/v1/webhooks/slack", content=body).status_code == 401


def test_metrics_count_requests_by_route_and_status(http):
    http.post("/v1/turns", json={"turns": [TURN]})
    text = http.get("/metrics").text
    assert 'memstream_gateway_requests_total{route="/v1/turns",status="401"} 1.0' in text


def test_unknown_paths_share_one_metrics_label(http):
    for path in ("/v1/nope", "/wp-admin", "/v1/turns/../x"):
        http.get(path)
    text = http.get("/metrics").text
    assert 'route="other",status="404"' in text and "/wp-admin" not in text and "/v1/nope" not in text


def test_over_its_limit_a_tenant_gets_429_with_retry_after_before_anything_is_sent():
    settings = Settings(
        gateway_api_keys={"acme": [hash_key("k-acme")], "globex": [hash_key("k-globex")]},
        gateway_rate_limits={"acme": {"turns_per_s": 1, "questions_per_s": 0.1, "burst_s": 2}},
        kafka_bootstrap="127.0.0.1:1",
        broker_wait_s=0,
    )
    acme, globex = {"Authorization": "Bearer k-acme"}, {"Authorization": "Bearer k-globex"}
    turns = [{**TURN, "turn_id": f"m{n}"} for n in range(3)]
    with TestClient(create_app(settings, mcp=False)) as client:
        too_many = client.post("/v1/turns", json={"turns": turns}, headers=acme)  # 3 > a full bucket of 2
        assert too_many.status_code == 413 and "split it" in too_many.json()["detail"]
        assert client.post("/v1/turns", json={"turns": turns[:2]}, headers=acme).status_code == 503  # admitted
        refused = client.post("/v1/turns", json={"turns": turns[:1]}, headers=acme)
        assert refused.status_code == 429 and refused.json()["limit"] == "turns"
        assert int(refused.headers["Retry-After"]) >= 1
        assert client.post("/v1/turns", json={"turns": turns}, headers=globex).status_code == 503  # unlimited
        assert client.post("/v1/ask", json={"conversation_id": "c1", "question": "q"}, headers=acme).status_code == 503
        asked = client.post("/v1/ask", json={"conversation_id": "c1", "question": "q"}, headers=acme)
        assert asked.status_code == 429 and int(asked.headers["Retry-After"]) >= 9
        metrics = client.get("/metrics").text
    assert 'memstream_gateway_rate_limited_total{limit="turns",route="/v1/turns"} 2.0' in metrics
    assert 'memstream_gateway_rate_limited_total{limit="questions",route="/v1/ask"} 1.0' in metrics


def test_an_import_that_is_not_ndjson_turns_is_422_naming_the_line(http):
    key = {"Authorization": "Bearer k-acme"}
    empty = http.post("/v1/import", content=b"\n\n", headers=key)
    assert empty.status_code == 422 and "at least one turn" in empty.json()["detail"]
    broken = http.post("/v1/import", content=orjson.dumps(TURN) + b"\n{not json", headers=key)
    assert broken.status_code == 422 and "line 2 is not JSON" in broken.json()["detail"]
    listed = http.post("/v1/import", content=b"[1, 2]", headers=key)
    assert listed.status_code == 422 and "line 1 is not a JSON object" in listed.json()["detail"]
    other = http.post("/v1/import", content=orjson.dumps({**TURN, "tenant_id": "globex"}), headers=key)
    assert other.status_code == 403
