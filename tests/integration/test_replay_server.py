"""The replay server (infra/llm/replay_server.py) against the real local LLM: record mode in front of
it writes the model's real answers; replay mode serves them back, many at once after a synthetic
latency, and refuses what is over a provider-style limit with 429 + Retry-After. Every server is a
subprocess, started the way benches start it (start_replay / wait_ready, or replay_server.sh)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import openai
import pytest

from memstream.bench.deployment import free_port
from memstream.config import Settings
from memstream.infra.llm import replay_server as rs
from memstream.streams import runtime

pytestmark = pytest.mark.integration


PERSON = {
    "type": "json_schema",
    "json_schema": {
        "name": "person",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
            "required": ["name", "age"],
            "additionalProperties": False,
        },
    },
}
# Short answers: the local model serialises requests, and these are recorded once per module.
REQUESTS: list[dict[str, Any]] = [
    {
        "messages": [
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "What colour is the sky on a clear day?"},
        ],
        "max_tokens": 24,
    },
    {"messages": [{"role": "user", "content": "Name one fruit."}], "max_tokens": 12},
    {
        "messages": [{"role": "user", "content": "Make up a person: their name and age, as JSON."}],
        "max_tokens": 48,
        "response_format": PERSON,
    },
]


def ask(client: openai.OpenAI, request: dict[str, Any], model: str = "smollm2") -> Any:
    return client.chat.completions.create(model=model, temperature=0, **request)


def client_for(url: str) -> openai.OpenAI:
    # max_retries=0: a 429 must reach the test, not be retried away by the client.
    return openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=120)


@contextlib.contextmanager
def replay_server(args: list[str], log: Path) -> Iterator[str]:
    """A replay server subprocess (``rs.running``); it must stop cleanly on SIGTERM."""
    with rs.running(args, log) as url:
        yield url
    assert "replay_server: stopped" in log.read_text(), log.read_text()[-3000:]


stats = rs.fetch_stats


def reset_stats(url: str) -> None:
    import httpx

    httpx.post(url.removesuffix("/v1") + "/stats/reset", timeout=5).raise_for_status()


def at_once(count: int, call: Any) -> tuple[list[Any], float]:
    """``call(i)`` from ``count`` threads released together; the results (or exceptions) and the seconds taken."""
    barrier = threading.Barrier(count)

    def run(i: int) -> Any:
        barrier.wait()
        try:
            return call(i)
        except Exception as exc:  # collected: the test looks at which calls failed and how
            return exc

    with ThreadPoolExecutor(count) as pool:
        started = time.monotonic()
        results = list(pool.map(run, range(count)))
    return results, time.monotonic() - started


@pytest.fixture(scope="module")
def llm_url() -> Iterator[str]:
    """The real local LLM server (make test starts it; started here, and stopped after, when it is not)."""
    if not runtime.local_llm_available():
        pytest.fail("the local LLM server is not installed: bash infra/llm/llm_server.sh install")
    settings = Settings()
    with runtime.LOCAL_LLM.session(settings):
        yield runtime.local_llm_url(settings)


@pytest.fixture(scope="module")
def recorded(llm_url: str, tmp_path_factory) -> tuple[Path, list[Any]]:
    """REQUESTS sent through a record-mode server in front of the local LLM: the recordings file and the answers."""
    folder = tmp_path_factory.mktemp("replay-record")
    path = folder / "recordings.jsonl"
    with replay_server(["record", "--upstream", llm_url, "--recordings", str(path)], folder / "record.log") as url:
        client = client_for(url)
        answers = [ask(client, request) for request in REQUESTS]
    return path, answers


@pytest.fixture(scope="module")
def replay_url(recorded, tmp_path_factory) -> Iterator[str]:
    path, _ = recorded
    log = tmp_path_factory.mktemp("replay") / "replay.log"
    with replay_server(["replay", "--recordings", str(path), "--latency-fixed", "1.0"], log) as url:
        yield url


def test_record_mode_returns_and_appends_the_local_models_real_answers(recorded) -> None:
    path, answers = recorded
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    assert len(lines) == len(REQUESTS)
    for line, request, answer in zip(lines, REQUESTS, answers):
        assert line["key"] == rs.request_key(request["messages"], request.get("response_format"))
        assert line["request"]["max_tokens"] == request["max_tokens"]
        assert line["response"]["choices"][0]["message"]["content"] == answer.choices[0].message.content
        assert line["response"]["usage"]["prompt_tokens"] > 0 and line["upstream_s"] > 0
    person = json.loads(answers[2].choices[0].message.content)  # the grammar held: it parses
    assert set(person) == {"name", "age"}


def test_replay_answers_each_request_with_its_recorded_response_after_the_latency(recorded, replay_url) -> None:
    _, answers = recorded
    client = client_for(replay_url)
    for request, answer in zip(REQUESTS, answers):
        started = time.monotonic()
        # Another model name and max_tokens: not part of the key, still replayed.
        replayed = ask(client, {**request, "max_tokens": request["max_tokens"] + 100}, model="gpt-4o-mini")
        assert time.monotonic() - started >= 0.95
        assert replayed.choices[0].message.content == answer.choices[0].message.content
        assert replayed.choices[0].finish_reason == answer.choices[0].finish_reason
        assert replayed.model == answer.model
        assert replayed.usage is not None and answer.usage is not None
        assert (replayed.usage.prompt_tokens, replayed.usage.completion_tokens) == (
            answer.usage.prompt_tokens,
            answer.usage.completion_tokens,
        )
        assert replayed.usage.prompt_tokens_details is not None
        assert replayed.usage.prompt_tokens_details.cached_tokens == 0  # short prompts: never cached


def test_replayed_requests_overlap_like_a_providers(replay_url) -> None:
    client = client_for(replay_url)
    reset_stats(replay_url)
    results, elapsed = at_once(8, lambda i: ask(client, REQUESTS[i % len(REQUESTS)]))
    assert not [r for r in results if isinstance(r, Exception)], results
    assert elapsed < 3.0, f"8 requests of 1 s each took {elapsed:.1f}s: they did not overlap"
    counted = stats(replay_url)
    assert counted["requests"] == counted["answered"] == 8 and counted["misses"] == counted["rate_limited"] == 0
    assert counted["max_concurrent"] > 1
    assert 0.95 <= counted["latency_s"]["p50"] <= counted["latency_s"]["p99"] < 3.0


def test_requests_over_the_concurrency_limit_get_429_with_retry_after(recorded, tmp_path: Path) -> None:
    path, _ = recorded
    args = ["replay", "--recordings", str(path), "--latency-fixed", "1.0", "--max-concurrency", "2"]
    with replay_server(args, tmp_path / "limited.log") as url:
        client = client_for(url)
        results, _ = at_once(6, lambda i: ask(client, REQUESTS[i % len(REQUESTS)]))
        limited = [r for r in results if isinstance(r, openai.RateLimitError)]
        answered = [r for r in results if not isinstance(r, Exception)]
        assert len(limited) + len(answered) == 6, results
        assert limited and len(answered) >= 2
        for error in limited:
            assert int(error.response.headers["retry-after"]) >= 1
            assert 0 < int(error.response.headers["retry-after-ms"]) <= 1000  # when the first in flight ends
            assert error.code == "rate_limit_exceeded" and error.type == "rate_limit_error"
        counted = stats(url)
        assert (counted["requests"], counted["answered"], counted["rate_limited"]) == (6, len(answered), len(limited))
        assert counted["max_concurrent"] == 2


def test_record_prompts_skips_what_is_recorded_and_appends_the_rest(recorded, llm_url: str, tmp_path: Path) -> None:
    path, _ = recorded
    copy = tmp_path / "copy.jsonl"
    copy.write_text(path.read_text())
    new = {"messages": [{"role": "user", "content": "Say yes."}], "max_tokens": 4, "temperature": 0}
    keys = rs.record_prompts(llm_url, [*REQUESTS, new], copy)
    lines = [json.loads(raw) for raw in copy.read_text().splitlines()]
    assert keys == [line["key"] for line in lines] and len(lines) == len(REQUESTS) + 1
    assert copy.read_text().startswith(path.read_text())  # the recorded ones were not asked again


def test_the_script_starts_stops_and_reports_from_any_directory(recorded, tmp_path: Path) -> None:
    path, answers = recorded
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "rec.jsonl").write_text(path.read_text())
    port = free_port()
    env = {
        **os.environ,
        "MEMSTREAM_DATA_DIR": "data",  # relative: read against the directory the script runs in
        "MEMSTREAM_REPLAY_PORT": str(port),
        "MEMSTREAM_REPLAY_ARGS": "replay --recordings rec.jsonl --latency-fixed 0",
    }
    script = str(Path(rs.__file__).with_suffix(".sh"))

    def run(verb: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", script, verb], cwd=elsewhere, env=env, capture_output=True, text=True)

    started = run("start")
    try:
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip()
        assert url == f"http://127.0.0.1:{port}/v1"
        assert (elsewhere / "data" / "llm-replay" / "replay_server.pid").is_file()
        assert (run("status").returncode, run("start").returncode) == (0, 0)  # a second start is a no-op
        replayed = ask(client_for(url), REQUESTS[1])
        assert replayed.choices[0].message.content == answers[1].choices[0].message.content
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stderr, stopped.stderr
    assert run("status").returncode == 3
    log = (elsewhere / "data" / "llm-replay" / "replay_server.log").read_text()
    assert "replay_server: ready on" in log and "replay_server: stopped" in log
