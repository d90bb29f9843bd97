"""The OpenAI chat-completions wire format: request bodies in, generation settings out, response and
error bodies back. Pure: no model, no HTTP framework.

Defaults that the request leaves open are llama-cpp-python's server's (temperature 0.8, top_p 0.95,
top_k 40, min_p 0.05, repeat_penalty 1.1), which this server replaces; ``top_k``, ``min_p`` and
``repeat_penalty`` are accepted as extensions, as that server did.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from .schema import SchemaError, normalise

FinishReason = Literal["stop", "length"]


class ApiError(Exception):
    """A request the server answers with an OpenAI error body instead of a completion."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)


def error_body(
    message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def context_length_error(prompt_tokens: int, n_ctx: int) -> ApiError:
    """The prompt leaves no room for a single completion token (OpenAI's wording and code)."""
    return ApiError(
        f"This model's maximum context length is {n_ctx} tokens. However, your messages resulted in "
        f"{prompt_tokens} tokens. Please reduce the length of the messages.",
        param="messages",
        code="context_length_exceeded",
    )


@dataclass(frozen=True)
class Sampling:
    """How to generate one completion. ``max_tokens`` None: up to the end of the context window."""

    max_tokens: int | None = None
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    seed: int | None = None  # None: a fresh random seed per request
    stop: tuple[str, ...] = ()
    grammar: str | None = None  # GBNF, from response_format


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, str]]
    model: str | None
    sampling: Sampling


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int  # tokens sampled, up to and including one that completed a stop sequence
    finish_reason: FinishReason


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate a ``POST /v1/chat/completions`` body; ApiError (400) names the offending field."""
    if not isinstance(body, Mapping):
        raise ApiError("the request body must be a JSON object")
    _refuse_unsupported(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError("model must be a string", param="model")
    max_tokens = body.get("max_completion_tokens")
    max_param = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, max_param = body.get("max_tokens"), "max_tokens"
    sampling = Sampling(
        max_tokens=_optional_int(max_param, max_tokens, minimum=1),
        temperature=_number(body, "temperature", 0.8, low=0.0, high=2.0),
        top_p=_number(body, "top_p", 0.95, low=0.0, high=1.0),
        top_k=int(_number(body, "top_k", 40, low=0, integer=True)),
        min_p=_number(body, "min_p", 0.05, low=0.0, high=1.0),
        repeat_penalty=_number(body, "repeat_penalty", 1.1, low=0.0),
        seed=_optional_int("seed", body.get("seed")),
        stop=_stop(body.get("stop")),
        grammar=response_format_grammar(body.get("response_format")),
    )
    return ChatRequest(messages=_messages(body.get("messages")), model=model, sampling=sampling)


def response_format_grammar(response_format: Any) -> str | None:
    """GBNF for an OpenAI ``response_format``: ``{"type": "json_schema", "json_schema": {"schema": ...}}``
    (what ``client.chat.completions.parse`` sends), ``{"type": "json_object", "schema": ...}`` (the
    llama.cpp form), ``{"type": "json_object"}`` (any JSON object) or ``{"type": "text"}``/None."""
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise ApiError("response_format must be an object", param="response_format")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        if schema is None:
            return _grammar({"type": "json_object"})
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema"), Mapping):
            raise ApiError("response_format.json_schema.schema must be an object", param="response_format")
        schema = spec["schema"]
    else:
        raise ApiError(
            f"response_format.type must be 'text', 'json_object' or 'json_schema', not {kind!r}",
            param="response_format",
        )
    try:
        normalised = normalise(schema)
    except SchemaError as exc:
        raise ApiError(f"unsupported JSON schema in response_format: {exc}", param="response_format") from exc
    return _grammar({"type": "json_schema", "json_schema": {"schema": normalised}})


def _grammar(response_format: dict[str, Any]) -> str:
    from llama_cpp_py_sync.constraints import response_format_to_grammar  # pure Python; loads no library

    try:
        grammar = response_format_to_grammar(response_format)
    except (ValueError, TypeError) as exc:
        raise ApiError(f"unsupported JSON schema in response_format: {exc}", param="response_format") from exc
    assert grammar is not None  # only "text" gives None, and it never gets here
    return compact_whitespace(grammar)


# llama-cpp-py-sync's converter requires whitespace (a blank, or newlines and indentation) after every
# "{", "," and ":" and before every ":". SmolLM2 then writes indented JSON and, on three extraction
# prompts, 690/906/1024 (cut) completion tokens where llama-cpp-python's server, whose grammars allow
# at most one blank there, gave 206/438/823. With that server's rule the outputs are the same again
# (205/437/829 tokens): shorter, faster, and what the project's prompts were tuned on.
_SPACE_RULE = "space ::= "
COMPACT_SPACE = 'space ::= " "?'


def compact_whitespace(grammar: str) -> str:
    return "\n".join(COMPACT_SPACE if line.startswith(_SPACE_RULE) else line for line in grammar.splitlines())


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    """Fields whose request this server cannot honour: a 400 beats an answer that silently ignores them."""
    if body.get("stream"):
        raise ApiError("stream is not supported by this server", param="stream")
    if body.get("n") not in (None, 1):
        raise ApiError("n other than 1 is not supported by this server", param="n")
    for field in ("tools", "functions", "logit_bias"):
        if body.get(field):
            raise ApiError(f"{field} is not supported by this server", param=field)
    if body.get("tool_choice") not in (None, "none", "auto"):
        raise ApiError("tool_choice is not supported by this server", param="tool_choice")
    if body.get("logprobs") or body.get("top_logprobs"):
        raise ApiError("logprobs are not supported by this server", param="logprobs")
    for field in ("frequency_penalty", "presence_penalty"):
        if body.get(field) not in (None, 0, 0.0):
            raise ApiError(f"{field} is not supported by this server (use repeat_penalty)", param=field)


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise ApiError("messages must be a non-empty array", param="messages")
    out = []
    for i, message in enumerate(value):
        param = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise ApiError(f"{param} must be an object", param=param)
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ApiError(f"{param}.role must be a non-empty string", param=f"{param}.role")
        out.append({"role": role, "content": _content(message.get("content"), f"{param}.content")})
    return out


def _content(value: Any, param: str) -> str:
    """Text of a message: a string, null (an assistant turn without text) or an array of text parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(f"{param}: only text parts are supported", param=param)
            parts.append(part["text"])
        return "".join(parts)
    raise ApiError(f"{param} must be a string or an array of text parts", param=param)


def _number(
    body: Mapping[str, Any],
    name: str,
    default: float,
    *,
    low: float | None = None,
    high: float | None = None,
    integer: bool = False,
) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(f"{name} must be a number", param=name)
    if integer and value != int(value):
        raise ApiError(f"{name} must be an integer", param=name)
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ApiError(f"{name} must be {bounds}", param=name)
    return float(value)


def _optional_int(name: str, value: Any, *, minimum: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(f"{name} must be an integer", param=name)
    if minimum is not None and value < minimum:
        raise ApiError(f"{name} must be at least {minimum}", param=name)
    return value


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise ApiError("stop must be a string or an array of strings", param="stop")
    return tuple(s for s in items if s)  # an empty stop string would end every completion at once


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_response(completion: Completion, *, model: str, created: int | None = None) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": completion.text},
                "logprobs": None,
                "finish_reason": completion.finish_reason,
            }
        ],
        "usage": usage(completion.prompt_tokens, completion.completion_tokens),
    }


def models_response(alias: str, *, created: int = 0) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": alias, "object": "model", "created": created, "owned_by": "memstream"}]}
