"""One message through its stage's handler: a span in the message's trace, retries of a failure, a
vector-store outage held until the store answers, and a dead letter for what cannot be handled."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from faust.types import EventT

from memstream.config import Settings
from memstream.metrics import Metrics, trace_exemplar
from memstream.ports import StoreUnavailable
from memstream.schemas import SchemaError
from memstream.schemas.background import is_background
from memstream.schemas.signature import header_value
from memstream.tracing import Span, SpanKind, Tracing

from ..stages.api import Handler, Record
from .fence import Fenced
from .output import Output
from .priority import BACKGROUND, QuestionsFirst

log = logging.getLogger(__name__)


@dataclass
class Handling:
    """What happens to a message between its admission and the commit bookkeeping: once ``run``
    returns, its effect is durable or dead-lettered (``Fenced`` escapes: it is not finished)."""

    s: Settings
    tracing: Tracing
    metrics: Metrics
    output: Output
    questions_first: QuestionsFirst | None = None  # None: nothing goes first (a handling outside a worker)

    async def run(self, stage: str, event: EventT, handler: Handler) -> None:
        msg = event.message
        # One span per handling, a child of the context the message carries (its producer's, or the
        # stage's before it); a redelivery after a crash is a second span in the same trace.
        with self.tracing.span(
            f"memstream.{stage}",
            parent=self.tracing.context_of(msg.headers),
            kind=SpanKind.CONSUMER,
            attributes=handling_attributes(stage, msg),
        ) as span:
            marked = BACKGROUND.set(False)  # until the record or its stage says otherwise
            try:
                await self._attempts(stage, event, handler, span)
            finally:
                BACKGROUND.reset(marked)

    async def _attempts(self, stage: str, event: EventT, handler: Handler, span: Span) -> None:
        record = record_of(event)
        raw = record.value
        self.metrics.messages_in.labels(stage).inc()
        started = time.perf_counter()
        attempt = outage = 0
        if record.background and self.questions_first is not None:
            await self.questions_first.wait()
        while True:
            try:
                result = await handler(record)
                await self.output.produce(stage, result.outputs)
                span.set_attribute("memstream.messages_out", len(result.outputs))
                self.metrics.latency.labels(stage).observe(time.perf_counter() - started, trace_exemplar())
                return
            except Fenced:
                raise
            except SchemaError as exc:
                await self.output.dead_letter(stage, event, raw, str(exc), exc)
                self.tracing.fail(span, str(exc)[:300])
                return
            except StoreUnavailable as exc:
                # An outage, not bad input: the message is held (its partition with it, nothing commits)
                # and tried again until the store answers, however long that takes.
                outage += 1
                self.metrics.store_outages.labels(stage).inc()
                if outage == 1 or outage % 20 == 0:
                    log.warning(
                        "%s: vector store unavailable, holding %s[%s]@%s and trying again (%d): %s",
                        stage,
                        event.message.topic,
                        event.message.partition,
                        event.message.offset,
                        outage,
                        exc,
                    )
                await asyncio.sleep(min(0.25 * 2**outage, 10.0))
            except Exception as exc:  # anything else: retry, then dead-letter
                self.metrics.errors.labels(stage).inc()
                log.exception(
                    "%s failed on %s[%s]@%s (attempt %d)",
                    stage,
                    event.message.topic,
                    event.message.partition,
                    event.message.offset,
                    attempt + 1,
                )
                if attempt == self.s.processing_retries:
                    await self.output.dead_letter(stage, event, raw, f"processing failed: {exc}", exc)
                    self.tracing.fail(span, f"processing failed: {exc}"[:300])
                    return
                await asyncio.sleep(min(2.0**attempt * 0.2, 5.0))
                attempt += 1


def record_of(event: EventT) -> Record:
    """What a handler is given of a consumed message."""
    msg = event.message
    raw: bytes = event.value if isinstance(event.value, bytes) else bytes(event.value or b"")
    headers = msg.headers
    traceparent, signature = Tracing.traceparent(headers), header_value(headers)
    key = raw_key(msg.key)
    return Record(raw, msg.timestamp, msg.partition, msg.offset, traceparent, key, signature, is_background(headers))


def raw_key(key: Any) -> bytes | None:
    """A consumed record's key as bytes (None: the record has none)."""
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    return str(key).encode()


def handling_attributes(stage: str, msg: Any) -> dict[str, Any]:
    """What a handling span says of its message: where it came from, and whose it is (the key's
    tenant); no text, no names."""
    key = msg.key.decode("utf-8", "replace") if isinstance(msg.key, bytes) else (str(msg.key) if msg.key else "")
    attributes: dict[str, Any] = {
        "memstream.stage": stage,
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": msg.topic,
        "messaging.destination.partition.id": str(msg.partition),
        "messaging.kafka.offset": msg.offset,
    }
    if "/" in key:
        attributes["memstream.tenant_id"] = key.split("/", 1)[0]
    return attributes
