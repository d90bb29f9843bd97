"""Token buckets per tenant: a request is admitted whole or refused whole with how long to wait;
each tenant has its own buckets; the '*' limits cover tenants not named; idle buckets are forgotten."""

from __future__ import annotations

import pytest

from memstream.processors.operations.quotas import (
    SWEEP_EVERY,
    LlmBudget,
    Rates,
    TenantLimiter,
    Usage,
    UsageLedger,
    window_start,
)


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


def test_reads_have_a_bucket_of_their_own_that_questions_do_not_spend():
    quotas = limiter(every=Rates(questions_per_s=1, reads_per_s=2, burst_s=1))
    assert quotas.admit("acme", 0.0, reads=2).admitted
    refused = quotas.admit("acme", 0.0, reads=1)
    assert not refused.admitted and refused.limit == "reads" and refused.retry_after_s == pytest.approx(0.5)
    assert "over its limit of 2 reads/s" in refused.detail
    assert quotas.admit("acme", 0.0, questions=1).admitted  # the page's reads leave its questions alone
    assert quotas.admit("acme", 0.5, reads=1).admitted


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


# --- LLM budgets ---------------------------------------------------------------------------------

HOUR = 3600.0


def ledger(worker: str = "w1", **budgets: LlmBudget) -> UsageLedger:
    return UsageLedger({k.replace("every", "*"): v for k, v in budgets.items()}, HOUR, worker)


def test_a_tenant_is_over_budget_once_its_calls_or_tokens_reach_the_cap_and_not_before():
    spend = ledger(every=LlmBudget(calls=3, tokens=1000))
    spend.spend("acme", 10.0, calls=2, tokens=500)
    assert not spend.over_budget("acme", 10.0)
    spend.spend("acme", 11.0, calls=1, tokens=10)
    assert spend.over_budget("acme", 11.0)  # calls
    spend.spend("globex", 11.0, calls=1, tokens=1000)
    assert spend.over_budget("globex", 11.0)  # tokens
    assert not spend.over_budget("initech", 11.0)


def test_the_budget_resets_when_the_window_ends_on_every_worker_alike():
    spend = ledger(every=LlmBudget(calls=1))
    spend.spend("acme", HOUR - 1, calls=1, tokens=0)
    assert spend.over_budget("acme", HOUR - 1)
    assert not spend.over_budget("acme", HOUR)  # windows are aligned to the epoch: a fresh one
    assert window_start(HOUR * 5 + 17, HOUR) == int(HOUR * 5)
    spend.forget_before(HOUR)
    assert spend.usage == {}


def test_other_workers_published_spend_counts_and_their_latest_totals_replace_earlier_ones():
    mine = ledger(every=LlmBudget(calls=10))
    mine.spend("acme", 5.0, calls=4, tokens=0)
    mine.merge("acme", 0, "w2", Usage(calls=3))
    mine.merge("acme", 0, "w2", Usage(calls=5))  # w2's running total now
    assert mine.used("acme", 5.0).calls == 9 and not mine.over_budget("acme", 5.0)
    mine.merge("acme", 0, "w3", Usage(calls=1))
    assert mine.over_budget("acme", 5.0)
    mine.merge("acme", 0, "w1", Usage(calls=0))  # its own totals read back: ignored, never newer
    assert mine.used("acme", 5.0).calls == 10


def test_only_changed_own_totals_are_published_once_each():
    mine = ledger(every=LlmBudget(calls=10))
    mine.spend("acme", 5.0, calls=1, tokens=20)
    mine.fell_back("acme", 6.0, "extract")
    mine.merge("globex", 0, "w2", Usage(calls=1))
    [(key, usage)] = mine.unpublished()
    assert key == ("acme", 0, "w1") and (usage.calls, usage.tokens, usage.fallbacks) == (1, 20, {"extract": 1})
    assert mine.unpublished() == []


def test_without_a_budget_nobody_is_ever_over():
    spend = ledger(acme=LlmBudget(calls=None, tokens=None))
    spend.spend("acme", 1.0, calls=10**6, tokens=10**9)
    assert not spend.over_budget("acme", 1.0) and not spend.over_budget("other", 1.0)
