"""Run ``python -m llama_cpp.server`` (same CLI flags) with one addition: an ASGI
middleware that makes the OpenAI structured-output form work.

llama-cpp-python's server (0.3.x) only accepts
    response_format={"type": "json_object", "schema": {...}}
and rejects the standard OpenAI form
    response_format={"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": true}}
with HTTP 500 (which the ``openai`` client then retries twice).  The middleware
rewrites the latter into the former, so callers (including
``client.chat.completions.parse(response_format=PydanticModel)``) can use the
portable OpenAI form against this server.  ``name``/``strict`` are dropped: the
schema is always enforced via a GBNF grammar.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

import llama_cpp.server.__main__ as llama_main

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_REWRITE_PATHS = {"/v1/chat/completions", "/v1/completions"}


def rewrite_body(body: bytes) -> bytes:
    """Return ``body`` with a ``json_schema`` response_format turned into ``json_object``+schema."""
    try:
        payload = json.loads(body)
    except ValueError:
        return body
    if not isinstance(payload, dict):
        return body
    response_format = payload.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return body
    spec = response_format.get("json_schema") or {}
    schema = spec.get("schema") if isinstance(spec, dict) else None
    payload["response_format"] = {"type": "json_object", "schema": schema} if schema else {"type": "json_object"}
    return json.dumps(payload).encode()


class JsonSchemaResponseFormat:
    """Pure-ASGI middleware (no buffering of responses, so streaming is unaffected)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in _REWRITE_PATHS:
            await self.app(scope, receive, send)
            return

        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break

        body = rewrite_body(b"".join(chunks))
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        scope = dict(scope, headers=headers)
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def _receive() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()  # e.g. http.disconnect while streaming

    return _receive


def main() -> None:
    original_create_app = llama_main.create_app

    def create_app(*args: Any, **kwargs: Any):
        app = original_create_app(*args, **kwargs)
        app.add_middleware(JsonSchemaResponseFormat)
        return app

    llama_main.create_app = create_app
    llama_main.main()


if __name__ == "__main__":
    main()
