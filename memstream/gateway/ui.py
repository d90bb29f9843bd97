"""The inspector at ``/ui``: a page and a small script shipped in the package (nothing fetched from
outside), and the JSON it reads, all behind the tenant's API key. The key is entered once; the
browser then holds a signed session cookie (HttpOnly, SameSite=Strict, Secure over TLS), and every
state-changing request also carries the session's CSRF token. Reads go over request/reply to the
query stage like questions do; an id the tenant does not own is 404, as if it did not exist."""

from __future__ import annotations

import re
import secrets
from importlib import resources
from typing import Any, AsyncIterator, Callable, NamedTuple

import orjson
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from memstream.client.history import import_progress
from memstream.client.usage import tenant_llm_usage
from memstream.config import Settings
from memstream.schemas.base import ID_PATTERN
from memstream.schemas.read import ReadReply

from .auth import TenantKeys, hash_key
from .limits import GatewayLimits
from .session import CSRF_HEADER, SESSION_COOKIE, csrf_ok, csrf_token, issue_session, read_session

ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
# No inline script or style, nothing from elsewhere; data is drawn with textContent, never as HTML.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class LoginIn(BaseModel):
    key: str = Field(min_length=1, max_length=4096)


class AskIn(BaseModel):
    question: str = Field(min_length=1, max_length=4000)
    answer: bool = True


class ForgetIn(BaseModel):
    speaker: str | None = Field(None, min_length=1, max_length=200)
    turn_ids: list[str] = Field(default_factory=list, max_length=10_000)


def asset(name: str) -> bytes:
    return resources.files("memstream.gateway").joinpath("static", name).read_bytes()


def is_tls(request: Request) -> bool:
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto", "").lower() == "https"


def mount_ui(app: FastAPI, settings: Settings, keys: TenantKeys, shared: Any, limits: GatewayLimits) -> None:
    """The inspector's routes on ``app``; ``shared``: the gateway's SharedClient, ``limits``: its tenants' buckets."""
    secret = (
        settings.gateway_session_secret.get_secret_value().encode()
        if settings.gateway_session_secret
        else secrets.token_bytes(32)
    )
    _security_headers(app)
    guards = _session_guards(secret, keys)
    router = APIRouter(prefix="/ui")
    _page_routes(router)
    _session_routes(router, settings, keys, secret, guards)
    _read_routes(router, shared, _within(limits, guards.tenant_of, reads=1))
    _change_routes(router, shared, _within(limits, guards.changing, questions=1))
    app.include_router(router)


def _security_headers(app: FastAPI) -> None:
    """Every response under /ui gets ``SECURITY_HEADERS`` (where a route set none of its own)."""

    @app.middleware("http")
    async def secure(request: Request, call_next: Callable) -> Response:
        response = await call_next(request)
        if request.url.path == "/ui" or request.url.path.startswith("/ui/"):
            for name, value in SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
        return response


class SessionGuards(NamedTuple):
    """The inspector's dependencies: the request's session, its tenant, the tenant of a change."""

    session: Callable[..., tuple[str, str]]
    tenant_of: Callable[..., str]
    changing: Callable[..., str]


def _session_guards(secret: bytes, keys: TenantKeys) -> SessionGuards:
    def session(request: Request) -> tuple[str, str]:
        """(tenant, session token) of the request's cookie; 401 when there is none or its key was revoked."""
        token = request.cookies.get(SESSION_COOKIE)
        found = read_session(secret, token)
        if found is None or keys.tenant_by_digest(found[1]) != found[0]:
            raise HTTPException(401, "sign in with an API key")
        return found[0], token or ""

    def changing(request: Request, who: tuple[str, str] = Depends(session)) -> str:
        """The tenant of a state-changing request: it must carry this session's CSRF token."""
        if not csrf_ok(secret, who[1], request.headers.get(CSRF_HEADER)):
            raise HTTPException(403, "missing or wrong CSRF token")
        return who[0]

    def tenant_of(who: tuple[str, str] = Depends(session)) -> str:
        return who[0]

    return SessionGuards(session, tenant_of, changing)


def _within(
    limits: GatewayLimits, guard: Callable[..., str], *, questions: int = 0, reads: int = 0
) -> Callable[..., str]:
    """``guard``, then the tenant's limits: an inspector read counts against ``reads_per_s``, a question
    or forget from the page against ``questions_per_s``, as the API's do (429 with Retry-After)."""

    def admitted(tenant: str = Depends(guard)) -> str:
        limits.admit("/ui", tenant, questions=questions, reads=reads)
        return tenant

    return admitted


def _page_routes(router: APIRouter) -> None:
    """The page and its script and style, from the package."""

    @router.get("")
    async def page() -> Response:
        return Response(asset("index.html"), media_type="text/html; charset=utf-8")

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPException(404, "no such file")
        return Response(asset(name), media_type=ASSETS[name])


