"""The gateway's HTTP API (FastAPI): turns, questions and forgets as JSON, Slack's Events API webhook,
health and metrics; the MCP server is mounted at ``/mcp``, the inspector at ``/ui`` (gateway/ui.py).
Every route but /healthz, /metrics and the webhook (Slack signs it) needs a tenant's API key; the key
decides the tenant, a body cannot."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, AsyncContextManager, AsyncIterator, Awaitable, Callable, Literal

import orjson
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, Field

from memstream.client import AsyncMemoryClient, BrokerUnavailable, QueryTimeout, ReplyError
from memstream.client.history import turn_place
from memstream.config import Settings
from memstream.processors.write.history import number_history
from memstream.schemas import SchemaError, Turn
from memstream.schemas.base import ID_PATTERN
from memstream.schemas.text import isolated_reply

from .auth import TenantKeys, bearer, verify_slack
from .limits import GatewayLimits, OverLimit

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

ROUTES = frozenset(
    {"/v1/turns", "/v1/import", "/v1/ask", "/v1/forget", "/v1/webhooks/slack", "/healthz", "/metrics", "/mcp"}
)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


# --- request bodies (the topic payloads themselves live in schemas/) --------------------------------


class TurnsIn(BaseModel):
    """Turns as on ``memory.turns`` (``schemas/json/``); ``tenant_id`` may be left out (the key's)."""

    turns: list[dict[str, Any]] = Field(min_length=1, max_length=5000)


class AskIn(BaseModel):
    conversation_id: str = Field(pattern=ID_PATTERN)
    question: str = Field(min_length=1, max_length=4000)
    profile: Literal["auto", "lookup", "compose", "replay"] = "auto"
    k: int | None = Field(None, ge=1, le=100)
    max_tokens: int | None = Field(None, ge=1, le=32_000, description="Most evidence tokens wanted")
    answer: bool = True
    question_time: datetime | None = None
    timeout_s: float | None = Field(None, gt=0, le=300)


class ForgetIn(BaseModel):
    conversation_id: str | None = Field(None, pattern=ID_PATTERN)
    speaker: str | None = Field(None, min_length=1, max_length=200)
    turn_ids: list[str] = Field(default_factory=list, max_length=10_000)
    wait: bool = True
    timeout_s: float = Field(300.0, gt=0, le=900)


# --- plumbing ------------------------------------------------------------------------------------


class GatewayMetrics:
    """The gateway's own series (one registry per app): requests by route and status, latency."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "memstream_gateway_requests_total", "HTTP requests", ["route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "memstream_gateway_request_seconds",
            "HTTP request time",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "memstream_gateway_rate_limited_total",
            "Requests refused by their tenant's rate limit (nothing of them written)",
            ["route", "limit"],
            registry=self.registry,
        )


class SharedClient:
    """One SDK client per gateway process, connected on first use and again after the broker went
    away (a request meanwhile gets 503, not a hang)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._client: AsyncMemoryClient | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> AsyncMemoryClient:
        async with self._lock:
            if self._client is None:
                client = AsyncMemoryClient(self.settings)
                await client.start()
                self._client = client
            return self._client

    async def call(self, use: Callable[[AsyncMemoryClient], Awaitable[Any]]) -> Any:
        try:
            return await use(await self.get())
        except BrokerUnavailable:
            await self.reset()
            raise

    async def reset(self) -> None:
        async with self._lock:
            if self._client is not None:
                with contextlib.suppress(Exception):
                    await self._client.close()
            self._client = None

    async def reachable(self) -> bool:
        from memstream.streams.topics import broker_reachable

        try:
            return await asyncio.wait_for(broker_reachable(self.settings), 5)
        except (asyncio.TimeoutError, OSError):
            return False


class BodyLimit:
    """Refuses bodies over ``limit`` bytes with 413, by Content-Length and by what actually arrives."""

    class TooLarge(Exception):
        pass

    def __init__(self, app: Any, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._refuse(send)
        seen = 0
        started = False

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyLimit.TooLarge
            return message

        async def tracked(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyLimit.TooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        body = orjson.dumps({"detail": f"request body over {self.limit} bytes (MEMSTREAM_GATEWAY_MAX_REQUEST_BYTES)"})
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def tenant_turns(raw: list[dict[str, Any]], tenant_id: str) -> list[Turn]:
    """The body's turns as ``Turn``s of the caller's tenant: a turn naming another tenant is refused
    (403), an invalid one is a 422 naming its index and what is wrong."""
    turns = []
    for i, data in enumerate(raw):
        named = data.get("tenant_id", tenant_id)
        if named != tenant_id:
            raise HTTPException(403, f"turn {i} names tenant {named!r}; this key is {tenant_id!r}'s")
        try:
            turns.append(Turn.model_validate({**data, "tenant_id": tenant_id}))
        except ValueError as exc:
            raise HTTPException(422, f"turn {i} is not a valid Turn: {exc}") from None
    return turns


def ndjson_objects(body: bytes) -> list[dict[str, Any]]:
    """The JSON objects of an NDJSON body, one a line (blank lines skipped); 422 naming the first
    line that is not one, or when there is none."""
    out = []
    for number, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise HTTPException(422, f"line {number} is not JSON: {exc}") from None
        if not isinstance(item, dict):
            raise HTTPException(422, f"line {number} is not a JSON object")
        out.append(item)
    if not out:
        raise HTTPException(422, "an import needs at least one turn (NDJSON: one turn a line)")
    return out


# --- the app -------------------------------------------------------------------------------------


def create_app(settings: Settings, *, mcp: bool = True) -> FastAPI:
    """The gateway app for ``settings`` (its keys, limits, broker). ``mcp``: mount the MCP server."""
    keys = TenantKeys(settings.gateway_api_keys)
    shared = SharedClient(settings)
    metrics = GatewayMetrics()
    limits = GatewayLimits(settings, metrics.rate_limited)
    mcp_server = None
    if mcp:
        from .mcp_server import build_mcp_server

        mcp_server = build_mcp_server(shared, keys, limits=limits)

    app = FastAPI(title="memstream gateway", version="1", lifespan=_lifespan(shared, mcp_server))
    app.state.shared = shared
    _count_requests(app, keys, metrics)
    _refusals(app, settings)
    _memory_routes(app, shared, _caller(keys), limits)
    _slack_route(app, settings, shared, limits)
    _health_routes(app, settings, shared, metrics)
    if mcp_server is not None:
        # Stateless: any gateway process can serve any MCP request (they share nothing).
        mcp_app = mcp_server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, json_response=True, host=settings.gateway_host
        )
        app.router.routes.extend(mcp_app.routes)
    from .ui import mount_ui

    mount_ui(app, settings, keys, shared, limits)
    app.add_middleware(BodyLimit, limit=settings.gateway_max_request_bytes)
    return app


def _lifespan(shared: SharedClient, mcp_server: MCPServer | None) -> Callable[[FastAPI], AsyncContextManager[None]]:
    """The MCP server's sessions run while the app does; the SDK client is closed when it stops."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if mcp_server is not None:
                await stack.enter_async_context(mcp_server.session_manager.run())
            try:
                yield
            finally:
                await shared.reset()

    return lifespan


def _count_requests(app: FastAPI, keys: TenantKeys, metrics: GatewayMetrics) -> None:
    """Every request counted and timed by route; ``/mcp`` without a valid key refused here (the MCP
    app has no dependencies of its own)."""

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path.rstrip("/") or "/"
        # Bounded labels: the inspector's paths are all "/ui", a scanner's all "other".
        route = path if path in ROUTES else "/ui" if path == "/ui" or path.startswith("/ui/") else "other"
        if route == "/mcp" and keys.tenant(bearer(request.headers.get("authorization"))) is None:
            response: Response = JSONResponse(
                {"detail": "missing or unknown API key (Authorization: Bearer <key>)"}, status_code=401
            )
            metrics.requests.labels(route, "401").inc()
            return response
        t0 = time.perf_counter()
        response = await call_next(request)
        metrics.latency.labels(route).observe(time.perf_counter() - t0)
        metrics.requests.labels(route, str(response.status_code)).inc()
        return response


def _unavailable(content: dict[str, Any], settings: Settings) -> JSONResponse:
    """A 503 that says when to try again."""
    return JSONResponse(content, status_code=503, headers={"Retry-After": str(settings.gateway_retry_after_s)})


def _refusals(app: FastAPI, settings: Settings) -> None:
    """The SDK's failures as HTTP statuses: broker down 503, no reply in time 504, an error reply 502,
    an invalid payload 422."""

    @app.exception_handler(BrokerUnavailable)
    async def broker_down(_request: Request, exc: BrokerUnavailable) -> JSONResponse:
        return _unavailable({"detail": f"the broker is unavailable, try again: {exc}"}, settings)

    @app.exception_handler(QueryTimeout)
    async def timed_out(_request: Request, exc: QueryTimeout) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=504)

    @app.exception_handler(ReplyError)
    async def error_reply(_request: Request, exc: ReplyError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "reply": exc.reply.model_dump(mode="json")}, status_code=502)

    @app.exception_handler(OverLimit)
    async def over_limit(_request: Request, exc: OverLimit) -> JSONResponse:
        headers = {} if exc.admission.too_large else {"Retry-After": exc.retry_after}
        return JSONResponse({"detail": str(exc), "limit": exc.admission.limit}, status_code=exc.status, headers=headers)

    @app.exception_handler(SchemaError)
    async def bad_payload(_request: Request, exc: SchemaError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)


def _caller(keys: TenantKeys) -> Callable[..., str]:
    """The dependency that gives a request's tenant, by its API key."""

    def caller(authorization: str | None = Header(None)) -> str:
        """The tenant of the request's API key (401 without a valid one)."""
        if not keys:
            raise HTTPException(
                401, "no API keys are configured (MEMSTREAM_GATEWAY_API_KEYS): every request is refused"
            )
        tenant = keys.tenant(bearer(authorization))
        if tenant is None:
            raise HTTPException(401, "missing or unknown API key (Authorization: Bearer <key>)")
        return tenant

    return caller


def _memory_routes(app: FastAPI, shared: SharedClient, caller: Callable[..., str], limits: GatewayLimits) -> None:
    """Turns, questions and forgets of the caller's tenant, each within the tenant's limits."""

    @app.post("/v1/turns", status_code=202)
    async def post_turns(body: TurnsIn, tenant: str = Depends(caller)) -> dict[str, Any]:
        """Remember turns (acknowledged by the broker when this returns). Idempotent on turn ids: a
        batch sent again is stored once."""
        turns = tenant_turns(body.turns, tenant)
        limits.admit("/v1/turns", tenant, turns=turns)  # the whole batch, or none of it
        sent = await shared.call(lambda c: c.remember(turns))
        return {"accepted": sent, "tenant_id": tenant}

    @app.post("/v1/import", status_code=202)
    async def post_import(request: Request, after: str | None = None, tenant: str = Depends(caller)) -> dict[str, Any]:
        """A history import: NDJSON, one turn a line (``tenant_id`` may be left out), sent through the
        bulk lane (``import_history``: each conversation in event-time order, before its live turns;
        the whole of a conversation belongs in one request). Resumable: ``after`` is the ``last`` a
        previous try returned (``<conversation_id>/<turn_id>``), and only the turns after it are sent
        (sending them all again stores nothing twice either). Not counted against the tenant's turn
        rates: the bulk lane lets an import in only while live traffic allows."""
        turns = tenant_turns(ndjson_objects(await request.body()), tenant)
        places = [turn_place(t) for t in number_history(turns)]  # the order the import is sent in
        if after is not None and after not in places:
            raise HTTPException(422, f"after={after!r} names no turn of this import (<conversation_id>/<turn_id>)")
        sent = await shared.call(lambda c: c.import_history(turns, after=after))
        return {"accepted": sent, "tenant_id": tenant, "last": places[-1]}

    @app.post("/v1/ask")
    async def post_ask(body: AskIn, response: Response, tenant: str = Depends(caller)) -> dict[str, Any]:
        """Ask a question of the key's tenant's conversation; the reply as on ``memory.replies``, its
        trace id (tracing on) also in the ``X-Trace-Id`` header."""
        limits.admit("/v1/ask", tenant, questions=1)
        reply = await shared.call(
            lambda c: c.ask(
                body.question,
                tenant_id=tenant,
                conversation_id=body.conversation_id,
                profile=body.profile,
                k=body.k,
                max_tokens=body.max_tokens,
                answer=body.answer,
                question_time=body.question_time,
                timeout_s=body.timeout_s,
            )
        )
        if reply.trace_id:
            response.headers["X-Trace-Id"] = reply.trace_id
        return isolated_reply(reply).model_dump(mode="json")  # a page shows it: bidi controls isolated

    @app.post("/v1/forget")
    async def post_forget(body: ForgetIn, tenant: str = Depends(caller)) -> dict[str, Any]:
        """Forget turns of the key's tenant (a conversation, a speaker, turn ids) and what came of them."""
        limits.admit("/v1/forget", tenant, questions=1)
        try:
            outcome = await shared.call(
                lambda c: c.forget(
                    tenant_id=tenant,
                    conversation_id=body.conversation_id,
                    speaker=body.speaker,
                    turn_ids=body.turn_ids,
                    wait=body.wait,
                    timeout_s=body.timeout_s,
                )
            )
        except ValueError as exc:  # an invalid scope (turn ids without a conversation)
            raise HTTPException(422, str(exc)) from None
        return {
            "forget_id": outcome.forget_id,
            "parts": outcome.parts,
            "done": outcome.done,
            "counts": outcome.counts,
            "retained": {topic: until.isoformat() for topic, until in outcome.retained.items()},
        }


def _slack_route(app: FastAPI, settings: Settings, shared: SharedClient, limits: GatewayLimits) -> None:
    """Slack's Events API webhook (Slack signs it: no API key)."""

    @app.post("/v1/webhooks/slack")
    async def slack_webhook(request: Request) -> Response:
        """Slack's Events API: answers the url_verification challenge; message events become turns
        (edits new versions, deletions forgets). Tenant: the event's team."""
        if settings.gateway_slack_signing_secret is None:
            raise HTTPException(404, "the Slack webhook is off: set MEMSTREAM_GATEWAY_SLACK_SIGNING_SECRET")
        body = await request.body()
        why = verify_slack(
            settings.gateway_slack_signing_secret.get_secret_value(),
            request.headers.get("x-slack-request-timestamp"),
            request.headers.get("x-slack-signature"),
            body,
        )
        if why:
            raise HTTPException(401, f"not a request from Slack: {why}")
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise HTTPException(400, "the body is not JSON") from None
        if isinstance(payload, dict) and payload.get("type") == "url_verification":
            return JSONResponse({"challenge": payload.get("challenge", "")})
        from memstream.platforms import map_events

        mapped = map_events("slack", [payload])
        for tenant in sorted({t.tenant_id for t in mapped.turns}):  # an event is one team's
            limits.admit("/v1/webhooks/slack", tenant, turns=[t for t in mapped.turns if t.tenant_id == tenant])
        outcome = await shared.call(lambda c: c.ingest(mapped, source="slack:webhook"))
        return JSONResponse(
            {
                "ok": True,
                "turns": outcome.turns,
                "forgets": len(outcome.forgets),
                "dead_letters": outcome.dead_letters,
                "skipped": outcome.skipped,
            }
        )


def _health_routes(app: FastAPI, settings: Settings, shared: SharedClient, metrics: GatewayMetrics) -> None:
    """Health (the broker's) and the gateway's Prometheus series, both open."""

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        """200 while the broker answers; 503 (with Retry-After) while it does not."""
        if await shared.reachable():
            return JSONResponse({"status": "ok", "broker": "up"})
        return _unavailable({"status": "unavailable", "broker": "down"}, settings)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
