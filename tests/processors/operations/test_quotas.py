"""Token buckets per tenant: a request is admitted whole or refused whole with how long to wait;
each tenant has its own buckets; the '*' limits cover tenants not named; idle buckets are forgotten."""

from __future__ import annotations

import pytest

from memstream.processors.operations.quotas import SWEEP_EVERY, Rates, TenantLimiter


def limiter(**limits: Rates) -> TenantLimiter:
    return TenantLimiter({k.replace("every", "*"): v for k, v in limits.items()})


def test_a_tenant_sends_its_burst_then_waits_as_long_as_its_rate_says():
    quotas = limiter(every=Rates(turns_per_s=10, burst_s=2))  # 20 at once, then 10 a second
    assert quotas.admit("acme", 0.0, turns=20).admitted
    refused = quotas.admit("acme", 0.0, turns=5)
    assert not refused.admitted and refused.limit == "turns" and refused.retry_after_s == pytest.approx(0.5)
    assert "over its limit of 10 turns/s" in refused.detail
    assert quotas.admit("acme", 0.5, turns=5).admitted  # exactly when it was told


def test_a_refused_request_takes_nothing_from_any_bucket():
    quotas = limiter(every=Rates(turns_per_s=10, bytes_per_s=100, burst_s=1))
    assert quotas.admit("acme", 0.0, turns=1, bytes=90).admitted
    refused = quotas.admit("acme", 0.0, turns=5, bytes=50)  # turns fit, bytes do not
    assert not refused.admitted and refused.limit == "bytes" and refused.retry_after_s == pytest.approx(0.4)
    assert quotas.admit("acme", 0.0, turns=9).admitted  # the refused request's 5 turns were not taken


def test_tenants_do_not_share_buckets_and_named_limits_win_over_the_default():
    quotas = limiter(every=Rates(questions_per_s=1, burst_s=1), vip=Rates(questions_per_s=100, burst_s=1))
    assert quotas.admit("acme", 0.0, questions=1).admitted
    assert not quotas.admit("acme", 0.0, questions=1).admitted
    assert quotas.admit("other", 0.0, questions=1).admitted  # acme's flood costs other nothing
    assert all(quotas.admit("vip", 0.0, questions=1).admitted for _ in range(100))


def test_without_limits_or_for_an_unlimited_unit_everything_is_admitted():
    assert TenantLimiter({}).admit("acme", 0.0, turns=10**6).admitted
    quotas = limiter(acme=Rates(questions_per_s=1))
    assert quotas.admit("acme", 0.0, turns=10**6, bytes=10**9).admitted
    assert quotas.admit("unnamed", 0.0, questions=10**6).admitted  # no '*': unnamed tenants unlimited


def test_a_request_larger_than_a_full_bucket_is_told_to_split_not_to_wait():
    refused = limiter(every=Rates(turns_per_s=10, burst_s=2)).admit("acme", 0.0, turns=21)
    assert not refused.admitted and refused.too_large and "split it" in refused.detail


def test_buckets_of_tenants_idle_long_enough_to_refill_are_forgotten():
    quotas = limiter(every=Rates(turns_per_s=1, burst_s=1))
    for n in range(SWEEP_EVERY - 1):
        quotas.admit(f"t{n}", 0.0, turns=1)
    assert len(quotas.buckets) == SWEEP_EVERY - 1
    quotas.admit("late", 10.0, turns=1)  # every earlier bucket has refilled by now
    assert list(quotas.buckets) == [("late", "turns")]
