"""An isolated memstream deployment on a shared broker: its own topic prefix, consumer group and
data folder, with workers as subprocesses. Integration tests and benchmarks run on it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Iterator, Mapping, TypeVar

from memstream.adapters import open_existing_store
from memstream.client import AsyncMemoryClient, ForgetOutcome, wait_written
from memstream.config import Settings, absolute_path
from memstream.ports import VectorStore
from memstream.schemas import DeadLetter, Reply, Turn
from memstream.schemas.base import ID_PATTERN
from memstream.schemas.topics import DRAIN_TOPICS, Topic
from memstream.streams import runtime
from memstream.streams.lag import topics_lag, wait_drained
from memstream.streams.topic_reading import message_count, read_messages
from memstream.streams.topics import ensure_topics
from memstream.topology import group_id, reading_groups

T = TypeVar("T")


# Below the kernel's ephemeral ports (32768-60999 here) and the harness's service ports (19092 and up:
# clusters, own brokers, Qdrant, Jaeger): a port the kernel handed out (bind to 0) was free when asked,
# yet any client connection may take it as its local port before the worker binds it (a CI run's
# chaos worker failed on EADDRINUSE so).
FREE_PORTS = range(10_000, 19_000)
TAKEN_BY_DEFAULT = {16685, 16686}  # Jaeger's query API


def free_port() -> int:
    """A port free on 127.0.0.1 now, drawn at random outside the ephemeral range."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.choice(FREE_PORTS)
        if port in TAKEN_BY_DEFAULT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {FREE_PORTS}")


