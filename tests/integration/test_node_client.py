"""The wire contract from another language: clients/node/produce_and_ask.mjs (kafkajs + ajv, written
against schemas/json only) produces the demo conversation to a real worker on the real broker and
asks it a question, signing both with the tenant's write secret the worker checks (without it, its
turns are dead-lettered); its validator accepts what memstream writes and refuses what memstream
refuses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.schemas import Reply, Turn
from tests.schemas.test_json_schemas import BAD, EXAMPLES

pytestmark = pytest.mark.integration

NODE_DIR = Path(__file__).resolve().parents[2] / "clients" / "node"
SCRIPT = NODE_DIR / "produce_and_ask.mjs"
TENANT = "nodeco"
# The demo conversation's single-hop question and its gold turn (as in test_pipeline.py).
QUESTION, GOLD = "What is the name of Tomas's dog?", "D2:5"
SECRETS_VARIABLE = "MEMSTREAM_TENANT_WRITE_SECRETS"
# The worker holds every tenant's write secrets; the Node client only its own tenant's.
NODE_SECRETS = {TENANT: {"n-2026-12": "nodeco-secret-2026-12-xyz"}}
WORKER_SECRETS = {**NODE_SECRETS, "other": {"o1": "other-secret-2026-12-xyz"}}


@pytest.fixture(scope="module")
def node() -> str:
    """The node binary, with clients/node's pinned packages installed (npm ci when they are missing)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail(
            "the Node client test needs Node.js >= 20 with npm on PATH (node: %s, npm: %s); install them and "
            "rerun scripts/install.sh (it runs npm ci in clients/node)" % (node or "missing", npm or "missing")
        )
    major = int(
        subprocess.run([node, "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True).stdout
    )
    if major < 20:
        pytest.fail(f"the Node client needs Node.js >= 20, found {major}")
    if not all((NODE_DIR / "node_modules" / name).is_dir() for name in ("kafkajs", "ajv", "ajv-formats")):
        done = subprocess.run(
            [npm, "ci", "--prefix", str(NODE_DIR), "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci in {NODE_DIR} failed (is the npm registry reachable?):\n{done.stdout}\n{done.stderr}")
    return node


def run(node: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [node, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        # Signed only where a test hands the client its secret.
        env={**{k: v for k, v in os.environ.items() if k != SECRETS_VARIABLE}, **(env or {})},
    )


def test_the_node_validator_accepts_what_memstream_writes_and_refuses_an_invalid_turn(node, tmp_path):
    written = tmp_path / "payloads.jsonl"
    written.write_bytes(b"".join(p.to_bytes() + b"\n" for p in EXAMPLES))
    done = run(node, "validate", str(written), "auto")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["valid"] == len(EXAMPLES)

    turn = orjson.loads(EXAMPLES[0].to_bytes())
    del turn["tenant_id"]
    no_tenant = tmp_path / "no_tenant.json"
    no_tenant.write_bytes(orjson.dumps(turn))
    done = run(node, "validate", str(no_tenant), "turn")
    assert done.returncode == 1
    assert "must have required property 'tenant_id'" in done.stderr

    by_kind: dict[str, list[bytes]] = {}
    for kind, data, _ in BAD:  # every payload the models and the Python validator refuse
        by_kind.setdefault(kind, []).append(orjson.dumps(data))
    for kind, lines in by_kind.items():
        bad = tmp_path / f"bad_{kind}.jsonl"
        bad.write_bytes(b"\n".join(lines) + b"\n")
        done = run(node, "validate", str(bad), kind)
        assert done.returncode == 1, (kind, done.stdout)
        assert [x["index"] for x in json.loads(done.stdout)["invalid"]] == list(range(len(lines))), done.stdout


def test_a_node_producer_and_asker_signs_for_a_real_worker_that_refuses_it_unsigned(make_pipeline, node):
    pipe = make_pipeline(MEMSTREAM_EXTRACT_MODE="extractive")
    # The drain's flush ticks travel on no input topic: the test's own client needs no secret.
    pipe.start_worker(env={SECRETS_VARIABLE: json.dumps(WORKER_SECRETS)})
    unsigned = {
        "MEMSTREAM_KAFKA_BOOTSTRAP": pipe.settings.kafka_bootstrap,
        "MEMSTREAM_TOPIC_PREFIX": pipe.settings.topic_prefix,
        "MEMSTREAM_TENANT": TENANT,
    }
    env = {**unsigned, SECRETS_VARIABLE: json.dumps(NODE_SECRETS)}
    path = demo_conversation_path()
    sample = load_locomo(path)[0]
    expected = list(locomo_turns(sample, tenant_id=TENANT))

    done = run(node, "produce", "--locomo", str(path), env=env)
    assert done.returncode == 0, done.stderr
    produced = json.loads(done.stdout)
    key = f"{TENANT}/{sample.sample_id}".encode()
    partitions = list(range(pipe.settings.topic_partitions))
    assert produced["topic"] == pipe.settings.topic("turns") and produced["turns"] == len(expected)
    # One partition, the one memstream's own producers (aiokafka, murmur2) pick for this key.
    assert produced["partitions"] == [DefaultPartitioner()(key, partitions, partitions)]
    pipe.drain()

    assert pipe.message_count("turns") == len(expected)
    stored = pipe.read_topic("turns")
    assert {k for k, _ in stored} == {key}
    assert [Turn.from_bytes(v) for _, v in stored] == expected  # the turns memstream's own LoCoMo reader makes

    done = run(
        node,
        "ask",
        "--conversation",
        sample.sample_id,
        "--question",
        QUESTION,
        "--timeout-ms",
        "30000",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1, "one JSON line on stdout"
    reply = Reply.model_validate_json(done.stdout)
    assert reply.ok, reply.error
    assert (reply.tenant_id, reply.conversation_id) == (TENANT, sample.sample_id)
    assert reply.answer_mode == "evidence_only" and reply.answer is None  # it asked with answer=false
    turn_ids = [tid for e in reply.evidence for tid in e.turn_ids]
    assert GOLD in turn_ids, f"gold {GOLD} not in evidence {turn_ids}"
    assert pipe.message_count("queries") == 1
    assert pipe.dead_letters() == []  # every signed turn and the query were accepted

    # The same client without the secret: its turns are refused, each one a dead letter saying why.
    refused = [t.turn_id for t in locomo_turns(sample, tenant_id=TENANT, max_sessions=1)]
    done = run(node, "produce", "--locomo", str(path), "--sessions", "1", "--conversation", "unsigned", env=unsigned)
    assert done.returncode == 0, done.stderr
    pipe.drain(flush=False)
    letters = pipe.dead_letters()
    assert sorted(Turn.from_bytes(letter.original).turn_id for letter in letters) == sorted(refused)
    for letter in letters:
        assert (letter.stage, letter.error_type, letter.key) == ("compress", "SignatureRefused", f"{TENANT}/unsigned")
        assert letter.reason.startswith(f"unsigned record for tenant '{TENANT}'"), letter.reason
