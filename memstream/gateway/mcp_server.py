"""The MCP server: ``remember``, ``recall`` and ``forget`` tools over the same SDK client as the HTTP
API. Over streamable HTTP (mounted at ``/mcp`` by the gateway) the caller's API key names the tenant;
over stdio the process serves one tenant, given when it starts."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from memstream.schemas import Turn
from memstream.schemas.base import ID_PATTERN
from memstream.schemas.text import isolated_reply

from .auth import TenantKeys, bearer

if TYPE_CHECKING:
    from .http import SharedClient
    from .limits import GatewayLimits

INSTRUCTIONS = (
    "Long-term memory of conversations. `remember` stores messages of a conversation; `recall` returns "
    "the evidence (and, if asked, an answer) for a question about one conversation, with the ids of the "
    "turns it came from; `forget` erases turns and everything derived from them."
)


class Message(BaseModel):
    """One message to remember."""

    speaker: str = Field(min_length=1, max_length=200, description="Who said it (display name)")
    text: str = Field(min_length=1)
    role: Literal["user", "assistant", "system", "other"] = "user"
    turn_id: str | None = Field(
        None, pattern=ID_PATTERN, description="Stable id (the platform's message id): remembering it again is a no-op"
    )
    event_time: datetime | None = Field(None, description="When it was said (default: now)")


def message_turn(message: Message, tenant_id: str, conversation_id: str, session_id: str | None) -> Turn:
    when = message.event_time or datetime.now(timezone.utc)
    return Turn(
        tenant_id=tenant_id,
        conversation_id=conversation_id,
        session_id=session_id or when.astimezone(timezone.utc).strftime("%Y-%m-%d"),
        turn_id=message.turn_id or f"m{uuid.uuid4().hex[:16]}",
        speaker=message.speaker,
        role=message.role,
        text=message.text,
        event_time=when,  # type: ignore[arg-type]
        metadata={"via": "mcp"},
    )


def build_mcp_server(
    shared: SharedClient, keys: TenantKeys, *, stdio_tenant: str | None = None, limits: GatewayLimits | None = None
) -> MCPServer:
    """The tools, bound to ``shared`` (the process's SDK client). A request over HTTP carries an API
    key (``Authorization: Bearer``) that names its tenant; over stdio ``stdio_tenant`` is the tenant.
    ``limits``: the gateway's, shared with its HTTP routes (a tool over them fails with the reason)."""
    server: MCPServer = MCPServer("memstream", instructions=INSTRUCTIONS)

    def tenant_of(ctx: Context) -> str:
        headers = ctx.headers
        if headers is None:
            if stdio_tenant is None:
                raise PermissionError("this MCP server has no tenant (start it with --tenant)")
            return stdio_tenant
        tenant = keys.tenant(bearer(headers.get("authorization")))
        if tenant is None:
            raise PermissionError("missing or unknown API key (Authorization: Bearer <key>)")
        return tenant

    @server.tool()
    async def remember(
        conversation_id: str, messages: list[Message], ctx: Context, session_id: str | None = None
    ) -> dict[str, Any]:
        """Remember messages of a conversation (acknowledged by the broker when this returns; the
        memories are searchable within seconds)."""
        tenant = tenant_of(ctx)
        turns = [message_turn(m, tenant, conversation_id, session_id) for m in messages]
        if limits is not None:
            limits.admit("/mcp", tenant, turns=turns)
        sent = await shared.call(lambda c: c.remember(turns))
        return {"remembered": sent, "turn_ids": [t.turn_id for t in turns]}

    @server.tool()
    async def recall(
        question: str, conversation_id: str, ctx: Context, k: int | None = None, answer: bool = False
    ) -> dict[str, Any]:
        """The evidence memstream finds for a question about a conversation: memory cards, scenes
        and raw turns with the ids of the turns they came from; with ``answer`` also an answer."""
        tenant = tenant_of(ctx)
        if limits is not None:
            limits.admit("/mcp", tenant, questions=1)
        asked = await shared.call(
            lambda c: c.ask(question, tenant_id=tenant, conversation_id=conversation_id, k=k, answer=answer)
        )
        reply = isolated_reply(asked)  # shown to a model and to people: bidi controls isolated
        return {
            "answer": reply.answer,
            "profile": reply.profile_text,
            "evidence": [
                {
                    "id": e.evidence_id,
                    "kind": e.kind,
                    "text": e.text,
                    "turn_ids": e.turn_ids,
                    "event_time": e.event_time.isoformat() if e.event_time else None,
                    "score": round(e.score, 4),
                }
                for e in reply.evidence
            ],
        }

    @server.tool()
    async def forget(
        ctx: Context,
        conversation_id: str | None = None,
        turn_ids: list[str] | None = None,
        speaker: str | None = None,
    ) -> dict[str, Any]:
        """Forget turns (of a conversation, a speaker, or given turn ids) and every memory derived
        from them; returns what each place removed."""
        tenant = tenant_of(ctx)
        if limits is not None:
            limits.admit("/mcp", tenant, questions=1)
        outcome = await shared.call(
            lambda c: c.forget(
                tenant_id=tenant, conversation_id=conversation_id, speaker=speaker, turn_ids=turn_ids or ()
            )
        )
        return {"forget_id": outcome.forget_id, "counts": outcome.counts}

    return server
