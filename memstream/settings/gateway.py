"""The gateway (memstream gateway: HTTP and MCP): where it listens, who may call it, its inspector."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class RateLimits(BaseModel):
    """A tenant's limits at the gateway, per second (unset: unlimited)."""

    turns_per_s: float | None = Field(None, gt=0, description="Turns remembered (/v1/turns, MCP remember, webhooks)")
    questions_per_s: float | None = Field(
        None, gt=0, description="Questions and forgets (/v1/ask, /v1/forget, MCP, the inspector's)"
    )
    bytes_per_s: float | None = Field(None, gt=0, description="Bytes of turn text remembered")
    reads_per_s: float | None = Field(
        None,
        gt=0,
        description="The inspector's reads (conversations, timelines, lineage, exports, LLM spend, imports); an "
        "open timeline polls every 2 s",
    )
    burst_s: float = Field(2.0, gt=0, description="A tenant may send this many seconds of its rate at once")


class GatewaySettings(BaseModel):
    """The gateway's address, tenants' keys, request limits and inspector sessions."""

    gateway_host: str = Field("127.0.0.1", description="Address the gateway listens on")
    gateway_port: int = Field(8480, ge=0, le=65535, description="Port of the gateway's HTTP API, /metrics and /mcp")
    gateway_api_keys: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Tenant -> SHA-256 hex digests of its API keys (JSON; `memstream gateway hash-key` makes "
        "one): a request's bearer key names its tenant; keys themselves are never stored",
    )
    gateway_max_request_bytes: int = Field(1024 * 1024, ge=1024, description="Largest request body (413 above)")
    gateway_slack_signing_secret: SecretStr | None = Field(
        None, description="Slack app signing secret: /v1/webhooks/slack refuses unsigned or stale requests"
    )
    gateway_retry_after_s: int = Field(5, ge=1, description="Retry-After of a 503 when the broker is unavailable")
    gateway_session_secret: SecretStr | None = Field(
        None,
        description="Signs the inspector's session cookies (/ui). Unset: a random secret per gateway process "
        "(sessions end when it restarts; gateways behind one address need the same secret)",
    )
    gateway_rate_limits: dict[str, RateLimits] = Field(
        default_factory=dict,
        description='Tenant -> its limits (JSON, e.g. {"*": {"turns_per_s": 50, "questions_per_s": 5}}); '
        "'*': every tenant not named. Over a limit a request gets 429 with Retry-After and nothing of it is "
        "written. Per gateway process: N gateways behind one address admit N times as much",
    )
    gateway_session_ttl_s: int = Field(12 * 3600, ge=60, description="How long an inspector session lasts")
