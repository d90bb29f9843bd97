"""Who is calling: per-tenant API keys (only their SHA-256 digests are configured) and Slack's
request signatures. Pure functions: no HTTP framework here."""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Mapping

# Slack refuses requests older than five minutes (replays); so do we.
SLACK_MAX_AGE_S = 300


def hash_key(key: str) -> str:
    """The digest to configure for an API key (``MEMSTREAM_GATEWAY_API_KEYS``)."""
    return hashlib.sha256(key.encode()).hexdigest()


class TenantKeys:
    """Tenant of a presented API key, by constant-time comparison of digests."""

    def __init__(self, digests: Mapping[str, list[str]]):
        self._by_digest: dict[str, str] = {}
        for tenant, hashes in digests.items():
            for digest in hashes:
                digest = digest.strip().lower().removeprefix("sha256:")
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError(f"API key digest of tenant {tenant!r} is not a SHA-256 hex digest")
                self._by_digest[digest] = tenant

    def __bool__(self) -> bool:
        return bool(self._by_digest)

    def tenant(self, key: str | None) -> str | None:
        return self.tenant_by_digest(hash_key(key)) if key else None

    def tenant_by_digest(self, presented: str) -> str | None:
        found = None
        for digest, tenant in self._by_digest.items():  # no early exit: timing says nothing
            if hmac.compare_digest(digest, presented):
                found = tenant
        return found


def bearer(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header."""
    if not authorization:
        return None
    scheme, _, key = authorization.partition(" ")
    return key.strip() if scheme.lower() == "bearer" and key.strip() else None


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def verify_slack(
    secret: str, timestamp: str | None, signature: str | None, body: bytes, now: float | None = None
) -> str | None:
    """None when the request is Slack's (signed with the app's secret, fresh), else why not."""
    if not timestamp or not signature:
        return "missing X-Slack-Request-Timestamp or X-Slack-Signature"
    try:
        sent = int(timestamp)
    except ValueError:
        return "X-Slack-Request-Timestamp is not a unix time"
    if abs((now if now is not None else time.time()) - sent) > SLACK_MAX_AGE_S:
        return "stale request (more than 5 minutes old): a replay?"
    if not hmac.compare_digest(slack_signature(secret, timestamp, body), signature):
        return "bad signature"
    return None
