"""The Qdrant server as memstream reaches it: one or more nodes of one cluster by URL.

Any node of a Qdrant cluster answers for the whole collection (it forwards to the replicas it does
not hold), so a client needs one node that is up. ``QdrantNodes`` sends each call to the node that
answered last and moves on to the next when it cannot be reached; when none answers, the call
raises :class:`memstream.ports.StoreUnavailable`, which the stages treat as an outage (hold the
message, retry) rather than bad input. Behind a load balancer or a Kubernetes Service, give its one
URL. Everything qdrant-client specific about failing over lives here.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Sequence

from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from memstream.ports import StoreUnavailable

log = logging.getLogger(__name__)


def split_urls(url: str) -> list[str]:
    """``MEMSTREAM_QDRANT_URL`` may list a cluster's nodes, comma-separated."""
    urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
    if not urls:
        raise ValueError("no Qdrant URL given")
    return urls


def unreachable(exc: BaseException) -> bool:
    """The node could not be reached or could not serve (connection refused, timeout, 5xx: a node
    stopping, or the replicas of a shard all gone), as opposed to a request it refused (4xx)."""
    if isinstance(exc, ResponseHandlingException):  # httpx transport errors, wrapped
        return True
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code is not None and exc.status_code >= 500
    return isinstance(exc, (ConnectionError, TimeoutError))


class QdrantNodes:
    """qdrant-client over the nodes of one cluster: ``nodes.upsert(...)`` is ``QdrantClient.upsert``
    on a node that answers."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        api_key: str | None = None,
        timeout_s: int = 30,
        connect: Callable[..., Any] = QdrantClient,
    ):
        self.urls = list(urls)
        # check_compatibility: the client's version check warns on every start against a server two
        # minor versions apart; the contract tests run against the server itself instead.
        self._clients = [
            connect(url=url, api_key=api_key, timeout=timeout_s, check_compatibility=False) for url in self.urls
        ]
        self._current = 0
        self._lock = threading.Lock()

    @property
    def current_url(self) -> str:
        return self.urls[self._current]

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(method, *args, **kwargs)

        return call

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` on the current node, then on each other node once; every write memstream makes
        is idempotent (deterministic ids, payload patches), so a call repeated on another node after
        the first may have landed is safe."""
        last: BaseException | None = None
        for _ in range(len(self._clients)):
            index = self._current
            try:
                return getattr(self._clients[index], method)(*args, **kwargs)
            except Exception as exc:
                if not unreachable(exc):
                    raise
                last = exc
                with self._lock:
                    if self._current == index:  # another thread may have moved on already
                        self._current = (index + 1) % len(self._clients)
                if len(self._clients) > 1:
                    log.warning("Qdrant node %s unreachable (%s): trying %s", self.urls[index], exc, self.current_url)
        raise StoreUnavailable(f"no Qdrant node answers ({', '.join(self.urls)}): {last}") from last

    def close(self) -> None:
        for client in self._clients:
            client.close()
