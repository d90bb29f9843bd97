"""The CLI started from a directory outside the checkout, as a new user would: `memstream up`,
`ingest`, `ask`, `down`, then `export` from the same directory finds what the worker wrote (the
worker got the data folder absolute, whatever its own directory); from another directory, export
says where it looked instead of "exported 0 records"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator, Mapping

import pytest

from memstream.config import Settings
from memstream.datasets import demo_conversation_path, load_locomo

pytestmark = pytest.mark.integration

CHECKOUT = Path(__file__).resolve().parents[2]
MEMSTREAM = CHECKOUT / ".venv" / "bin" / "memstream"
# Settings a developer's shell may carry that would point this run elsewhere (or at an LLM).
DROPPED = ("MEMSTREAM_DATA_DIR", "MEMSTREAM_QDRANT_PATH", "MEMSTREAM_KAFKA_DATA", "MEMSTREAM_QDRANT_URL")


def user_env(kafka: Settings, **extra: str) -> dict[str, str]:
    """A new user's environment: a private topic prefix, no metrics port, no LLM."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED and not k.startswith("MEMSTREAM_LLM_")}
    return {
        **env,
        "MEMSTREAM_KAFKA_BOOTSTRAP": kafka.kafka_bootstrap,
        "MEMSTREAM_TOPIC_PREFIX": f"d{uuid.uuid4().hex[:10]}",
        "MEMSTREAM_METRICS_PORT": "0",
        "MEMSTREAM_STM_IDLE_S": "3",
        "MEMSTREAM_STM_TICK_S": "1",
        "COLUMNS": "200",
        **extra,
    }


def run(command: list[str], cwd: Path, env: Mapping[str, str], timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout_s)


def stop_pid_file(pid_file: Path) -> None:
    """What `memstream down` does, for a test that failed before it: the worker and its session."""
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(60):
            os.kill(pid, 0)
            time.sleep(0.5)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    assert not folder.resolve().is_relative_to(CHECKOUT)
    yield folder
    stop_pid_file(folder / "state" / "worker.pid")


def test_up_ingest_ask_down_export_from_a_directory_outside_the_checkout(kafka, elsewhere, tmp_path):
    env = user_env(kafka, MEMSTREAM_DATA_DIR="state")  # relative to the directory the user is in
    sample = load_locomo(demo_conversation_path())[0]

    up = run([str(MEMSTREAM), "up"], elsewhere, env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "memstream is up" in up.stdout and str(elsewhere / "state") in up.stdout
    assert (elsewhere / "state" / "worker.pid").exists()

    ingest = run(
        # The two sessions the question's gold turn (D2:5) needs, not the whole conversation.
        [str(MEMSTREAM), "ingest", str(demo_conversation_path()), "--tenant", "acme", "--sessions", "2", "--wait"],
        elsewhere,
        env,
    )
    assert ingest.returncode == 0, ingest.stdout + ingest.stderr
    assert "every turn written" in ingest.stdout

    ask = run(
        [str(MEMSTREAM), "ask", "What is the name of Tomas's dog?"]
        + ["--conversation", sample.sample_id, "--tenant", "acme", "--json", "--timeout", "60"],
        elsewhere,
        env,
    )
    assert ask.returncode == 0, ask.stdout + ask.stderr
    reply = json.loads(ask.stdout)
    assert reply["ok"] and reply["evidence"], reply
    assert "D2:5" in {t for e in reply["evidence"] for t in e["turn_ids"]}

    down = run([str(MEMSTREAM), "down"], elsewhere, env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not (elsewhere / "state" / "worker.pid").exists()

    # The worker wrote its store where this directory's settings point, not into the checkout.
    assert (elsewhere / "state" / "qdrant-edge").is_dir()
    export = run([str(MEMSTREAM), "export", "--tenant", "acme", "--out", "acme.jsonl"], elsewhere, env)
    assert export.returncode == 0, export.stdout + export.stderr
    records = [json.loads(line) for line in (elsewhere / "acme.jsonl").read_text().splitlines()]
    assert records and f"exported {len(records)} records" in export.stdout
    assert "D2:5" in {r["turn_id"] for r in records if r["collection"] == "turns"}
    assert any(r["collection"] == "cards" for r in records)

    # Another directory has no store: the command says where it looked and fails.
    empty = tmp_path / "empty"
    empty.mkdir()
    lost = run([str(MEMSTREAM), "export", "--tenant", "acme", "--out", "acme.jsonl"], empty, env)
    assert lost.returncode == 2, lost.stdout + lost.stderr
    assert "no memstream store at" in lost.stdout and str(empty / "state" / "qdrant-edge") in lost.stdout
    assert "exported" not in lost.stdout and not (empty / "acme.jsonl").exists()
