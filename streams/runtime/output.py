"""What a worker publishes: records that carry their trace context, a handler's outputs (acknowledged
by the broker before the source offset may commit) and dead letters."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Sequence

import faust
from faust.types import EventT

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.schemas import DeadLetter
from memstream.schemas.background import background_header
from memstream.schemas.signature import sign
from memstream.schemas.topics import SIGNED_TOPICS
from memstream.tracing import SpanKind, Tracing

from ..stages.api import Out
from .fence import FreezeFence
from .priority import BACKGROUND

log = logging.getLogger(__name__)


@dataclass
class Output:
    """The worker's producer side, over the faust app's producer."""

    app: faust.App
    s: Settings
    tracing: Tracing
    metrics: Metrics
    fence: FreezeFence  # no writes from a worker that was frozen until its group has rebalanced
    _topics: dict[str, faust.TopicT] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        # What this worker writes to an input topic (a forget moving on, a consolidate command) is
        # signed like a producer's record: the stage that reads it checks it the same way.
        self._secrets = self.s.write_secrets
        self._signed = {self.s.topic(name) for name in SIGNED_TOPICS}

    async def send(
        self, topic: str, key: bytes, value: bytes, partition: int | None = None, *, traceparent: str | None = None
    ) -> Awaitable[Any]:
        """Publish now, carrying ``traceparent`` or else the current span's trace context; returns
        the delivery future.

        ``force=True`` bypasses faust's attachments, which would hold the message until the source
        offset commits -- a wait on it from inside the handler would never end.
        """
        if topic not in self._topics:
            self._topics[topic] = self.app.topic(
                topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
            )
        headers = [("traceparent", traceparent.encode())] if traceparent else self.tracing.headers()
        if BACKGROUND.get():  # made by background work: the stage that reads it lets questions go first
            headers = [*(headers or []), background_header()]
        if self._secrets and topic in self._signed:
            signature = sign(self._secrets, key, value)
            if signature:
                headers = [*(headers or []), signature]
        return await self._topics[topic].send(
            key=key, value=value, partition=partition, headers=headers or None, force=True
        )

    async def produce(self, stage: str, outputs: Sequence[Out]) -> None:
        """Send and wait for the broker's ack: the source offset commits only after this returns."""
        self.fence.check()
        futures = []
        for out in outputs:
            futures.append(
                await self.send(
                    out.topic, out.key.encode(), out.value.to_bytes(), out.partition, traceparent=out.traceparent
                )
            )
            self.metrics.messages_out.labels(stage).inc()
        for fut in futures:
            await fut

    async def dead_letter(self, stage: str, event: EventT, raw: bytes, reason: str, exc: BaseException) -> None:
        msg = event.message
        key = msg.key.decode("utf-8", "replace") if isinstance(msg.key, bytes) else (str(msg.key) if msg.key else None)
        letter = DeadLetter(
            stage=stage,
            reason=reason[:2000],
            error_type=type(exc).__name__,
            topic=msg.topic,
            partition=msg.partition,
            offset=msg.offset,
            key=key,
            tenant_id=key.split("/", 1)[0] if key and "/" in key else None,
            original_b64=DeadLetter.encode(raw),
            original_size=len(raw),
            failed_at=datetime.now(timezone.utc),
        )
        short = getattr(exc, "label", None) or reason.split(":", 1)[0][:60]  # KeyMismatch, SignatureRefused
        self.metrics.dead_letters.labels(stage, short).inc()
        with self.tracing.span("memstream.dlq", kind=SpanKind.PRODUCER, attributes={"memstream.stage": stage}) as span:
            self.tracing.fail(span, reason[:300])
            log.warning(
                "dead letter from %s (%s[%s]@%s): %s", stage, msg.topic, msg.partition, msg.offset, reason[:300]
            )
            await (await self.send(self.s.topic("dlq"), (key or "").encode(), letter.to_bytes()))
