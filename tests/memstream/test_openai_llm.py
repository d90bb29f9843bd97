"""The OpenAI-compatible adapter reads a 429's Retry-After and the cached prompt tokens (an httpx
mock transport plays the endpoint: no network)."""

from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import httpx
import openai
import pytest

from memstream.adapters.openai_llm import OpenAICompatibleLLM, cached_tokens, retry_after, retry_after_header
from memstream.ports import LLMError

NOW = datetime(2026, 12, 5, 12, 0, 0, tzinfo=timezone.utc)


def rate_limit_error(headers: dict[str, str]) -> openai.RateLimitError:
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    response = httpx.Response(429, headers=headers, request=request)
    return openai.RateLimitError("Rate limit reached", response=response, body=None)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"Retry-After": format_datetime(NOW + timedelta(seconds=30), usegmt=True)}, 30.0),
        ({"Retry-After": format_datetime(NOW - timedelta(seconds=30), usegmt=True)}, 0.0),  # already past
        ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5),  # the precise one wins
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, None),
        ({}, None),
    ],
)
def test_a_429_says_how_long_to_wait(headers, expected):
    assert retry_after(rate_limit_error(headers), now=NOW) == expected


def test_only_a_rate_limit_carries_a_wait():
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    response = httpx.Response(503, headers={"Retry-After": "5"}, request=request)
    assert retry_after(openai.InternalServerError("down", response=response, body=None)) is None
    assert retry_after_header({"retry-after": "5"}) == 5.0


def test_cached_tokens_are_read_when_the_server_reports_them():
    usage = openai.types.CompletionUsage(
        prompt_tokens=100,
        completion_tokens=5,
        total_tokens=105,
        prompt_tokens_details={"cached_tokens": 64},
    )
    assert cached_tokens(usage) == 64
    assert cached_tokens(openai.types.CompletionUsage(prompt_tokens=1, completion_tokens=1, total_tokens=2)) == 0
    assert cached_tokens(None) == 0


def adapter(handler) -> OpenAICompatibleLLM:
    llm = OpenAICompatibleLLM("http://llm.test/v1", "m", "key")
    llm._client = openai.OpenAI(
        base_url="http://llm.test/v1",
        api_key="key",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    return llm


def test_the_adapter_turns_a_429_into_a_rate_limit_error_with_its_wait():
    llm = adapter(lambda request: httpx.Response(429, headers={"retry-after-ms": "2500"}, json={"error": {}}))
    with pytest.raises(LLMError) as caught:
        llm.complete([{"role": "user", "content": "hi"}])
    assert caught.value.kind == "rate_limit" and caught.value.retry_after_s == 2.5


def test_the_adapter_reports_the_cached_prompt_tokens():
    body = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m-2026",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hello"}}],
        "usage": {
            "prompt_tokens": 2048,
            "completion_tokens": 3,
            "total_tokens": 2051,
            "prompt_tokens_details": {"cached_tokens": 1920},
        },
    }
    result = adapter(lambda request: httpx.Response(200, json=body)).complete([{"role": "user", "content": "hi"}])
    assert (result.content, result.prompt_tokens, result.cached_prompt_tokens) == ("hello", 2048, 1920)
    body["usage"] = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "prompt_tokens_details": None}
    result = adapter(lambda request: httpx.Response(200, json=body)).complete([{"role": "user", "content": "hi"}])
    assert result.cached_prompt_tokens == 0
