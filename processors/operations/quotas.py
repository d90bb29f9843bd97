"""Fair share between tenants: token buckets per tenant (turns, questions, reads and bytes per second), asked
all at once so that a request is admitted whole or refused whole, with how long to wait. Pure: the
caller passes the clock; no framework here (the gateway answers a refusal with 429 and Retry-After)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

EVERY_TENANT = "*"  # the limits of a tenant not named
SWEEP_EVERY = 1024  # admissions between two sweeps of full (idle) buckets


@dataclass(frozen=True)
class Rates:
    """A tenant's limits per second (None: unlimited); a bucket holds ``burst_s`` seconds of its rate."""

    turns_per_s: float | None = None
    questions_per_s: float | None = None
    bytes_per_s: float | None = None
    reads_per_s: float | None = None
    burst_s: float = 2.0

    def of(self, unit: str) -> float | None:
        return {
            "turns": self.turns_per_s,
            "questions": self.questions_per_s,
            "bytes": self.bytes_per_s,
            "reads": self.reads_per_s,
        }[unit]


@dataclass
class TokenBucket:
    rate: float  # tokens per second
    capacity: float
    tokens: float
    updated: float

    def refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + max(0.0, now - self.updated) * self.rate)
        self.updated = max(self.updated, now)

    def wait_s(self, cost: float) -> float:
        """Seconds until ``cost`` tokens are there (after ``refill``)."""
        return 0.0 if self.tokens >= cost else (cost - self.tokens) / self.rate


@dataclass(frozen=True)
class Admission:
    admitted: bool
    retry_after_s: float = 0.0  # refused: when the same request would be admitted (if nothing else came)
    limit: str = ""  # refused: which limit ("turns", "questions", "bytes", "reads")
    too_large: bool = False  # the request alone costs more than a full bucket: it never fits, split it
    detail: str = ""


@dataclass
class TenantLimiter:
    """Every tenant's buckets, made on first use from its limits (or ``*``'s)."""

    limits: Mapping[str, Rates]
    buckets: dict[tuple[str, str], TokenBucket] = field(default_factory=dict)
    _admissions: int = 0

    def rates(self, tenant: str) -> Rates | None:
        return self.limits.get(tenant) or self.limits.get(EVERY_TENANT)

    def admit(self, tenant: str, now: float, **costs: float) -> Admission:
        """Take ``costs`` (``turns=``, ``questions=``, ``bytes=``, ``reads=``) from ``tenant``'s buckets if every one
        holds enough; else take nothing and say how long to wait for the slowest."""
        rates = self.rates(tenant)
        if rates is None:
            return Admission(True)
        self._sweep(now)
        wanted: list[tuple[str, TokenBucket, float]] = []
        for unit, cost in costs.items():
            rate = rates.of(unit)
            if rate is None or cost <= 0:
                continue
            bucket = self._bucket(tenant, unit, rate, rates.burst_s, now)
            bucket.refill(now)
            if cost > bucket.capacity:
                return Admission(
                    False,
                    limit=unit,
                    too_large=True,
                    detail=f"{cost:g} {unit} in one request is more than tenant {tenant!r} may send at once "
                    f"({bucket.capacity:g}: {rate:g} {unit}/s for {rates.burst_s:g} s); split it",
                )
            wanted.append((unit, bucket, cost))
        waits = [(bucket.wait_s(cost), unit, bucket.rate) for unit, bucket, cost in wanted]
        wait, unit, rate = max(waits, default=(0.0, "", 0.0))
        if wait > 0:
            return Admission(
                False,
                retry_after_s=wait,
                limit=unit,
                detail=f"tenant {tenant!r} is over its limit of {rate:g} {unit}/s; retry after {math.ceil(wait)} s",
            )
        for _, bucket, cost in wanted:
            bucket.tokens -= cost
        return Admission(True)

    def _bucket(self, tenant: str, unit: str, rate: float, burst_s: float, now: float) -> TokenBucket:
        key = (tenant, unit)
        bucket = self.buckets.get(key)
        if bucket is None:
            capacity = max(1.0, rate * burst_s)
            bucket = self.buckets[key] = TokenBucket(rate, capacity, capacity, now)
        return bucket

    def _sweep(self, now: float) -> None:
        """A bucket that has refilled is the same as none: forgotten, so memory follows the tenants
        active lately, not every tenant ever seen."""
        self._admissions += 1
        if self._admissions % SWEEP_EVERY:
            return
        for key in [k for k, b in self.buckets.items() if b.tokens + (now - b.updated) * b.rate >= b.capacity]:
            del self.buckets[key]


