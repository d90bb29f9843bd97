"""memstream's Python SDK: remember turns, ask questions, forget, consolidate and export, over the
same Kafka topics the workers read.

``AsyncMemoryClient`` is the asyncio client; ``MemoryClient`` is the same API for synchronous code
(it runs the async client on a private event loop thread). Both take their broker address and
security options from ``Settings`` (``MEMSTREAM_*``), like the workers::

    from memstream.client import MemoryClient

    with MemoryClient() as memory:
        memory.remember(turns)
        reply = memory.ask("Where did Caroline move from?", tenant_id="acme", conversation_id="c1")

Errors are typed: ``BrokerUnavailable`` (Kafka cannot be reached), ``QueryTimeout`` (no reply in
time: no worker runs that stage, or it is behind), ``ReplyError`` (the worker answered with an
error), ``MemstreamError`` for the rest; bad payloads raise ``SchemaError`` before anything is sent.

Inside: the calls (``async_client.py``) on one producer (``kafka.py``) and one reader of the reply
topic (``replies.py``); chat-platform events (``ingest.py``); the blocking client (``sync.py``).
"""

from memstream.schemas import Reply, Turn

from .async_client import AsyncMemoryClient, ConsolidationScope, Profile, as_turn, wait_written
from .errors import BrokerUnavailable, MemstreamError, QueryTimeout, ReadError, ReplyError
from .outcomes import ForgetOutcome, IngestOutcome
from .sync import MemoryClient

__all__ = [
    "AsyncMemoryClient",
    "BrokerUnavailable",
    "ConsolidationScope",
    "ForgetOutcome",
    "IngestOutcome",
    "MemoryClient",
    "MemstreamError",
    "Profile",
    "QueryTimeout",
    "ReadError",
    "ReplyError",
    "Reply",
    "Turn",
    "as_turn",
    "wait_written",
]
