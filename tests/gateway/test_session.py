"""The inspector's session cookie and CSRF token (pure)."""

from __future__ import annotations

from memstream.gateway.session import csrf_ok, csrf_token, issue_session, read_session

SECRET = b"s" * 32


def test_a_session_names_its_tenant_and_key_digest_until_it_expires() -> None:
    token = issue_session(SECRET, "acme", "d" * 64, ttl_s=60, now=1000.0)
    assert read_session(SECRET, token, now=1059.0) == ("acme", "d" * 64)
    assert read_session(SECRET, token, now=1060.0) is None


def test_a_tampered_or_foreign_session_is_refused() -> None:
    token = issue_session(SECRET, "acme", "d" * 64, ttl_s=60, now=1000.0)
    other = issue_session(SECRET, "globex", "e" * 64, ttl_s=60, now=1000.0)
    body, sig = token.split(".")
    assert read_session(SECRET, other.split(".")[0] + "." + sig, now=1001.0) is None  # another body, this signature
    assert read_session(b"x" * 32, token, now=1001.0) is None  # another secret
    for junk in (None, "", "abc", "a.b.c", body + ".", "." + sig):
        assert read_session(SECRET, junk, now=1001.0) is None


def test_the_csrf_token_belongs_to_its_session() -> None:
    a = issue_session(SECRET, "acme", "d" * 64, ttl_s=60)
    b = issue_session(SECRET, "acme", "d" * 64, ttl_s=120)
    assert csrf_ok(SECRET, a, csrf_token(SECRET, a))
    assert not csrf_ok(SECRET, a, csrf_token(SECRET, b))
    assert not csrf_ok(SECRET, a, None) and not csrf_ok(SECRET, None, csrf_token(SECRET, a))
