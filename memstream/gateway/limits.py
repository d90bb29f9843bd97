"""Each tenant's fair share at the gateway (``MEMSTREAM_GATEWAY_RATE_LIMITS``): a request is admitted
whole or refused whole before anything of it is sent, so a refused batch leaves nothing half-written.
Refused: 429 with Retry-After (or 413 when the request alone is more than the tenant may send at once),
counted by route and limit (no tenant label: thousands of tenants would be thousands of series)."""

from __future__ import annotations

import math
import time
from typing import Iterable

from prometheus_client import Counter

from memstream.config import Settings
from memstream.processors.operations.quotas import Admission, Rates, TenantLimiter
from memstream.schemas import Turn


class OverLimit(Exception):
    """A request refused by its tenant's limits: the HTTP app answers 429 (or 413), MCP an error."""

    def __init__(self, admission: Admission):
        super().__init__(admission.detail)
        self.admission = admission

    @property
    def status(self) -> int:
        return 413 if self.admission.too_large else 429

    @property
    def retry_after(self) -> str:
        return str(max(1, math.ceil(self.admission.retry_after_s)))


class GatewayLimits:
    """The gateway process's buckets, one set per tenant."""

    def __init__(self, settings: Settings, refused: Counter):
        rates = {tenant: Rates(**limits.model_dump()) for tenant, limits in settings.gateway_rate_limits.items()}
        self.limiter = TenantLimiter(rates)
        self.refused = refused  # memstream_gateway_rate_limited_total{route, limit}

    def admit(self, route: str, tenant: str, *, turns: Iterable[Turn] = (), questions: int = 0, reads: int = 0) -> None:
        """Raises ``OverLimit`` unless ``tenant`` may send this now (the tokens are then taken)."""
        turns = list(turns)
        text_bytes = sum(len(t.text.encode()) for t in turns)
        admission = self.limiter.admit(
            tenant, time.monotonic(), turns=len(turns), questions=questions, bytes=text_bytes, reads=reads
        )
        if not admission.admitted:
            self.refused.labels(route, admission.limit).inc()
            raise OverLimit(admission)
