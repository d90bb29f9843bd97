"""API keys by digest and Slack's request signatures (pure)."""

from __future__ import annotations

import pytest

from memstream.gateway.auth import TenantKeys, bearer, hash_key, slack_signature, verify_slack


def test_a_key_names_its_tenant_and_only_its_digest_is_configured():
    keys = TenantKeys({"acme": [hash_key("k-acme"), "sha256:" + hash_key("k-acme-2")], "globex": [hash_key("k-g")]})
    assert keys.tenant("k-acme") == "acme" and keys.tenant("k-acme-2") == "acme"
    assert keys.tenant("k-g") == "globex"
    assert keys.tenant("k-acme ") is None and keys.tenant("") is None and keys.tenant(None) is None
    assert not TenantKeys({})


def test_a_digest_that_is_not_sha256_hex_is_refused_at_start():
    with pytest.raises(ValueError, match="tenant 'acme'"):
        TenantKeys({"acme": ["k-acme"]})  # a key pasted where its digest belongs


def test_bearer_takes_the_key_of_a_bearer_header_only():
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None and bearer("Bearer") is None and bearer(None) is None


def test_slack_requests_need_the_apps_signature_and_a_fresh_timestamp():
    body = b'{"type":"event_callback"}'
    sig = slack_signature("s3cret", "1700000000", body)
    assert verify_slack("s3cret", "1700000000", sig, body, now=1700000100) is None
    assert verify_slack("other", "1700000000", sig, body, now=1700000100) == "bad signature"
    assert verify_slack("s3cret", "1700000000", sig, body + b" ", now=1700000100) == "bad signature"
    assert "stale" in verify_slack("s3cret", "1700000000", sig, body, now=1700000000 + 301)
    assert "missing" in verify_slack("s3cret", None, sig, body)
    assert "unix time" in verify_slack("s3cret", "yesterday", sig, body)
