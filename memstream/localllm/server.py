"""The HTTP side: a FastAPI app with OpenAI's ``/v1/models`` and ``/v1/chat/completions``.

Generation runs in a worker thread (the engine's lock serializes requests), so the event loop keeps
answering ``/v1/models`` (the readiness probe of infra/llm/llm_server.sh) while a completion runs. Every
error is an OpenAI error body; a bad request is a 400, which the ``openai`` client does not retry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any, Callable, Mapping, Protocol, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import protocol
from .protocol import ApiError, Completion, Sampling

log = logging.getLogger("memstream.localllm")


class CompletionEngine(Protocol):
    def complete(
        self, messages: Sequence[Mapping[str, str]], sampling: Sampling, gone: Callable[[], bool]
    ) -> Completion: ...


async def _watch_client(request: Request, gone: threading.Event, poll_s: float = 0.2) -> None:
    """Sets ``gone`` once the request's client has closed its connection."""
    while not await request.is_disconnected():
        await asyncio.sleep(poll_s)
    gone.set()


def create_app(engine: CompletionEngine, *, alias: str) -> FastAPI:
    from .engine import ClientGone, ContextLengthExceeded, GrammarRejected

    app = FastAPI(title="memstream local LLM", docs_url=None, redoc_url=None, openapi_url=None)
    created = int(time.time())

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(protocol.error_body(str(exc.detail), type=kind), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(protocol.error_body(str(exc)), status_code=400)

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed")
        body = protocol.error_body(f"{type(exc).__name__}: {exc}", type="server_error")
        return JSONResponse(body, status_code=500)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return protocol.models_response(alias, created=created)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            raise ApiError(f"the request body is not JSON: {exc}") from exc
        chat = protocol.parse_chat_request(body)
        gone = threading.Event()
        watching = asyncio.create_task(_watch_client(request, gone))
        try:
            completion = await asyncio.to_thread(engine.complete, chat.messages, chat.sampling, gone.is_set)
        except ClientGone as exc:
            log.info("request dropped: %s", exc)
            # Nobody reads it; 499 is what proxies log for a request its client closed.
            raise ApiError(str(exc), status=499, code="client_closed_request") from exc
        except ContextLengthExceeded as exc:
            raise protocol.context_length_error(exc.prompt_tokens, exc.n_ctx) from exc
        except GrammarRejected as exc:
            raise ApiError(f"the response_format grammar was rejected: {exc}", param="response_format") from exc
        finally:
            watching.cancel()
        # Any model name is accepted and echoed back, as OpenAI-compatible local servers do.
        return protocol.chat_response(completion, model=chat.model or alias)

    return app


def run(
    *,
    model: str,
    alias: str,
    host: str,
    port: int,
    n_ctx: int,
    n_threads: int,
    n_threads_batch: int | None = None,
    n_batch: int = 512,
) -> None:
    import uvicorn

    from .engine import Engine

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    engine = Engine(model, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads_batch, n_batch=n_batch)
    log.info(
        "loaded %s in %.1f s (n_ctx %d, threads %d/%d)",
        model,
        time.perf_counter() - started,
        engine.n_ctx,
        n_threads,
        n_threads_batch or n_threads,
    )
    uvicorn.run(create_app(engine, alias=alias), host=host, port=port, log_level="warning")
