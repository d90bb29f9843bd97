"""The errors the SDK raises."""

from __future__ import annotations

from memstream.schemas import Reply
from memstream.schemas.read import ReadReply


class MemstreamError(Exception):
    """Base of the errors the SDK raises."""


class BrokerUnavailable(MemstreamError, ConnectionError):
    """Kafka cannot be reached (not started, wrong address or credentials, or it went away)."""


class QueryTimeout(MemstreamError, TimeoutError):
    """No reply arrived within the timeout."""


class ReplyError(MemstreamError):
    """The worker replied, with an error (an invalid query, one past its deadline, a store failure)."""

    def __init__(self, reply: Reply):
        self.reply = reply
        super().__init__(f"query {reply.correlation_id} failed: {reply.error}")


class ReadError(MemstreamError):
    """The worker could not read what was asked (the store failed): the reply says why."""

    def __init__(self, reply: ReadReply):
        self.reply = reply
        super().__init__(f"{reply.read} read {reply.correlation_id} failed: {reply.error}")
