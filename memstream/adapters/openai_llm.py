"""LLM port over any OpenAI-compatible endpoint (OpenAI, vLLM, llama-cpp-python's server, ...)."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Mapping

import openai

from memstream.ports import LLM, LLMError, LlmRequest, LlmResult


class OpenAICompatibleLLM(LLM):
    def __init__(self, base_url: str, model: str, api_key: str, *, timeout_s: float = 120.0, max_tokens: int = 1024):
        self.model = model
        self.max_tokens = max_tokens
        # No retries here: memstream.instrumented.MeteredLLM retries transient failures and counts them.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)

    def answer(self, request: LlmRequest) -> LlmResult:
        json_schema = request.json_schema
        kwargs: dict[str, Any] = {}
        if request.timeout_s is not None:
            kwargs["timeout"] = request.timeout_s
        if json_schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.schema_name, "schema": dict(json_schema)},
            }
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=[dict(m) for m in request.messages],  # type: ignore[misc]
                max_tokens=request.max_tokens or self.max_tokens,
                temperature=0.0,
                **kwargs,
            )
        except openai.OpenAIError as exc:
            raise LLMError(f"{type(exc).__name__}: {exc}", error_kind(exc), retry_after_s=retry_after(exc)) from exc
        if not response.choices:
            raise LLMError("the endpoint returned no choices", "empty")
        content = response.choices[0].message.content or ""
        usage = response.usage
        data = None
        if json_schema is not None:
            try:
                # strict=False: constrained decoders may put raw newlines inside strings.
                parsed = json.loads(content, strict=False)
                data = parsed if isinstance(parsed, dict) else None
            except ValueError:
                data = None  # the caller validates and repairs
        return LlmResult(
            content=content,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            model=response.model or self.model,
            data=data,
            cached_prompt_tokens=cached_tokens(usage),
        )


def cached_tokens(usage: Any) -> int:
    """Prompt tokens the provider's prompt cache served; servers that do not say report none."""
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    return (getattr(details, "cached_tokens", None) or 0) if details else 0


def retry_after(exc: openai.OpenAIError, now: datetime | None = None) -> float | None:
    """Seconds a 429 asks to wait: ``retry-after-ms`` (OpenAI's, the more precise) or ``Retry-After``
    (seconds, or an HTTP date); None when it names neither or is not a rate limit."""
    if not isinstance(exc, openai.RateLimitError):
        return None
    return retry_after_header(exc.response.headers, now)


def retry_after_header(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """``headers``: case-insensitive, as httpx's are (lower-case keys for a plain dict)."""
    milliseconds = _number(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)  # HTTP dates are GMT
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


def _number(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) and number >= 0 else None


def error_kind(exc: openai.OpenAIError) -> str:
    """LLMError.kind of an openai client error."""
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limit"
    if isinstance(exc, openai.InternalServerError) or getattr(exc, "status_code", 0) >= 500:
        return "server"
    return "client"
