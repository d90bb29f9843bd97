"""``MemoryClient``: ``AsyncMemoryClient`` for synchronous code, on a private event loop thread."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any, Callable, Concatenate, Coroutine, ParamSpec, TypeVar

from memstream.config import Settings

from .async_client import AsyncMemoryClient
from .errors import MemstreamError

T = TypeVar("T")
P = ParamSpec("P")


def _blocking(
    method: Callable[Concatenate[AsyncMemoryClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[MemoryClient, P], T]:
    """``MemoryClient``'s version of an ``AsyncMemoryClient`` method: the same call, blocking."""

    @functools.wraps(method)
    def call(self: MemoryClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._client, *args, **kwargs))

    return call


class MemoryClient:
    """The SDK for synchronous code: ``AsyncMemoryClient``'s methods, blocking, on a private event
    loop thread (safe to call from several threads; calls run one at a time on that loop)."""

    def __init__(self, settings: Settings | None = None, **options: Any):
        self._client = AsyncMemoryClient(settings, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def settings(self) -> Settings:
        return self._client.settings

    def __enter__(self) -> MemoryClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memstream-client", daemon=True)
        self._thread.start()
        try:
            self._run(self._client.start())
        except BaseException:
            self._stop_loop()
            raise

    def close(self) -> None:
        if self._loop is None:
            return
        try:
            self._run(self._client.close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
        self._loop = self._thread = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            coro.close()
            raise MemstreamError("the client is not started: use `with MemoryClient(...)` or start()")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # AsyncMemoryClient's calls, blocking: each runs on the client's loop thread and its result (or
    # error) comes back here; signatures and docs are the async ones.
    remember = _blocking(AsyncMemoryClient.remember)
    import_history = _blocking(AsyncMemoryClient.import_history)
    ingest = _blocking(AsyncMemoryClient.ingest)
    ask = _blocking(AsyncMemoryClient.ask)
    forget = _blocking(AsyncMemoryClient.forget)
    read = _blocking(AsyncMemoryClient.read)
    flush = _blocking(AsyncMemoryClient.flush)
    consolidate = _blocking(AsyncMemoryClient.consolidate)