# --- LLM budgets: calls and tokens per tenant per window, over every worker ----------------------


@dataclass(frozen=True)
class LlmBudget:
    """What a tenant's extraction and consolidation may spend on the LLM per window (None: no cap)."""

    calls: int | None = None
    tokens: int | None = None


@dataclass
class Usage:
    """One worker's spend for one tenant in one window (what it publishes; others add it up)."""

    calls: int = 0
    tokens: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)  # stage -> work done without the LLM (over budget)

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.tokens += other.tokens
        for stage, n in other.fallbacks.items():
            self.fallbacks[stage] = self.fallbacks.get(stage, 0) + n


def window_start(now: float, window_s: float) -> int:
    """The start (epoch seconds) of the budget window ``now`` is in: windows are aligned to the epoch,
    so every worker agrees on when a budget resets."""
    return int(now // window_s * window_s)


@dataclass
class UsageLedger:
    """Every worker's spend per tenant and window, as published (``merge``), plus this worker's own
    (``spend``, ``fell_back``). A tenant is over budget when the sum over workers reaches a cap; the
    sum may trail other workers' spend by the publishing interval (a few calls over, never unbounded)."""

    budgets: Mapping[str, LlmBudget]
    window_s: float
    worker: str
    usage: dict[tuple[str, int, str], Usage] = field(default_factory=dict)  # (tenant, window, worker)
    changed: set[tuple[str, int, str]] = field(default_factory=set)  # own entries not published yet

    def budget(self, tenant: str) -> LlmBudget | None:
        return self.budgets.get(tenant) or self.budgets.get(EVERY_TENANT)

    def used(self, tenant: str, now: float) -> Usage:
        window = window_start(now, self.window_s)
        total = Usage()
        for (t, w, _), usage in self.usage.items():
            if t == tenant and w == window:
                total.add(usage)
        return total

    def over_budget(self, tenant: str, now: float) -> bool:
        budget = self.budget(tenant)
        if budget is None or (budget.calls is None and budget.tokens is None):
            return False
        used = self.used(tenant, now)
        return (budget.calls is not None and used.calls >= budget.calls) or (
            budget.tokens is not None and used.tokens >= budget.tokens
        )

    def _own(self, tenant: str, now: float) -> Usage:
        key = (tenant, window_start(now, self.window_s), self.worker)
        self.changed.add(key)
        return self.usage.setdefault(key, Usage())

    def spend(self, tenant: str, now: float, calls: int, tokens: int) -> None:
        if calls or tokens:
            self._own(tenant, now).add(Usage(calls, tokens))

    def fell_back(self, tenant: str, now: float, stage: str) -> None:
        self._own(tenant, now).add(Usage(fallbacks={stage: 1}))

    def merge(self, tenant: str, window: int, worker: str, usage: Usage) -> None:
        """Another worker's published spend (its latest totals replace what was known of it). This
        worker's own entries are its to keep: a copy read back is never newer."""
        if worker != self.worker:
            self.usage[(tenant, window, worker)] = usage

    def unpublished(self) -> list[tuple[tuple[str, int, str], Usage]]:
        """Own entries changed since the last call (their totals, to publish)."""
        out = [(key, self.usage[key]) for key in sorted(self.changed)]
        self.changed.clear()
        return out

    def forget_before(self, now: float) -> None:
        """Windows before the current one no longer decide anything."""
        current = window_start(now, self.window_s)
        for key in [k for k in self.usage if k[1] < current]:
            del self.usage[key]
