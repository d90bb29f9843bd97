"""Records a tenant must prove (docs/security.md): with tenant write secrets configured, every record on
an input topic carries ``memstream-signature: <key id>:<hex HMAC-SHA256>`` over its key and value,
made with a secret of the tenant the key names. Whoever holds only tenant A's secrets cannot write,
ask, read or forget in tenant B, on a topic every producer may write to (Kafka ACLs cannot tell
tenants apart there). Several secrets per tenant are valid at once, so a secret can rotate: the
first listed signs, every listed verifies."""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Iterable, Mapping, Sequence

from .base import SchemaError

HEADER = "memstream-signature"
# The signed bytes start with this: a signature made for anything else never verifies here.
DOMAIN = b"memstream-signature-v1\0"
# ``secrets`` below: tenant id -> [(key id, secret)], the signing one first. The tenant ``*`` signs
# what concerns every tenant (a consolidate command keyed ``*/*``): an operator's secret.
TenantSecrets = Mapping[str, Sequence[tuple[str, bytes]]]


class SignatureRefused(SchemaError):
    """A record on an input topic whose signature is missing, malformed, or not made with a secret of
    the tenant its key names: a dead letter, nothing of it applied."""

    label = "bad signature"  # the dead-letter metric's reason (bounded)


def digest(secret: bytes, key: bytes, value: bytes) -> str:
    """HMAC-SHA256 over the domain, the key (length-prefixed, so key and value cannot trade bytes)
    and the value."""
    return hmac.new(secret, DOMAIN + struct.pack(">I", len(key)) + key + value, hashlib.sha256).hexdigest()


def key_tenant(key: bytes | None) -> str | None:
    """The tenant a record key (``tenant/conversation``, ``tenant/*``) names; None: no such key."""
    if not key or b"/" not in key:
        return None
    try:
        return key.split(b"/", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        return None


def sign(secrets: TenantSecrets, key: bytes | None, value: bytes) -> tuple[str, bytes] | None:
    """The signature header of a record, made with the first secret of its key's tenant; None when
    this signer holds no secret of that tenant (the record goes unsigned, and a verifying stage
    refuses it)."""
    tenant = key_tenant(key)
    keys = secrets.get(tenant) if tenant is not None else None
    if not keys or key is None:
        return None
    key_id, secret = keys[0]
    return HEADER, f"{key_id}:{digest(secret, key, value)}".encode()


def header_value(
    headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None, header: str = HEADER
) -> bytes | None:
    """The ``header`` (by default the signature) a consumed record carries (the last one, if it
    carries several); names are compared without case."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    found = None
    for name, value in items:
        if name and name.lower() == header:
            found = value if isinstance(value, bytes) else str(value).encode()
    return found


def signature_problem(secrets: TenantSecrets, key: bytes | None, value: bytes, header: bytes | None) -> str | None:
    """Why a consumed record's signature does not prove its key's tenant wrote it; None when it does."""
    tenant = key_tenant(key)
    if tenant is None or key is None:
        return "no tenant in the record key to check the signature against"
    if header is None:
        return f"unsigned record for tenant {tenant!r} (tenant write secrets are configured)"
    try:
        key_id, _, given = header.decode("ascii").partition(":")
    except UnicodeDecodeError:
        key_id, given = "", ""
    if not key_id or not given:
        return f"malformed {HEADER} header (expected '<key id>:<hex digest>')"
    secret = dict(secrets.get(tenant, ())).get(key_id)
    if secret is None:
        return f"key id {key_id!r} is not a write secret of tenant {tenant!r}"
    if not hmac.compare_digest(given, digest(secret, key, value)):
        return f"signature does not match key and value for tenant {tenant!r} (key id {key_id!r})"
    return None


def check_signature(secrets: TenantSecrets, key: bytes | None, value: bytes, header: bytes | None) -> None:
    """Raises ``SignatureRefused`` with the reason when the record is not proven."""
    problem = signature_problem(secrets, key, value, header)
    if problem:
        raise SignatureRefused(problem)
