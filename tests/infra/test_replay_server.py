"""The replay server's pure parts (infra/llm/replay_server.py): latency draws, request keys, the
nearest recording, the limiter's Retry-After arithmetic, the prompt-cache simulation; and the app
in-process (no socket, no upstream: a mock transport stands in for it)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from memstream.infra.llm import replay_server as rs

SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}


def response(content: str, prompt_tokens: int = 10, completion_tokens: int = 5, model: str = "smol") -> dict:
    return {
        "id": "chatcmpl-recorded",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def recording(content: str, prompt: str, response_format: dict | None = None) -> Any:
    body = {"messages": [{"role": "user", "content": prompt}], "response_format": response_format, "max_tokens": 9}
    return rs.Recording.from_line(rs.recording_line(body, response(content), 1.5))


# --- latency ---


def test_lognormal_draws_have_the_asked_median_and_p99() -> None:
    model = rs.LatencyModel(p50=0.8, p99=6.0, seed=7)
    draws = sorted(model.draw() for _ in range(40_000))
    assert rs.percentile(draws, 50) == pytest.approx(0.8, rel=0.10)
    assert rs.percentile(draws, 99) == pytest.approx(6.0, rel=0.10)
    assert min(draws) > 0


def test_latency_draws_repeat_with_the_seed_and_a_fixed_latency_is_constant() -> None:
    def draws(seed: int) -> list[float]:
        model = rs.LatencyModel(p50=1.0, p99=4.0, seed=seed)
        return [model.draw() for _ in range(5)]

    first, again, other = draws(3), draws(3), draws(4)
    assert first == again != other
    fixed = rs.LatencyModel.fixed(0.25)
    assert {fixed.draw() for _ in range(10)} == {0.25}


def test_lognormal_sigma_is_the_log_ratio_over_z99_and_rejects_a_p99_below_the_median() -> None:
    assert rs.lognormal_sigma(1.0, math.e**2.3263) == pytest.approx(1.0)
    assert rs.lognormal_sigma(2.0, 2.0) == 0
    with pytest.raises(ValueError):
        rs.lognormal_sigma(2.0, 1.0)
    with pytest.raises(ValueError):
        rs.LatencyModel(p50=0.0, p99=1.0)


# --- keys ---


def test_the_key_is_the_messages_and_response_format_whatever_their_key_order() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    reordered = [{"content": "be brief", "role": "system"}, {"content": "hi", "role": "user"}]
    fmt = {"type": "json_schema", "json_schema": {"schema": {"type": "object"}, "name": "a"}}
    assert rs.request_key(messages, SCHEMA_FORMAT) == rs.request_key(reordered, fmt)
    assert rs.request_key(messages, None) == rs.request_key(messages, {})  # absent or empty: no format
    assert rs.request_key(messages, None) != rs.request_key(messages, SCHEMA_FORMAT)
    assert rs.request_key(messages, None) != rs.request_key(messages[1:], None)
    assert len(rs.request_key(messages, None)) == 64


def test_model_max_tokens_temperature_and_timeout_do_not_change_the_key() -> None:
    messages = [{"role": "user", "content": "hi"}]
    one = {"model": "a", "messages": messages, "max_tokens": 5, "temperature": 0, "timeout": 3}
    two = {"model": "b", "messages": messages, "max_tokens": 900, "temperature": 0.7}
    assert rs.recording_line(one, response("x"), 1)["key"] == rs.recording_line(two, response("x"), 2)["key"]
    assert rs.recording_line(one, response("x"), 1)["request"] == {
        "messages": messages,
        "response_format": None,
        "max_tokens": 5,
    }


# --- nearest ---


def test_a_miss_gets_the_recording_with_its_response_format_closest_in_prompt_length() -> None:
    plain_close = recording("plain", "x" * 100)
    schema_far = recording("schema far", "x" * 10, SCHEMA_FORMAT)
    schema_near = recording("schema near", "x" * 60, SCHEMA_FORMAT)
    pool = [plain_close, schema_far, schema_near]
    asked = [{"role": "user", "content": "y" * 95}]
    # The same format wins over a closer length: the caller must be able to parse what comes back.
    assert rs.nearest_recording(pool, asked, SCHEMA_FORMAT) is schema_near
    assert rs.nearest_recording(pool, asked, None) is plain_close
    # A format nobody recorded: the closest of all.
    assert rs.nearest_recording(pool, asked, {"type": "json_object"}) is plain_close
    assert rs.nearest_recording([], asked, None) is None


def test_nearest_ties_go_to_the_smaller_key_whatever_the_order() -> None:
    a, b = recording("a", "p" * 50), recording("b", "q" * 50)
    asked = [{"role": "user", "content": "z" * 50}]
    smaller = min(a, b, key=lambda r: r.key)
    assert rs.nearest_recording([a, b], asked, None) is smaller
    assert rs.nearest_recording([b, a], asked, None) is smaller


# --- limits ---


def test_retry_after_is_whole_seconds_rounded_up_at_least_one_and_ms_beside_it() -> None:
    assert rs.retry_after_headers(0) == {"Retry-After": "1", "retry-after-ms": "1"}
    assert rs.retry_after_headers(0.2) == {"Retry-After": "1", "retry-after-ms": "200"}
    assert rs.retry_after_headers(1.0) == {"Retry-After": "1", "retry-after-ms": "1000"}
    assert rs.retry_after_headers(1.0004) == {"Retry-After": "2", "retry-after-ms": "1001"}
    assert rs.retry_after_headers(59.5) == {"Retry-After": "60", "retry-after-ms": "59500"}


def test_requests_per_minute_free_when_the_oldest_admitted_request_leaves_the_window() -> None:
    limiter = rs.RateLimiter(rs.Limits(rpm=2))
    assert limiter.admit(1, now=0.0).admitted and limiter.admit(1, now=10.0).admitted
    refused = limiter.admit(1, now=20.0)
    assert not refused.admitted and refused.retry_after_s == pytest.approx(40.0)
    assert "requests per minute" in refused.reason
    assert not limiter.admit(1, now=59.9).admitted  # a refusal took no budget: still the same wait
    assert limiter.admit(1, now=60.0).admitted  # the request of t=0 left the window
    assert limiter.admit(1, now=65.0).retry_after_s == pytest.approx(5.0)  # now t=10 must leave


def test_tokens_per_minute_free_when_enough_of_the_oldest_tokens_leave_the_window() -> None:
    limiter = rs.RateLimiter(rs.Limits(tpm=100))
    assert limiter.admit(30, now=0.0).admitted
    assert limiter.admit(30, now=5.0).admitted
    assert limiter.admit(30, now=10.0).admitted
    # 90 used: 50 more needs 20 freed, which the first two (60) give once t=5 leaves.
    assert limiter.admit(50, now=20.0).retry_after_s == pytest.approx(45.0)
    # 10 more fits at once.
    assert limiter.admit(10, now=20.0).admitted
    # More than a whole minute's budget never fits: refused with a full window's wait.
    too_large = limiter.admit(101, now=21.0)
    assert not too_large.admitted and too_large.retry_after_s == rs.WINDOW_S


def test_concurrency_frees_at_the_earliest_expected_end_and_on_release() -> None:
    limiter = rs.RateLimiter(rs.Limits(max_concurrency=2))
    first = limiter.admit(1, now=0.0, expected_end=5.0)
    limiter.admit(1, now=0.5, expected_end=3.0)
    refused = limiter.admit(1, now=1.0, expected_end=2.0)
    assert not refused.admitted and refused.retry_after_s == pytest.approx(2.0)
    assert limiter.in_flight == 2
    limiter.release(first.ticket)
    assert limiter.admit(1, now=1.0).admitted  # its end unknown: the other one's end still frees first
    assert limiter.admit(1, now=1.5).retry_after_s == pytest.approx(1.5)
    # Only ends nobody knows (requests forwarded upstream): try again in a second.
    forwarded = rs.RateLimiter(rs.Limits(max_concurrency=1))
    forwarded.admit(1, now=0.0)
    assert forwarded.admit(1, now=0.5).retry_after_s == 1.0


def test_a_request_over_several_limits_waits_for_the_last_of_them() -> None:
    limiter = rs.RateLimiter(rs.Limits(rpm=1, max_concurrency=1))
    limiter.admit(1, now=0.0, expected_end=2.0)
    refused = limiter.admit(1, now=1.0)
    assert refused.retry_after_s == pytest.approx(59.0)
    assert "concurrent requests" in refused.reason and "requests per minute" in refused.reason


# --- prompt cache ---


def test_cached_tokens_are_the_longest_shared_prefix_in_128_token_steps_from_1024_on() -> None:
    cache = rs.PromptCache()
    shared = "s" * 5000  # 9 whole 512-char blocks: 1,152 tokens
    first = shared + "a" * 2000
    assert cache.cached_tokens(first) == 0  # nothing earlier
    assert cache.cached_tokens(shared + "b" * 2000) == 9 * 128
    # The same prompt again: every whole block of it (7000 chars: 13 blocks).
    assert cache.cached_tokens(first) == 13 * 128
    # A shared prefix under 1,024 tokens (5 blocks = 640) does not count.
    assert cache.cached_tokens("s" * 3000 + "c" * 2000) == 0


def test_prompts_under_1024_tokens_are_neither_served_from_nor_put_in_the_cache() -> None:
    cache = rs.PromptCache()
    short = "s" * 4000  # 1,000 estimated tokens
    assert cache.cached_tokens(short) == 0 and len(cache) == 0
    assert cache.cached_tokens(short + "t" * 1000) == 0  # the short one was not cached
    assert len(cache) == 9


def test_the_prompt_cache_forgets_its_least_recently_used_prefixes_beyond_its_bound() -> None:
    cache = rs.PromptCache(max_entries=10)
    cache.cached_tokens("a" * 5120)  # 10 blocks
    cache.cached_tokens("b" * 5120)  # 10 more: the a-prefixes go
    assert len(cache) == 10
    assert cache.cached_tokens("a" * 5120) == 0


def test_cached_tokens_are_set_in_the_usage_never_above_the_recorded_prompt_tokens() -> None:
    recorded = response("x", prompt_tokens=1000, completion_tokens=4)
    body = rs.with_cached_tokens(recorded, 1152)
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 1000}
    assert body["usage"]["total_tokens"] == 1004
    assert "prompt_tokens_details" not in recorded["usage"]  # the recording itself is left as it was
    assert rs.with_cached_tokens(recorded, 0)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


# --- the app, in-process ---


def write_recordings(path: Path, *recordings: Any) -> Path:
    lines = [
        {
            "key": r.key,
            "request": {"messages": r.messages, "response_format": r.response_format, "max_tokens": 9},
            "response": r.response,
            "upstream_s": r.upstream_s,
        }
        for r in recordings
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "{not json\n")
    return path


def chat(prompt: str, response_format: dict | None = None) -> dict:
    body: dict = {"model": "anything", "messages": [{"role": "user", "content": prompt}], "max_tokens": 3}
    if response_format is not None:
        body["response_format"] = response_format
    return body


def test_the_app_replays_counts_misses_and_refuses_beyond_the_rpm_with_retry_after(tmp_path: Path) -> None:
    path = write_recordings(tmp_path / "rec.jsonl", recording("hello", "hi"), recording("{}", "hi", SCHEMA_FORMAT))
    config = rs.Config(mode="replay", recordings=(path,), limits=rs.Limits(rpm=2))
    service = rs.ReplayService(config)
    assert len(service.recordings) == 2  # the broken last line is skipped
    with TestClient(rs.create_app(service)) as client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["smol"]
        answer = client.post("/v1/chat/completions", json=chat("hi")).json()
        assert answer["choices"][0]["message"]["content"] == "hello" and answer["model"] == "smol"
        assert answer["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        assert answer["id"] != "chatcmpl-recorded"
        structured = client.post("/v1/chat/completions", json=chat("hi", SCHEMA_FORMAT)).json()
        assert structured["choices"][0]["message"]["content"] == "{}"
        miss = client.post("/v1/chat/completions", json=chat("never recorded"))
        assert miss.status_code == 404 and miss.json()["error"]["code"] == "recording_not_found"
        # The miss took no budget: the third answer is the one over 2 a minute.
        limited = client.post("/v1/chat/completions", json=chat("hi"))
        assert limited.status_code == 429
        assert limited.json()["error"]["type"] == "rate_limit_error"
        assert limited.json()["error"]["code"] == "rate_limit_exceeded"
        assert 55 <= int(limited.headers["Retry-After"]) <= 60 and int(limited.headers["retry-after-ms"]) > 55_000
        stats = client.get("/stats").json()
        assert {k: stats[k] for k in ("requests", "answered", "rate_limited", "misses", "max_concurrent")} == {
            "requests": 4,
            "answered": 2,
            "rate_limited": 1,
            "misses": 1,
            "max_concurrent": 1,
        }
        assert stats["latency_s"]["count"] == 2
        reset = client.post("/stats/reset").json()
        assert reset["requests"] == 0 and reset["recordings"] == 2
        assert client.post("/v1/chat/completions", json={"messages": []}).status_code == 400


def test_on_miss_nearest_answers_with_a_recording_and_counts_a_miss(tmp_path: Path) -> None:
    path = write_recordings(tmp_path / "rec.jsonl", recording("hello", "hi"), recording("{}", "hi", SCHEMA_FORMAT))
    service = rs.ReplayService(rs.Config(mode="replay", recordings=(path,), on_miss="nearest"))
    with TestClient(rs.create_app(service)) as client:
        answer = client.post("/v1/chat/completions", json=chat("something else", SCHEMA_FORMAT)).json()
        assert answer["choices"][0]["message"]["content"] == "{}"
        assert client.get("/stats").json()["misses"] == 1


def test_on_miss_upstream_forwards_records_and_then_replays(tmp_path: Path) -> None:
    calls: list[dict] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        calls.append(json.loads(request.content))
        return httpx.Response(200, json=response("from upstream", prompt_tokens=7, completion_tokens=2))

    out = tmp_path / "rec.jsonl"
    out.write_text("")
    config = rs.Config(mode="replay", recordings=(out,), record_to=out, on_miss="upstream", upstream="http://up/v1")

    async def run() -> list[Any]:
        service = rs.ReplayService(config)
        async with service:
            service._http = httpx.AsyncClient(base_url="http://up/v1/", transport=httpx.MockTransport(upstream))
            replies = [await service.complete(chat("new")), await service.complete(chat("new"))]
            assert service.stats_json()["by_source"] == {"upstream": 1, "recorded": 1}
            return replies

    first, second = asyncio.run(run())
    assert len(calls) == 1 and calls[0]["messages"] == [{"role": "user", "content": "new"}]
    assert first.body["choices"] == second.body["choices"]
    [line] = [json.loads(raw) for raw in out.read_text().splitlines()]
    assert line["key"] == rs.request_key(chat("new")["messages"], None)
    assert line["request"]["max_tokens"] == 3 and line["response"]["usage"]["total_tokens"] == 9
    assert rs.load_recordings([out])[line["key"]].response["choices"][0]["message"]["content"] == "from upstream"


@pytest.mark.parametrize(
    "argv",
    [
        ["record", "--recordings", "a.jsonl"],  # no upstream
        ["replay"],  # no recordings
        ["replay", "--recordings", "a", "--on-miss", "upstream"],
        ["replay", "--recordings", "a", "--latency-p50", "1"],
        ["replay", "--recordings", "a", "--latency-p50", "2", "--latency-p99", "1"],
        ["replay", "--recordings", "a", "--latency-fixed", "1", "--latency-p50", "1", "--latency-p99", "2"],
        ["replay", "--recordings", "a", "--rpm", "0"],
    ],
)
def test_the_cli_refuses_incomplete_or_contradictory_arguments(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        rs.parse_args(argv)
    assert exited.value.code == 2


def test_the_cli_builds_a_lognormal_seeded_config_with_absolute_paths(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["replay", "--recordings", "r.jsonl", "--latency-p50", "0.5", "--latency-p99", "4", "--seed", "9"]
    config = rs.config_from_args(rs.parse_args([*args, "--tpm", "1000", "--no-prompt-cache"]))
    assert config.recordings == (tmp_path / "r.jsonl",) and config.record_to == tmp_path / "r.jsonl"
    assert (config.latency.p50, config.latency.p99, config.latency.seed) == (0.5, 4.0, 9)
    assert config.limits == rs.Limits(tpm=1000) and config.prompt_cache is False


def test_a_stop_answers_the_requests_still_waiting_at_once_with_503(tmp_path: Path) -> None:
    path = write_recordings(tmp_path / "rec.jsonl", recording("hello", "hi"))
    service = rs.ReplayService(rs.Config(mode="replay", recordings=(path,), latency=rs.LatencyModel.fixed(30)))

    async def run() -> tuple[Any, float]:
        started = time.monotonic()
        waiting = asyncio.create_task(service.complete(chat("hi")))
        await asyncio.sleep(0.1)
        service.stop_serving()
        return await waiting, time.monotonic() - started

    reply, took = asyncio.run(run())
    assert reply.status == 503 and reply.body["error"]["code"] == "shutting_down"
    assert took < 5 and service.limiter.in_flight == 0


def test_the_cache_sees_a_structured_outputs_schema_before_the_messages() -> None:
    messages = [{"role": "system", "content": "s" * 5000}, {"role": "user", "content": "u"}]
    one = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": ["D1:1"]}}}
    other = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": ["D7:1"]}}}
    assert rs.cached_text(messages, None) == rs.prompt_text(messages)
    assert rs.cached_text(messages, one).startswith("schema\n") and rs.cached_text(messages, one).endswith("u\n")
    cache = rs.PromptCache()
    cache.cached_tokens(rs.cached_text(messages, one))
    # the same system prompt behind another schema: a miss, as at a provider that puts the schema first
    assert cache.cached_tokens(rs.cached_text(messages, other)) == 0
    assert cache.cached_tokens(rs.cached_text(messages, one)) >= 1024
