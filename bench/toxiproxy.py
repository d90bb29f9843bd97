"""A small typed client of Toxiproxy's HTTP API (infra/toxiproxy/toxiproxy.sh runs the server): TCP
proxies on loopback and the toxics that degrade their traffic. ``memstream bench chaos
--network-faults`` puts the LLM server, Qdrant and Kafka behind it.

Every call is one HTTP request with a timeout, so nothing here waits without bound."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, cast

import httpx

from memstream.streams.runtime import INFRA

ToxicKind = Literal["latency", "reset_peer", "timeout", "bandwidth", "limit_data"]
Stream = Literal["upstream", "downstream"]  # upstream: client -> server; downstream: server -> client
HOST = "127.0.0.1"  # proxies listen on loopback only
SCRIPT = INFRA / "toxiproxy" / "toxiproxy.sh"


@dataclass(frozen=True)
class Toxic:
    """One toxic: ``kind`` with its attributes (milliseconds, KB/s or bytes, by kind) on one direction."""

    name: str
    kind: ToxicKind
    attributes: Mapping[str, int] = field(default_factory=dict)
    stream: Stream = "downstream"
    toxicity: float = 1.0  # the share of connections it applies to

    def body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.kind,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Toxic:
        return cls(
            name=data["name"],
            kind=cast(ToxicKind, data["type"]),
            attributes={k: int(v) for k, v in (data.get("attributes") or {}).items()},
            stream=cast(Stream, data.get("stream", "downstream")),
            toxicity=float(data.get("toxicity", 1.0)),
        )


def latency(name: str, ms: int, jitter_ms: int = 0, stream: Stream = "downstream") -> Toxic:
    """Every chunk of data waits ``ms`` ± ``jitter_ms`` before it goes on."""
    return Toxic(name, "latency", {"latency": ms, "jitter": jitter_ms}, stream)


def reset_peer(name: str, after_ms: int = 0, stream: Stream = "downstream") -> Toxic:
    """A connection's first chunk in ``stream`` is dropped and the connection reset (TCP RST) ``after_ms``
    later: on downstream, a call whose request went through and whose reply never comes."""
    return Toxic(name, "reset_peer", {"timeout": after_ms}, stream)


def timeout(name: str, close_after_ms: int, stream: Stream = "downstream") -> Toxic:
    """Data is swallowed and the connection closed ``close_after_ms`` later (0: never): a hang."""
    return Toxic(name, "timeout", {"timeout": close_after_ms}, stream)


def bandwidth(name: str, kb_per_s: int, stream: Stream = "downstream") -> Toxic:
    """At most ``kb_per_s`` KB a second through each connection."""
    return Toxic(name, "bandwidth", {"rate": kb_per_s}, stream)


def limit_data(name: str, max_bytes: int, stream: Stream = "downstream") -> Toxic:
    """The connection is closed once ``max_bytes`` went through it."""
    return Toxic(name, "limit_data", {"bytes": max_bytes}, stream)


@dataclass(frozen=True)
class Proxy:
    name: str
    listen: str  # host:port
    upstream: str  # host:port
    enabled: bool = True

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def address(self) -> str:
        """Where clients connect instead of the upstream."""
        return f"{HOST}:{self.port}"

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Proxy:
        return cls(data["name"], data["listen"], data["upstream"], bool(data.get("enabled", True)))


class ToxiproxyError(RuntimeError):
    """The API refused a request (its status and message), or the server could not be started."""


class Toxiproxy:
    """The API of one Toxiproxy server (thread-safe: httpx's client is)."""

    def __init__(self, url: str, timeout_s: float = 10.0):
        self.url = url
        self._http = httpx.Client(base_url=url, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Toxiproxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        response = self._http.request(method, path, json=body)
        if response.status_code >= 400:
            raise ToxiproxyError(f"{method} {path}: {response.status_code} {response.text.strip()}")
        return response.json() if response.content else None

    def version(self) -> str:
        return self._http.get("/version").raise_for_status().text.strip()

    def proxies(self) -> dict[str, Proxy]:
        return {name: Proxy.from_api(data) for name, data in self._call("GET", "/proxies").items()}

    def create_proxy(self, name: str, upstream: str, listen_port: int = 0) -> Proxy:
        """A proxy listening on 127.0.0.1:``listen_port`` (0: a free port, read back) to ``upstream``
        (host:port; it need not answer yet: a connection to the proxy then fails as it would)."""
        body = {"name": name, "listen": f"{HOST}:{listen_port}", "upstream": upstream, "enabled": True}
        return Proxy.from_api(self._call("POST", "/proxies", body))

    def delete_proxy(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    def set_enabled(self, name: str, enabled: bool) -> Proxy:
        """A disabled proxy closes its connections and refuses new ones: the service is unreachable."""
        return Proxy.from_api(self._call("POST", f"/proxies/{name}", {"enabled": enabled}))

    def toxics(self, proxy: str) -> list[Toxic]:
        return [Toxic.from_api(t) for t in self._call("GET", f"/proxies/{proxy}/toxics")]

    def add_toxic(self, proxy: str, toxic: Toxic) -> Toxic:
        """Applied at once, to the proxy's open connections too."""
        return Toxic.from_api(self._call("POST", f"/proxies/{proxy}/toxics", toxic.body()))

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def reset(self) -> None:
        """Every proxy enabled, every toxic removed."""
        self._call("POST", "/reset")

    @contextlib.contextmanager
    def toxic_for(self, proxy: str, toxic: Toxic, seconds: float | None = None) -> Iterator[Toxic]:
        """``toxic`` on ``proxy`` inside the block, removed when it ends or after ``seconds``, whichever
        comes first (a timer thread removes it, so a block that blocks is not poisoned for longer)."""
        added = self.add_toxic(proxy, toxic)
        removed = threading.Lock()
        done: list[bool] = []

        def remove() -> None:
            with removed:
                if not done:
                    done.append(True)
                    with contextlib.suppress(ToxiproxyError):  # the proxy went first
                        self.remove_toxic(proxy, added.name)

        timer = threading.Timer(seconds, remove) if seconds is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            yield added
        finally:
            if timer is not None:
                timer.cancel()
            remove()


@dataclass
class ToxiproxyServer:
    """A server started by infra/toxiproxy/toxiproxy.sh in its own data folder; ``stop`` ends it."""

    port: int
    data_dir: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def client(self, timeout_s: float = 10.0) -> Toxiproxy:
        return Toxiproxy(self.url, timeout_s)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "MEMSTREAM_TOXIPROXY_PORT": str(self.port),
            "MEMSTREAM_TOXIPROXY_DATA": str(self.data_dir),
        }

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=self.env(), capture_output=True, timeout=60, check=False)


def start_toxiproxy(port: int, data_dir: Path, *, build_timeout_s: float = 900.0) -> ToxiproxyServer:
    """Start a Toxiproxy server with its API on 127.0.0.1:``port``, pid and log in ``data_dir``; the
    first call builds it with Go (a minute or so; later calls find the binary in the cache)."""
    if not SCRIPT.exists():
        raise ToxiproxyError(f"{SCRIPT} not found: network faults need a source checkout (infra/toxiproxy)")
    server = ToxiproxyServer(port, data_dir.resolve())
    try:
        result = subprocess.run(
            ["bash", str(SCRIPT), "start"], env=server.env(), capture_output=True, text=True, timeout=build_timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        server.stop()
        raise ToxiproxyError(f"toxiproxy.sh start took over {build_timeout_s:.0f}s") from exc
    if result.returncode != 0:
        raise ToxiproxyError(f"toxiproxy.sh start failed:\n{result.stdout}\n{result.stderr[-3000:]}")
    return server
