"""memstream over a secured broker: the test makes a CA and a broker certificate (openssl), starts a
real Kafka with a SASL_SSL listener (SCRAM-SHA-512 users), and runs a worker, a producer and a
question through it. A client without the password, or without TLS, gets nowhere."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Iterator

import orjson
import pytest
from pydantic import SecretStr

from memstream.bench import clusters
from memstream.bench.deployment import Deployment
from memstream.config import Settings
from memstream.schemas import Turn
from memstream.streams import runtime
from memstream.streams.topics import broker_reachable

from .conftest import first_sessions
from .test_node_client import node, run  # noqa: F401 - node is a fixture

pytestmark = pytest.mark.integration

USER, PASSWORD = "memstream", "memstream-test-secret"


def make_certificates(folder: Path) -> tuple[Path, Path]:
    """A throwaway CA, and a broker key + certificate for 127.0.0.1 signed by it (PEM)."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=memstream-test-ca")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
            "-subj", "/CN=127.0.0.1")  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "broker.crt", "-days", "2", "-extfile", "san.ext")  # fmt: skip
    keystore = folder / "broker.pem"
    keystore.write_text((folder / "broker.key").read_text() + (folder / "broker.crt").read_text())
    return keystore, folder / "ca.pem"


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory) -> Iterator[Settings]:
    folder = tmp_path_factory.mktemp("secured-kafka")
    keystore, ca = make_certificates(folder / "tls")
    # Below the kernel's ephemeral range: a port from bind(0) may have its controller port (+1) taken
    # by an outgoing connection by the time the broker binds it.
    port = clusters.free_base_port(23092, [0, 1], step=10)
    env = {
        **os.environ,
        "MEMSTREAM_KAFKA_PORT": str(port),
        "MEMSTREAM_KAFKA_DATA": str(folder / "kafka"),
        "MEMSTREAM_KAFKA_SECURITY": "SASL_SSL",
        "MEMSTREAM_KAFKA_TLS_KEYSTORE": str(keystore),
        "MEMSTREAM_KAFKA_TLS_CA": str(ca),
        "MEMSTREAM_KAFKA_SCRAM_USERS": f"broker:broker-secret,{USER}:{PASSWORD}",
    }
    script = runtime.INFRA / "kafka" / "kafka.sh"
    started = subprocess.run(["bash", str(script), "start"], env=env, capture_output=True, text=True)
    assert started.returncode == 0, started.stderr[:1500] + "\n...\n" + started.stderr[-3000:]
    try:
        yield Settings(
            kafka_bootstrap=f"127.0.0.1:{port}",
            kafka_security_protocol="SASL_SSL",
            kafka_sasl_mechanism="SCRAM-SHA-512",
            kafka_sasl_username=USER,
            kafka_sasl_password=PASSWORD,
            kafka_ssl_cafile=ca,
        )
    finally:
        subprocess.run(["bash", str(script), "stop"], env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def ingested(secured_broker: Settings, tmp_path_factory) -> Iterator[tuple[Deployment, str, list[Turn]]]:
    """One worker on the secured broker, the module's, with a few turns of a conversation ingested and
    drained (its flush is a command over the same secured connection); stopped at the module's end.
    The tests only read through it, so one start and one drain serve them all."""
    conversation, turns, _ = first_sessions(1)
    turns = turns[:4]
    pipe = Deployment(secured_broker, tmp_path_factory.mktemp("secured-p"), {"MEMSTREAM_STM_IDLE_S": "3"})
    try:
        pipe.start_worker()
        pipe.produce(turns)
        pipe.drain()
        yield pipe, conversation, turns
    finally:
        pipe.stop_workers()


def test_a_worker_ingests_and_answers_over_sasl_ssl_with_scram(ingested):
    pipe, conversation, turns = ingested
    reply = pipe.ask(turns[1].text, tenant="acme", conversation=conversation, answer=False)
    assert reply.ok and turns[1].turn_id in {t for e in reply.evidence for t in e.turn_ids}


def test_the_node_client_asks_over_sasl_ssl_with_the_same_settings(ingested, node):  # noqa: F811
    pipe, conversation, turns = ingested
    env = {k: v for k, v in pipe.env.items() if k.startswith(("MEMSTREAM_KAFKA", "MEMSTREAM_TOPIC"))}
    asked = ["ask", "--tenant", "acme", "--conversation", conversation, "--question", turns[1].text]
    done = run(node, *asked, env=env)
    assert done.returncode == 0, done.stderr
    assert turns[1].turn_id in {t for e in orjson.loads(done.stdout)["evidence"] for t in e["turn_ids"]}
    refused = run(node, *asked, "--timeout-ms", "8000", env={**env, "MEMSTREAM_KAFKA_SASL_PASSWORD": "wrong"})
    assert refused.returncode == 3


def test_without_the_password_or_without_tls_the_broker_refuses(secured_broker):
    wrong = secured_broker.model_copy(update={"kafka_sasl_password": SecretStr("not-the-password")})
    plaintext = Settings(kafka_bootstrap=secured_broker.kafka_bootstrap)
    assert asyncio.run(broker_reachable(secured_broker))
    assert not asyncio.run(broker_reachable(wrong))
    assert not asyncio.run(broker_reachable(plaintext))
