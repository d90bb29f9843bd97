"""The inspector's browser session: a signed cookie naming the tenant and the digest of the key that
opened it (never the key), and the CSRF token derived from it. Pure functions: no HTTP here.

A session ends when it expires, when its key is no longer configured (revoking a key closes its
sessions at once: every request checks the digest), or when the secret changes."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import orjson

SESSION_COOKIE = "memstream_session"
CSRF_HEADER = "x-csrf-token"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: bytes, body: str) -> str:
    return _b64(hmac.new(secret, body.encode(), hashlib.sha256).digest())


def issue_session(secret: bytes, tenant_id: str, key_digest: str, ttl_s: float, now: float | None = None) -> str:
    """``<body>.<signature>``: the body holds the tenant, the key's digest and the expiry."""
    now = time.time() if now is None else now
    body = _b64(orjson.dumps({"t": tenant_id, "k": key_digest, "exp": int(now + ttl_s)}))
    return f"{body}.{_sign(secret, body)}"


def read_session(secret: bytes, token: str | None, now: float | None = None) -> tuple[str, str] | None:
    """(tenant, key digest) of a valid, unexpired token; None for anything else."""
    if not token or token.count(".") != 1:
        return None
    body, signature = token.split(".")
    if not hmac.compare_digest(_sign(secret, body), signature):
        return None
    try:
        data = orjson.loads(_unb64(body))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("exp"), int):
        return None
    if (time.time() if now is None else now) >= data["exp"]:
        return None
    tenant, digest = data.get("t"), data.get("k")
    return (tenant, digest) if isinstance(tenant, str) and isinstance(digest, str) else None


def csrf_token(secret: bytes, session: str) -> str:
    """The token every state-changing request of this session must send in ``X-CSRF-Token``: bound
    to the session, so a token of another session (or none) is refused."""
    return _sign(secret, "csrf:" + session)


def csrf_ok(secret: bytes, session: str | None, presented: str | None) -> bool:
    return bool(session and presented) and hmac.compare_digest(csrf_token(secret, session or ""), presented or "")
