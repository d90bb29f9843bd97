"""`memstream gateway`: the HTTP and MCP gateway, and its API keys."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from ._app import _settings, console, gateway


@gateway.callback(invoke_without_command=True)
def gateway_serve(
    ctx: typer.Context,
    host: Optional[str] = typer.Option(None, help="Listen address (default MEMSTREAM_GATEWAY_HOST)"),
    port: Optional[int] = typer.Option(None, help="Port (default MEMSTREAM_GATEWAY_PORT)"),
) -> None:
    """Serve the HTTP API (/v1/turns, /v1/ask, /v1/forget, /v1/webhooks/slack, /healthz, /metrics),
    the MCP server (/mcp) and the inspector (/ui) in the foreground. Stateless: run as many as the load needs."""
    if ctx.invoked_subcommand is not None:
        return
    import uvicorn

    from memstream.gateway.http import create_app

    s = _settings()
    if not s.gateway_api_keys:
        console.print("[yellow]no MEMSTREAM_GATEWAY_API_KEYS: every keyed request will get 401[/]")
    where = f"http://{host or s.gateway_host}:{port or s.gateway_port}"
    console.print(
        f"memstream gateway at {where}: the API under /v1, MCP at /mcp, the inspector at {where}/ui", soft_wrap=True
    )
    uvicorn.run(create_app(s), host=host or s.gateway_host, port=port or s.gateway_port, log_level="warning")


@gateway.command("hash-key")
def gateway_hash_key(key: str = typer.Argument(..., help="An API key to give a tenant")) -> None:
    """The SHA-256 digest to list under the tenant in MEMSTREAM_GATEWAY_API_KEYS (the key itself is
    never configured)."""
    from memstream.gateway.auth import hash_key

    sys.stdout.write(hash_key(key) + "\n")


@gateway.command("mcp")
def gateway_mcp(tenant: str = typer.Option(..., help="The tenant this stdio server reads and writes")) -> None:
    """The MCP server over stdio (for agent frameworks that start their tools as processes): the
    remember, recall and forget tools, for one tenant."""
    import logging

    from memstream.gateway.auth import TenantKeys
    from memstream.gateway.http import SharedClient
    from memstream.gateway.mcp_server import build_mcp_server

    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # stdout is the protocol; logs go to stderr
    build_mcp_server(SharedClient(_settings()), TenantKeys({}), stdio_tenant=tenant).run("stdio")
