"""Records a tenant must prove: the signature binds key, value and the tenant's secret; rotation keeps
every listed secret valid; the reasons say what is wrong (no broker needed)."""

from __future__ import annotations

import pytest

from memstream.schemas.signature import (
    HEADER,
    SignatureRefused,
    check_signature,
    header_value,
    sign,
    signature_problem,
)

A_NEW, A_OLD, B = b"a-secret-2026-12-xx", b"a-secret-2026-06-xx", b"b-secret-2026-12-xx"
SECRETS = {"a": [("2026-12", A_NEW), ("2026-06", A_OLD)], "b": [("k1", B)]}
KEY, VALUE = b"a/conv-1", b'{"kind":"turn","tenant_id":"a","text":"hello"}'


def test_a_signed_record_verifies_with_the_first_secret_of_its_keys_tenant():
    name, header = sign(SECRETS, KEY, VALUE)
    assert name == HEADER and header.startswith(b"2026-12:")
    assert signature_problem(SECRETS, KEY, VALUE, header) is None
    check_signature(SECRETS, KEY, VALUE, header)


def test_a_changed_value_or_key_does_not_verify_with_the_same_signature():
    _, header = sign(SECRETS, KEY, VALUE)
    assert "does not match" in signature_problem(SECRETS, KEY, VALUE.replace(b"hello", b"HELLO"), header)
    assert "does not match" in signature_problem(SECRETS, b"a/conv-2", VALUE, header)
    # Bytes moved between key and value: the key's length is signed too.
    assert "does not match" in signature_problem(SECRETS, b"a/conv-1{", VALUE[1:], header)


def test_one_tenants_secret_cannot_sign_for_another():
    mallory = {"b": [("k1", A_NEW)]}  # holds A's secret, claims it is B's key id
    _, header = sign(mallory, b"b/conv-1", VALUE)
    assert "does not match" in signature_problem(SECRETS, b"b/conv-1", VALUE, header)
    _, a_header = sign(SECRETS, KEY, VALUE)
    assert "not a write secret of tenant 'b'" in signature_problem(SECRETS, b"b/conv-1", VALUE, a_header)


def test_during_rotation_both_secrets_verify_and_a_removed_one_no_longer_does():
    old_signer = {"a": [("2026-06", A_OLD)]}
    _, old_header = sign(old_signer, KEY, VALUE)
    assert signature_problem(SECRETS, KEY, VALUE, old_header) is None
    after = {"a": [("2026-12", A_NEW)]}
    assert "not a write secret" in signature_problem(after, KEY, VALUE, old_header)


@pytest.mark.parametrize(
    ("key", "header", "reason"),
    [
        (KEY, None, "unsigned record for tenant 'a'"),
        (KEY, b"no-colon", "malformed"),
        (KEY, b"\xff:ab", "malformed"),
        (None, b"2026-12:ab", "no tenant in the record key"),
        (b"no-slash", b"2026-12:ab", "no tenant in the record key"),
        (b"c/conv", b"2026-12:ab", "not a write secret of tenant 'c'"),
    ],
)
def test_each_refusal_says_why(key, header, reason):
    assert reason in signature_problem(SECRETS, key, VALUE, header)
    with pytest.raises(SignatureRefused, match=reason.split("'")[0]):
        check_signature(SECRETS, key, VALUE, header)


def test_a_signer_without_the_tenants_secret_leaves_the_record_unsigned():
    assert sign(SECRETS, b"c/conv-1", VALUE) is None
    assert sign(SECRETS, None, VALUE) is None
    assert sign({}, KEY, VALUE) is None


def test_the_header_is_found_among_others_whatever_their_shape():
    _, header = sign(SECRETS, KEY, VALUE)
    assert header_value([("traceparent", b"00-..."), (HEADER, header)]) == header
    assert header_value({HEADER: header}) == header
    assert header_value([("traceparent", b"x")]) is None and header_value(None) is None
