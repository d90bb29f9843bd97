"""infra/toxiproxy and memstream.bench.toxiproxy: a Toxiproxy server on free loopback ports in front of
a small TCP server of the test's own, each toxic the chaos bench uses doing what it says, and gone once
removed. Toxiproxy is built from the Go module proxy the first time (scripts/test_tools.sh does it)."""

from __future__ import annotations

import os
import socket
import socketserver
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from memstream.bench.deployment import free_port
from memstream.bench.toxiproxy import (
    SCRIPT,
    Proxy,
    Toxiproxy,
    ToxiproxyError,
    bandwidth,
    latency,
    reset_peer,
    start_toxiproxy,
    timeout,
)

pytestmark = pytest.mark.integration

IO_TIMEOUT_S = 10.0  # every socket call of the test: nothing waits without bound


class LineServer(socketserver.StreamRequestHandler):
    """Echoes each line; ``bulk N`` is answered with N bytes."""

    def handle(self) -> None:
        try:
            for line in self.rfile:  # ends when the client (or the proxy) closes
                if line.startswith(b"bulk "):
                    self.wfile.write(b"x" * int(line.split()[1]))
                else:
                    self.wfile.write(line)
                self.wfile.flush()
        except ConnectionResetError:  # the reset_peer toxic's doing: what the test wants
            pass


@pytest.fixture(scope="module")
def upstream() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), LineServer)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Toxiproxy]:
    server = start_toxiproxy(free_port(), tmp_path_factory.mktemp("toxiproxy"))
    client = server.client()
    try:
        yield client
    finally:
        client.close()
        server.stop()
    assert not (server.data_dir / "toxiproxy.pid").exists()


@pytest.fixture
def proxy(api: Toxiproxy, upstream: int, request: pytest.FixtureRequest) -> Iterator[Proxy]:
    made = api.create_proxy(request.node.name[:40], f"127.0.0.1:{upstream}")
    try:
        yield made
    finally:
        api.delete_proxy(made.name)


def exchange(port: int, line: bytes, expect: int) -> tuple[bytes, float]:
    """Send ``line`` through 127.0.0.1:``port``, read ``expect`` bytes (less if the connection ends):
    what came back and the seconds it took."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(line)
        data = b""
        while len(data) < expect:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data, time.monotonic() - t0


def test_a_proxy_forwards_and_is_listed(api: Toxiproxy, proxy: Proxy):
    assert api.version()
    assert proxy.address.startswith("127.0.0.1:") and proxy.port > 0
    assert api.proxies()[proxy.name].upstream == proxy.upstream
    assert exchange(proxy.port, b"hello\n", 6)[0] == b"hello\n"


def test_latency_adds_at_least_its_delay_until_removed(api: Toxiproxy, proxy: Proxy):
    with api.toxic_for(proxy.name, latency("slow", 400, jitter_ms=50)) as toxic:
        assert [t.name for t in api.toxics(proxy.name)] == [toxic.name]
        data, took = exchange(proxy.port, b"ping\n", 5)
        assert data == b"ping\n" and took >= 0.35  # 400 ms less the jitter at most
    assert api.toxics(proxy.name) == []
    assert exchange(proxy.port, b"ping\n", 5)[1] < 0.3


def test_reset_peer_resets_the_connection_mid_call(api: Toxiproxy, proxy: Proxy):
    with api.toxic_for(proxy.name, reset_peer("reset", after_ms=100)):
        with pytest.raises(ConnectionResetError):
            exchange(proxy.port, b"ping\n", 5)  # the request went through, the reply never comes
    assert exchange(proxy.port, b"ping\n", 5)[0] == b"ping\n"


def test_timeout_hangs_then_closes(api: Toxiproxy, proxy: Proxy):
    with api.toxic_for(proxy.name, timeout("hang", close_after_ms=700)):
        data, took = exchange(proxy.port, b"ping\n", 5)
        assert data == b"" and 0.6 <= took < IO_TIMEOUT_S
    assert exchange(proxy.port, b"ping\n", 5)[0] == b"ping\n"


def test_bandwidth_slows_a_transfer_until_removed(api: Toxiproxy, proxy: Proxy):
    size = 100 * 1024
    with api.toxic_for(proxy.name, bandwidth("thin", kb_per_s=50)):
        data, took = exchange(proxy.port, f"bulk {size}\n".encode(), size)
        assert len(data) == size and took >= 1.5  # 100 KB at 50 KB/s: about 2 s
    data, took = exchange(proxy.port, f"bulk {size}\n".encode(), size)
    assert len(data) == size and took < 0.5


def test_toxic_for_removes_it_after_its_seconds_even_inside_the_block(api: Toxiproxy, proxy: Proxy):
    with api.toxic_for(proxy.name, latency("brief", 500), seconds=0.5):
        deadline = time.monotonic() + 5
        while api.toxics(proxy.name) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert api.toxics(proxy.name) == []
    assert exchange(proxy.port, b"ping\n", 5)[1] < 0.3


def test_a_disabled_proxy_refuses_connections(api: Toxiproxy, proxy: Proxy):
    assert not api.set_enabled(proxy.name, False).enabled
    with pytest.raises(ConnectionRefusedError):
        exchange(proxy.port, b"ping\n", 5)
    assert api.set_enabled(proxy.name, True).enabled
    assert exchange(proxy.port, b"ping\n", 5)[0] == b"ping\n"


def test_the_api_names_what_it_refuses(api: Toxiproxy):
    with pytest.raises(ToxiproxyError, match="404"):
        api.remove_toxic("no-such-proxy", "none")


def test_the_script_reads_a_relative_data_folder_against_its_caller(tmp_path: Path):
    env = {**os.environ, "MEMSTREAM_TOXIPROXY_PORT": str(free_port()), "MEMSTREAM_TOXIPROXY_DATA": "rel"}

    def script(verb: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), verb], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )

    assert script("start").returncode == 0
    try:
        assert (tmp_path / "rel" / "toxiproxy.pid").exists()
        assert script("status").stdout.startswith("running")
    finally:
        assert script("stop").returncode == 0
    assert script("status").returncode == 3