@dataclass
class GatewayProcess:
    """A ``memstream gateway`` subprocess, listening on ``url``."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def spawn_gateway(env: Mapping[str, str], log_path: Path, timeout_s: float = 60.0) -> GatewayProcess:
    """Start a gateway with ``env`` (MEMSTREAM_* settings) on a free port; returns once it serves."""
    import httpx

    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "memstream.streams.cli", "gateway", "--port", str(port)],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    gateway = GatewayProcess(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the gateway exited ({process.returncode}): {log_path.read_text()[-2000:]}")
        try:
            httpx.get(gateway.url + "/metrics", timeout=2)
            return gateway
        except httpx.TransportError:
            time.sleep(0.3)
    gateway.stop()
    raise RuntimeError(f"the gateway did not serve within {timeout_s:.0f}s: {log_path.read_text()[-2000:]}")


def kafka_security_env(settings: Settings) -> dict[str, str]:
    """The broker security settings as MEMSTREAM_* variables, for worker processes."""
    if settings.kafka_security_protocol == "PLAINTEXT":
        return {}
    env = {
        "MEMSTREAM_KAFKA_SECURITY_PROTOCOL": settings.kafka_security_protocol,
        "MEMSTREAM_KAFKA_SASL_MECHANISM": settings.kafka_sasl_mechanism,
        "MEMSTREAM_KAFKA_SSL_CHECK_HOSTNAME": str(settings.kafka_ssl_check_hostname).lower(),
    }
    if settings.kafka_sasl_username and settings.kafka_sasl_password:
        env["MEMSTREAM_KAFKA_SASL_USERNAME"] = settings.kafka_sasl_username
        env["MEMSTREAM_KAFKA_SASL_PASSWORD"] = settings.kafka_sasl_password.get_secret_value()
    for name in ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile"):
        if getattr(settings, name):
            env[f"MEMSTREAM_{name.upper()}"] = str(getattr(settings, name))
    return env


def settings_of_env(env: Mapping[str, str]) -> Settings:
    """The settings a worker started with ``env`` reads: as pydantic-settings reads the environment,
    a JSON value of a mapping or list setting (tenant secrets, budgets, limits) is parsed."""
    values: dict[str, object] = {}
    for key, value in env.items():
        name = key.removeprefix("MEMSTREAM_").lower()
        complex_value = name in Settings.model_fields and value[:1] in ("{", "[")
        values[name] = json.loads(value) if complex_value else value
    return Settings.model_validate(values)


class Deployment:
    """One isolated deployment: nothing of another deployment's topics or memories is visible."""

    MANIFEST = "deployment.json"

    def __init__(
        self, base: Settings, data_dir: Path, extra_env: Mapping[str, str] | None = None, *, prefix: str | None = None
    ):
        prefix = prefix or f"t{uuid.uuid4().hex[:10]}"
        data_dir = absolute_path(data_dir)  # its workers get it absolute: their directory does not matter
        data_dir.mkdir(parents=True, exist_ok=True)
        # What a later run needs to pick this deployment up again (its topics, consumer group, store).
        (data_dir / self.MANIFEST).write_text(json.dumps({"topic_prefix": prefix}) + "\n")
        self.env = {
            "MEMSTREAM_KAFKA_BOOTSTRAP": base.kafka_bootstrap,
            **kafka_security_env(base),
            # On a cluster, the base's replication reaches the topics this deployment creates and its workers.
            "MEMSTREAM_TOPIC_REPLICATION_FACTOR": str(base.topic_replication_factor),
            "MEMSTREAM_TOPIC_MIN_INSYNC_REPLICAS": str(base.topic_min_insync_replicas),
            "MEMSTREAM_TOPIC_PREFIX": prefix,
            "MEMSTREAM_DATA_DIR": str(data_dir),
            "MEMSTREAM_METRICS_PORT": str(free_port()),
            **(extra_env or {}),
        }
        self.settings = settings_of_env(self.env)
        self.workers: list[runtime.WorkerProcess] = []
        self.gateways: list[GatewayProcess] = []
        self.stage_sets: list[tuple[str, ...]] = []  # of the workers started (each set is a consumer group)
        asyncio.run(ensure_topics(self.settings))

    @classmethod
    def reopen(cls, base: Settings, data_dir: Path, extra_env: Mapping[str, str] | None = None) -> Deployment:
        """The deployment that was created in ``data_dir``: same topics, consumer group and store."""
        manifest = data_dir / cls.MANIFEST
        if not manifest.exists():
            raise FileNotFoundError(f"{manifest} not found: {data_dir} holds no deployment")
        return cls(base, data_dir, extra_env, prefix=json.loads(manifest.read_text())["topic_prefix"])

    @property
    def group(self) -> str:
        """The consumer group of the default stage set (all stages, unless MEMSTREAM_STAGES says otherwise)."""
        return group_id(self.settings.topic_prefix, self.settings.stage_list())

    def reading(self, topics: Iterable[str]) -> dict[str, list[str]]:
        """Consumer group -> the full names of ``topics`` it reads, over the stage sets started."""
        stage_sets = self.stage_sets or [tuple(self.settings.stage_list())]
        return reading_groups(self.settings.topic_prefix, stage_sets, topics)

    def start_worker(
        self,
        name: str = "worker",
        *,
        stages: str | None = None,
        env: Mapping[str, str] | None = None,
        wait: bool = True,
    ) -> runtime.WorkerProcess:
        """A worker of ``stages`` (comma-separated; default: the deployment's), with its own metrics port
        (the deployment's MEMSTREAM_METRICS_PORT for the first one running). ``wait=False``: returns
        once spawned, so several start side by side (``wait_ready`` then)."""
        taken = {w.metrics_port for w in self.workers}
        port = int(self.env["MEMSTREAM_METRICS_PORT"])
        port = port if port not in taken else free_port()
        w = runtime.spawn_worker(
            {**self.env, "MEMSTREAM_METRICS_PORT": str(port), **(env or {})},
            self.settings.data_dir / "logs" / f"{name}.log",
            stages=stages,
            metrics_port=port,
        )
        chosen = tuple(
            self.settings.model_copy(update={"stages": stages}).stage_list() if stages else self.settings.stage_list()
        )
        if chosen not in self.stage_sets:
            self.stage_sets.append(chosen)
        self.workers.append(w)
        if wait:
            runtime.wait_worker_ready(w)
        return w

    def wait_ready(self) -> None:
        """Until every worker of the deployment serves."""
        for w in self.workers:
            runtime.wait_worker_ready(w)

    def stop_workers(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []
        for g in self.gateways:
            g.stop()
        self.gateways = []

    def start_gateway(self, api_keys: Mapping[str, str], env: Mapping[str, str] | None = None) -> GatewayProcess:
        """A gateway of this deployment; ``api_keys``: tenant -> key (configured as its digest)."""
        from memstream.gateway.auth import hash_key

        digests = {tenant: [hash_key(key)] for tenant, key in api_keys.items()}
        gateway = spawn_gateway(
            {**self.env, "MEMSTREAM_GATEWAY_API_KEYS": json.dumps(digests), **(env or {})},
            self.settings.data_dir / "logs" / f"gateway-{len(self.gateways)}.log",
        )
        self.gateways.append(gateway)
        return gateway

    def _call(self, call: Callable[[AsyncMemoryClient], Awaitable[T]]) -> T:
        """One call of a client of this deployment, on an event loop of its own (its callers are synchronous)."""

        async def go() -> T:
            async with AsyncMemoryClient(self.settings) as client:
                return await call(client)

        return asyncio.run(go())

    def produce(self, turns: Iterable[Turn], on_sent=None) -> int:
        return self._call(lambda client: client.remember(turns, on_sent=on_sent))

    def produce_raw(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._call(lambda client: client.send_raw(self.settings.topic(topic), key, value))

    def drain(
        self,
        timeout_s: float = 240.0,
        *,
        topics: Iterable[str] = DRAIN_TOPICS,
        progress: Callable[[dict[str, int]], None] | None = None,
        flush: bool = True,
    ) -> float:
        """Wait until the workers have committed everything on ``topics`` (all stages by default);
        returns when (``time.monotonic()``) they had. ``progress`` sees the lag per topic meanwhile.
        ``flush``: then write what every conversation on ``memory.turns`` (however it got there) holds in
        its window and buffer (``AsyncMemoryClient.flush``) and wait again, so every turn is in memory."""
        reading = self.reading(topics)
        if not flush:
            return asyncio.run(wait_drained(self.settings, reading, timeout_s=timeout_s, progress=progress))
        # Produced turns are acknowledged, so already on the topic: their keys can be read first.
        conversations = self.conversations()
        return asyncio.run(wait_written(self.settings, reading, conversations, timeout_s=timeout_s, progress=progress))

    def conversations(self) -> set[tuple[str, str]]:
        """(tenant, conversation) of every well-formed key on ``memory.turns`` and ``memory.bulk.turns``
        (a history import's) (a malformed message's key may be anything: it was dead-lettered, there is
        nothing of it to flush)."""
        keys = {
            key.decode("utf-8", "replace")
            for topic in (Topic.TURNS, Topic.BULK_TURNS)
            for key, _ in self.read_topic(topic, timeout_s=120.0)
            if key
        }
        pairs = (tuple(k.split("/", 1)) for k in keys if "/" in k)
        return {(t, c) for t, c in pairs if re.fullmatch(ID_PATTERN, t) and re.fullmatch(ID_PATTERN, c)}

    def lag(self, topics: Iterable[str]) -> dict[str, int]:
        """Messages the workers have not committed yet, per topic (unprefixed names)."""
        topics = list(topics)
        lag = asyncio.run(topics_lag(self.settings, self.reading(topics)))
        return {t: lag.get(self.settings.topic(t), 0) for t in topics}

    def consolidate(self, *, tenant: str | None = None, conversation: str | None = None, scope: str = "pending") -> int:
        return self._call(
            lambda client: client.consolidate(tenant_id=tenant, conversation_id=conversation, scope=scope)  # type: ignore[arg-type]
        )

    def ask(
        self,
        question: str,
        *,
        tenant: str,
        conversation: str,
        profile: str = "auto",
        answer: bool = True,
        timeout_s: float = 60.0,
    ) -> Reply:
        return self._call(
            lambda client: client.ask(
                question,
                tenant_id=tenant,
                conversation_id=conversation,
                profile=profile,
                answer=answer,
                timeout_s=timeout_s,
                raise_on_error=False,  # tests look at error replies themselves
            )
        )

    def forget(
        self,
        *,
        tenant: str,
        conversation: str | None = None,
        speaker: str | None = None,
        turn_ids: Iterable[str] = (),
        timeout_s: float = 300.0,
    ) -> ForgetOutcome:
        return self._call(
            lambda client: client.forget(
                tenant_id=tenant, conversation_id=conversation, speaker=speaker, turn_ids=turn_ids, timeout_s=timeout_s
            )
        )

    @contextlib.contextmanager
    def store(self) -> Iterator[VectorStore]:
        """The embedded store, opened after the workers stopped (it locks its folder to one process)."""
        assert not any(w.alive() for w in self.workers), "stop the workers before opening the embedded store"
        store = open_existing_store(self.settings)
        try:
            yield store
        finally:
            store.close()

    def read_topic(
        self, topic: str, *, timeout_s: float = 10.0, prefixed: bool = True
    ) -> list[tuple[bytes | None, bytes]]:
        """Every message on a topic, from the beginning."""
        name = self.settings.topic(topic) if prefixed else topic
        return asyncio.run(read_messages(self.settings, name, timeout_s=timeout_s))

    def message_count(self, topic: str) -> int:
        """Messages on a topic so far: the sum of its partitions' end offsets."""
        return asyncio.run(message_count(self.settings, self.settings.topic(topic)))

    def dead_letters(self) -> list[DeadLetter]:
        return [DeadLetter.from_bytes(v) for _, v in self.read_topic("dlq")]
