"""The HTTP layer with a stand-in engine: status codes, OpenAI error bodies, and /v1/models answering
while a completion runs. No model (tests/localllm/test_server_model.py runs the real one)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable, Mapping, Sequence

import httpx
import pytest
from fastapi.testclient import TestClient

from memstream.localllm.engine import ContextLengthExceeded, GrammarRejected
from memstream.localllm.protocol import Completion, Sampling
from memstream.localllm.server import create_app

USER = [{"role": "user", "content": "Hi"}]


class FakeEngine:
    def __init__(self, result: Completion | Exception = Completion("hello", 9, 2, "stop")):
        self.result = result
        self.calls: list[tuple[Sequence[Mapping[str, str]], Sampling]] = []
        self.gone: Callable[[], bool] = lambda: False
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def complete(
        self, messages: Sequence[Mapping[str, str]], sampling: Sampling, gone: Callable[[], bool]
    ) -> Completion:
        self.calls.append((messages, sampling))
        self.gone = gone
        self.started.set()
        assert self.release.wait(10)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def client(engine: FakeEngine) -> TestClient:
    return TestClient(create_app(engine, alias="smol"), raise_server_exceptions=False)


def test_models() -> None:
    response = client(FakeEngine()).get("/v1/models")
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == ["smol"]


def test_chat_completion_passes_settings_and_echoes_the_model() -> None:
    engine = FakeEngine()
    response = client(engine).post(
        "/v1/chat/completions", json={"model": "anything", "messages": USER, "max_tokens": 5, "temperature": 0}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["model"] == "anything"
    assert body["choices"][0]["message"]["content"] == "hello"
    assert body["usage"] == {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    (messages, sampling), *_ = engine.calls
    assert messages == USER and sampling.max_tokens == 5 and sampling.temperature == 0
    no_model = client(FakeEngine()).post("/v1/chat/completions", json={"messages": USER})
    assert no_model.json()["model"] == "smol"


@pytest.mark.parametrize(
    ("result", "status", "code"),
    [
        (ContextLengthExceeded(9000, 8192), 400, "context_length_exceeded"),
        (GrammarRejected("Failed to parse the supplied GBNF grammar"), 400, None),
        (RuntimeError("llama_decode failed with code 1"), 500, None),
    ],
)
def test_engine_failures_become_openai_errors(result: Exception, status: int, code: str | None) -> None:
    response = client(FakeEngine(result)).post("/v1/chat/completions", json={"messages": USER})
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == ("server_error" if status == 500 else "invalid_request_error")


def test_bad_requests_are_400s_with_error_bodies_and_never_reach_the_engine() -> None:
    engine = FakeEngine()
    http = client(engine)
    for content in [
        b"not json",
        b"[]",
        b'{"messages": []}',
        b'{"messages": [{"role": "user", "content": "x"}], "n": 3}',
    ]:
        response = http.post("/v1/chat/completions", content=content)
        assert response.status_code == 400, content
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert engine.calls == []
    missing = http.get("/v1/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_models_answers_while_a_completion_runs() -> None:
    engine = FakeEngine()
    engine.release.clear()
    app = create_app(engine, alias="smol")

    async def scenario() -> tuple[int, int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            completion = asyncio.create_task(http.post("/v1/chat/completions", json={"messages": USER}))
            assert await asyncio.to_thread(engine.started.wait, 10)
            models = await asyncio.wait_for(http.get("/v1/models"), 5)  # the engine is still blocked
            assert not completion.done()
            engine.release.set()
            return models.status_code, (await completion).status_code

    assert asyncio.run(scenario()) == (200, 200)


def test_the_engine_learns_that_a_requests_client_left() -> None:
    """Over real HTTP (uvicorn on loopback): a client that closes its connection while its completion
    waits makes ``gone`` true, which the engine checks before it runs the request and while it decodes."""
    import socket

    import uvicorn

    engine = FakeEngine()
    engine.release.clear()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(engine, alias="smol"), port=port, log_level="warning"))
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            outcome: list[BaseException] = []

            def ask_and_leave() -> None:
                try:
                    http.post("/v1/chat/completions", json={"messages": USER}, timeout=1)
                except httpx.ReadTimeout as exc:  # the client gives up and closes its connection
                    outcome.append(exc)

            leaving = threading.Thread(target=ask_and_leave)
            leaving.start()
            assert engine.started.wait(10)
            assert not engine.gone()  # the client still waits
            leaving.join()
            assert outcome, "the client was answered instead of timing out"
        deadline = time.monotonic() + 10
        while not engine.gone():
            assert time.monotonic() < deadline, "the server never saw the client leave"
            time.sleep(0.05)
    finally:
        engine.release.set()
        server.should_exit = True
        serving.join(10)