def _session_routes(
    router: APIRouter, settings: Settings, keys: TenantKeys, secret: bytes, guards: SessionGuards
) -> None:
    """Sign in with an API key (a session cookie and its CSRF token back), sign out, who am I."""

    @router.post("/login")
    async def login(body: LoginIn, request: Request) -> JSONResponse:
        tenant = keys.tenant(body.key)
        if tenant is None:
            raise HTTPException(401, "unknown API key")
        token = issue_session(secret, tenant, hash_key(body.key), settings.gateway_session_ttl_s)
        response = JSONResponse({"tenant_id": tenant, "csrf": csrf_token(secret, token)})
        response.set_cookie(
            SESSION_COOKIE,
            token,
            max_age=settings.gateway_session_ttl_s,
            path="/ui",
            httponly=True,
            secure=is_tls(request),
            samesite="strict",
        )
        return response

    @router.post("/logout")
    async def logout(_tenant: str = Depends(guards.changing)) -> JSONResponse:
        response = JSONResponse({"ok": True})
        response.delete_cookie(SESSION_COOKIE, path="/ui")
        return response

    @router.get("/api/session")
    async def whoami(who: tuple[str, str] = Depends(guards.session)) -> dict[str, Any]:
        return {"tenant_id": who[0], "csrf": csrf_token(secret, who[1])}


def _read_routes(router: APIRouter, shared: Any, tenant_of: Callable[..., str]) -> None:
    """The tenant's conversations, a timeline, a memory's lineage, a conversation's export."""

    @router.get("/api/conversations")
    async def conversations(tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        reply = await shared.call(lambda c: c.read("conversations", tenant_id=tenant))
        return reply.model_dump(mode="json")

    @router.get("/api/llm-usage")
    async def llm_usage(tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        """The tenant's LLM spend this budget window over every worker, and its budget."""
        return await tenant_llm_usage(shared.settings, tenant)

    @router.get("/api/imports")
    async def imports(tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        """The tenant's history imports: turns sent, let into the pipeline, remaining."""
        return await import_progress(shared.settings, tenant)

    @router.get("/api/conversations/{conversation_id}")
    async def timeline(
        conversation_id: str, cursor: int | None = None, limit: int = 2000, tenant: str = Depends(tenant_of)
    ):
        _check_id(conversation_id)
        reply = await shared.call(
            lambda c: c.read(
                "timeline", tenant_id=tenant, conversation_id=conversation_id, cursor=cursor, limit=min(limit, 5000)
            )
        )
        return _owned(reply, "conversation")

    @router.get("/api/memories/{point_id}")
    async def memory(point_id: str, tenant: str = Depends(tenant_of)) -> dict[str, Any]:
        _check_id(point_id)
        reply = await shared.call(lambda c: c.read("lineage", tenant_id=tenant, point_id=point_id))
        return _owned(reply, "memory")

    @router.get("/api/conversations/{conversation_id}/export")
    async def export(conversation_id: str, tenant: str = Depends(tenant_of)) -> StreamingResponse:
        _check_id(conversation_id)
        # The SDK's paging over request/reply; the first record decides 404 before anything is sent.
        records = (await shared.get()).export_remote(tenant_id=tenant, conversation_id=conversation_id)
        first = await shared.call(lambda _client: anext(records, None))
        if first is None:
            raise HTTPException(404, "no such conversation")

        async def lines() -> AsyncIterator[bytes]:
            yield orjson.dumps(first) + b"\n"
            async for record in records:
                yield orjson.dumps(record) + b"\n"

        return StreamingResponse(
            lines(),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{tenant}-{conversation_id}.jsonl"'},
        )


def _change_routes(router: APIRouter, shared: Any, changing: Callable[..., str]) -> None:
    """Questions and forgets from the page (each with the session's CSRF token)."""

    @router.post("/api/conversations/{conversation_id}/ask")
    async def ask(conversation_id: str, body: AskIn, tenant: str = Depends(changing)) -> dict[str, Any]:
        _check_id(conversation_id)
        reply = await shared.call(
            lambda c: c.ask(
                body.question,
                tenant_id=tenant,
                conversation_id=conversation_id,
                answer=body.answer,
                raise_on_error=False,
            )
        )
        return {**reply.model_dump(mode="json"), "trace_id": reply.trace_id}

    @router.post("/api/conversations/{conversation_id}/forget")
    async def forget(conversation_id: str, body: ForgetIn, tenant: str = Depends(changing)) -> dict[str, Any]:
        _check_id(conversation_id)
        outcome = await shared.call(
            lambda c: c.forget(
                tenant_id=tenant, conversation_id=conversation_id, speaker=body.speaker, turn_ids=body.turn_ids
            )
        )
        return {"forget_id": outcome.forget_id, "counts": outcome.counts}


def _owned(reply: ReadReply, what: str) -> dict[str, Any]:
    if not reply.found:  # another tenant's id reads exactly like one that does not exist
        raise HTTPException(404, f"no such {what}")
    return reply.model_dump(mode="json")


def _check_id(value: str) -> None:
    if not re.fullmatch(ID_PATTERN, value):
        raise HTTPException(404, "no such id")
