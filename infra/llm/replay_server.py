"""A provider-like OpenAI-compatible replay server: a benchmark and test harness, not product code.

The local LLM (SmolLM2-135M on llama.cpp) answers one request at a time on a CPU, so it cannot show
what many calls in flight against a hosted provider look like. This server fills that gap from real
parts: ``record`` mode sits in front of the local server and appends each real response to a JSONL
file; ``replay`` mode answers each request with its recorded response after a latency drawn from a
configurable distribution, many at once (no lock), and enforces provider-style limits (requests and
tokens per minute, concurrent requests) with HTTP 429 and ``Retry-After``. Prompt caching is
simulated the way hosted providers report it (``usage.prompt_tokens_details.cached_tokens``).

The responses are real (the local model's), the timing and the limits are synthetic: results
measured against it are a stand-in for a provider's timing and must be labelled as such.

    python infra/llm/replay_server.py record --upstream http://127.0.0.1:8011/v1 --recordings rec.jsonl
    python infra/llm/replay_server.py replay --recordings rec.jsonl \\
        --latency-p50 0.8 --latency-p99 6 --rpm 500 --max-concurrency 32

(``python -m memstream.infra.llm.replay_server`` where memstream is installed from a wheel: an
editable install cannot import ``memstream.infra`` while ``infra/`` has no ``__init__.py``.)
``infra/llm/replay_server.sh`` runs it in the background.

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions`` (non-streaming), ``GET /stats``,
``POST /stats/reset``. Benches and tests start it as a subprocess with :func:`start_replay` and
:func:`wait_ready`, or record without a server with :func:`record_prompts`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import fcntl
import hashlib
import itertools
import json
import logging
import math
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, AsyncIterator, Callable, Coroutine, Iterable, Iterator, Literal, Mapping, Sequence

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("memstream.replay_server")

Mode = Literal["record", "replay"]
OnMiss = Literal["error", "upstream", "nearest"]
Source = Literal["recorded", "nearest", "upstream"]

# z of the 99th percentile of a standard normal: a lognormal's p99 is exp(mu + Z99 * sigma).
Z99 = 2.3263
WINDOW_S = 60.0  # the per-minute limits count what was admitted in the last minute
CHARS_PER_TOKEN = 4  # the estimate providers' docs give for English text
CACHE_BLOCK_TOKENS = 128  # hosted providers cache prompt prefixes in 128-token steps ...
CACHE_MIN_TOKENS = 1024  # ... from 1,024 tokens on
CACHE_BLOCK_CHARS = CACHE_BLOCK_TOKENS * CHARS_PER_TOKEN
FALLBACK_MODEL = "memstream-replay"


# --- Keys and recordings -------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """One text per JSON value whatever its keys' order: the same request always hashes the same."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(messages: Sequence[Mapping[str, Any]], response_format: Mapping[str, Any] | None) -> str:
    """What identifies a recorded answer: the conversation and the output format. The model name,
    max_tokens, temperature and timeouts are left out so a bench can change them and still replay."""
    payload = canonical_json({"messages": list(messages), "response_format": response_format or None})
    return hashlib.sha256(payload.encode()).hexdigest()


def message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text parts carry prompt text
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return f"{message.get('role', '')}\n{content or ''}\n"


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The messages concatenated with their roles."""
    return "".join(message_text(m) for m in messages)


def cached_text(messages: Sequence[Mapping[str, Any]], response_format: Mapping[str, Any] | None) -> str:
    """What a provider's prompt cache sees as the prompt: a structured output's schema first, as a
    prefix to the system message (OpenAI's prompt-caching guide), then the messages. A schema that
    differs from call to call leaves nothing after it cached."""
    schema = (response_format or {}).get("json_schema") if isinstance(response_format, Mapping) else None
    return (f"schema\n{canonical_json(schema)}\n" if schema else "") + prompt_text(messages)


@dataclass(frozen=True)
class Recording:
    key: str
    messages: list[dict[str, Any]]
    response_format: dict[str, Any] | None
    response: dict[str, Any]
    upstream_s: float
    prompt_chars: int

    @property
    def total_tokens(self) -> int:
        usage = self.response.get("usage") or {}
        total = usage.get("total_tokens")
        if isinstance(total, int):
            return total
        return int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)

    @property
    def format_key(self) -> str:
        return canonical_json(self.response_format or None)

    @classmethod
    def from_line(cls, line: Mapping[str, Any]) -> Recording:
        request = line["request"]
        messages = list(request["messages"])
        return cls(
            key=str(line["key"]),
            messages=messages,
            response_format=request.get("response_format"),
            response=dict(line["response"]),
            upstream_s=float(line.get("upstream_s") or 0.0),
            prompt_chars=len(prompt_text(messages)),
        )


def recording_line(body: Mapping[str, Any], response: Mapping[str, Any], upstream_s: float) -> dict[str, Any]:
    """One JSONL line of a recordings file: the key, what of the request matters, the answer."""
    messages = list(body.get("messages") or [])
    response_format = body.get("response_format")
    return {
        "key": request_key(messages, response_format),
        "request": {"messages": messages, "response_format": response_format, "max_tokens": body.get("max_tokens")},
        "response": dict(response),
        "upstream_s": round(upstream_s, 4),
    }


def load_recordings(paths: Iterable[Path]) -> dict[str, Recording]:
    """Recordings by key. The first of a key wins: a later one comes from the same request recorded
    again (greedy decoding gives the same answer), so nothing is lost. A line that does not parse (a
    writer killed mid-line) is skipped with a warning rather than making the whole file unusable."""
    table: dict[str, Recording] = {}
    for path in paths:
        if not path.exists():
            continue
        with path.open(encoding="utf-8") as f:
            for number, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    recording = Recording.from_line(json.loads(raw))
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("%s:%d: skipped, not a recording (%s)", path, number, exc)
                    continue
                table.setdefault(recording.key, recording)
    return table


def append_line(path: Path, line: Mapping[str, Any]) -> None:
    """Append one JSONL line, whole: one write under an exclusive lock, so concurrent requests (and
    several recording processes) never interleave their lines."""
    data = (canonical_json(line) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write(data)
            f.flush()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def nearest_recording(
    recordings: Iterable[Recording], messages: Sequence[Mapping[str, Any]], response_format: Mapping[str, Any] | None
) -> Recording | None:
    """The stand-in for a request nobody recorded: one with the same response format (so the caller
    can parse it), else any, whose prompt is closest in length (so its token counts are plausible).
    Ties go to the smaller key, so the choice does not depend on the files' order."""
    pool = list(recordings)
    wanted = canonical_json(response_format or None)
    same_format = [r for r in pool if r.format_key == wanted]
    candidates = same_format or pool
    if not candidates:
        return None
    chars = len(prompt_text(messages))
    return min(candidates, key=lambda r: (abs(r.prompt_chars - chars), r.key))


def estimated_tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN


# --- Latency -------------------------------------------------------------------------------------


def lognormal_sigma(p50: float, p99: float) -> float:
    """The sigma of the lognormal whose median is p50 and 99th percentile p99."""
    if not 0 < p50 <= p99:
        raise ValueError(f"need 0 < p50 <= p99, got p50={p50} p99={p99}")
    return math.log(p99 / p50) / Z99


@dataclass
class LatencyModel:
    """Seconds a replayed answer takes: a constant, or lognormal draws (a provider's latency has a
    long right tail) from a seeded generator, so a bench run can be repeated."""

    p50: float = 0.0
    p99: float | None = None
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.p50 < 0:
            raise ValueError(f"latency must be >= 0, got {self.p50}")
        if self.p99 is not None:
            lognormal_sigma(self.p50, self.p99)  # validates
        self._rng = random.Random(self.seed)

    @classmethod
    def fixed(cls, seconds: float) -> LatencyModel:
        return cls(p50=seconds)

    def draw(self) -> float:
        if self.p99 is None or self.p50 == 0:
            return self.p50
        return self._rng.lognormvariate(math.log(self.p50), lognormal_sigma(self.p50, self.p99))


# --- Provider limits -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None


@dataclass(frozen=True)
class Decision:
    admitted: bool
    ticket: int = 0  # what release() takes back, when admitted
    retry_after_s: float = 0.0  # when the budget frees, when refused
    reason: str = ""


def retry_after_headers(seconds: float) -> dict[str, str]:
    """``Retry-After`` in whole seconds (rounded up, at least 1: clients sleep on it and a 0 would
    make them hammer) and OpenAI's ``retry-after-ms``, which the ``openai`` client reads first."""
    return {
        "Retry-After": str(max(1, math.ceil(seconds))),
        "retry-after-ms": str(max(1, math.ceil(seconds * 1000))),
    }


class RateLimiter:
    """Requests and tokens per minute over a sliding one-minute window of admitted requests, and
    requests in flight. Refused requests take no budget (as at OpenAI). A request's tokens are
    counted when it is admitted, as OpenAI counts ``max_tokens`` up front."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._window: deque[tuple[float, int]] = deque()  # (admitted at, tokens), oldest first
        self._in_flight: dict[int, float] = {}  # ticket -> when it is expected to end (inf: unknown)
        self._tickets = itertools.count(1)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def _expire(self, now: float) -> None:
        while self._window and self._window[0][0] <= now - WINDOW_S:
            self._window.popleft()

    def _concurrency_wait(self, now: float) -> float | None:
        cap = self.limits.max_concurrency
        if cap is None or len(self._in_flight) < cap:
            return None
        # The earliest expected end frees a slot; one of unknown length (forwarded upstream) a second from now.
        soonest = min(self._in_flight.values())
        return max(0.0, soonest - now) if math.isfinite(soonest) else 1.0

    def _rpm_wait(self, now: float) -> float | None:
        rpm = self.limits.rpm
        if rpm is None or len(self._window) < rpm:
            return None
        # The request that must leave the window for this one to fit.
        return self._window[len(self._window) - rpm][0] + WINDOW_S - now

    def _tpm_wait(self, tokens: int, now: float) -> float | None:
        tpm = self.limits.tpm
        if tpm is None:
            return None
        used = sum(t for _, t in self._window)
        excess = used + tokens - tpm
        if excess <= 0:
            return None
        if tokens > tpm:  # never fits: OpenAI refuses it too; a full window is the honest wait
            return WINDOW_S
        freed = 0
        for admitted_at, spent in self._window:
            freed += spent
            if freed >= excess:
                return admitted_at + WINDOW_S - now
        return WINDOW_S  # unreachable: the window holds `used` >= excess

    def admit(self, tokens: int, now: float, expected_end: float = math.inf) -> Decision:
        """Admit a request of ``tokens`` tokens at ``now`` (expected to end at ``expected_end``), or
        refuse it with the wait until every limit it breaks has room for it."""
        self._expire(now)
        waits = {
            "concurrent requests": self._concurrency_wait(now),
            "requests per minute": self._rpm_wait(now),
            "tokens per minute": self._tpm_wait(tokens, now),
        }
        broken = {name: wait for name, wait in waits.items() if wait is not None}
        if broken:
            reason = ", ".join(broken)
            return Decision(admitted=False, retry_after_s=max(broken.values()), reason=reason)
        ticket = next(self._tickets)
        self._window.append((now, tokens))
        self._in_flight[ticket] = expected_end
        return Decision(admitted=True, ticket=ticket)

    def release(self, ticket: int) -> None:
        self._in_flight.pop(ticket, None)

    def limit_text(self) -> str:
        parts = [f"{self.limits.rpm} requests/min" if self.limits.rpm else ""]
        parts.append(f"{self.limits.tpm} tokens/min" if self.limits.tpm else "")
        parts.append(f"{self.limits.max_concurrency} concurrent" if self.limits.max_concurrency else "")
        return ", ".join(p for p in parts if p) or "none"


# --- Prompt cache --------------------------------------------------------------------------------


def prefix_hashes(text: str) -> list[bytes]:
    """The hash of each prefix of ``text`` that ends on a 128-token (512-char) boundary, shortest first."""
    hasher = hashlib.sha256()
    hashes = []
    for start in range(0, len(text) - CACHE_BLOCK_CHARS + 1, CACHE_BLOCK_CHARS):
        hasher.update(text[start : start + CACHE_BLOCK_CHARS].encode())
        hashes.append(hasher.copy().digest())
    return hashes


class PromptCache:
    """Which prompt prefixes earlier requests sent, as hosted providers cache them: in 128-token
    steps from 1,024 tokens on. Bounded: the least recently used prefixes go first, as a
    provider's cache forgets prompts nobody sends again."""

    def __init__(self, max_entries: int = 200_000):
        self.max_entries = max_entries
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def cached_tokens(self, text: str) -> int:
        """The estimated tokens of the longest prefix this prompt shares with an earlier one (0 below
        1,024 tokens), then remembers this prompt's prefixes. Only prompts of 1,024 tokens or more
        are cached, as at the providers."""
        if estimated_tokens(text) < CACHE_MIN_TOKENS:
            return 0
        hashes = prefix_hashes(text)
        hit = 0
        for blocks, digest in enumerate(hashes, start=1):
            if digest not in self._seen:
                break  # prefixes nest: once one is new, every longer one is too
            hit = blocks
        for digest in hashes:
            self._seen[digest] = None
            self._seen.move_to_end(digest)
        while len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)
        tokens = hit * CACHE_BLOCK_TOKENS
        return tokens if tokens >= CACHE_MIN_TOKENS else 0


def with_cached_tokens(response: Mapping[str, Any], cached_tokens: int) -> dict[str, Any]:
    """The response with ``usage.prompt_tokens_details.cached_tokens`` set (never more than the
    recorded prompt tokens: the cache counts estimated tokens, the recording the tokenizer's)."""
    body = copy.deepcopy(dict(response))
    usage = body.setdefault("usage", {})
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    usage.setdefault("total_tokens", prompt + completion)
    details = usage.get("prompt_tokens_details") or {}
    usage["prompt_tokens_details"] = {**details, "cached_tokens": min(cached_tokens, prompt)}
    return body


# --- Stats ---------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0..100); None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Stats:
    requests: int = 0
    answered: int = 0
    rate_limited: int = 0
    misses: int = 0
    errors: int = 0
    max_concurrent: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))

    def as_json(self, in_flight: int) -> dict[str, Any]:
        lat = list(self.latencies)
        p50, p99 = percentile(lat, 50), percentile(lat, 99)
        return {
            "requests": self.requests,
            "answered": self.answered,
            "rate_limited": self.rate_limited,
            "misses": self.misses,
            "errors": self.errors,
            "in_flight": in_flight,
            "max_concurrent": self.max_concurrent,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "by_source": dict(self.by_source),
            "latency_s": {
                "p50": None if p50 is None else round(p50, 4),
                "p99": None if p99 is None else round(p99, 4),
                "count": len(lat),
            },
        }


# --- The service ---------------------------------------------------------------------------------


def error_body(message: str, *, type: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    mode: Mode
    recordings: tuple[Path, ...] = ()
    record_to: Path | None = None
    upstream: str | None = None
    upstream_timeout_s: float = 600.0
    on_miss: OnMiss = "error"
    latency: LatencyModel = field(default_factory=LatencyModel)
    limits: Limits = field(default_factory=Limits)
    prompt_cache: bool = True
    prompt_cache_entries: int = 200_000


class ReplayService:
    """What the HTTP app serves, without HTTP: the recordings, the limiter, the cache, the stats."""

    def __init__(self, config: Config, recordings: dict[str, Recording] | None = None):
        self.config = config
        self.recordings = recordings if recordings is not None else load_recordings(config.recordings)
        self.limiter = RateLimiter(config.limits)
        self.cache = PromptCache(config.prompt_cache_entries)
        self.stats = Stats()
        self._http: httpx.AsyncClient | None = None
        self._stopping = asyncio.Event()
        self._created = int(time.time())

    async def __aenter__(self) -> ReplayService:
        if self.config.upstream:
            self._http = httpx.AsyncClient(
                base_url=self.config.upstream.rstrip("/") + "/", timeout=self.config.upstream_timeout_s
            )
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._http is not None:
            await self._http.aclose()

    def models(self) -> dict[str, Any]:
        ids = sorted({str(r.response.get("model")) for r in self.recordings.values() if r.response.get("model")})
        data = [{"id": i, "object": "model", "created": self._created, "owned_by": "memstream-replay"} for i in ids]
        if not data:
            data = [{"id": FALLBACK_MODEL, "object": "model", "created": self._created, "owned_by": "memstream-replay"}]
        return {"object": "list", "data": data}

    def stats_json(self) -> dict[str, Any]:
        return self.stats.as_json(self.limiter.in_flight) | {"recordings": len(self.recordings)}

    def reset_stats(self) -> None:
        """Counters only: the limiter's window and the prompt cache stay, as a provider's would."""
        self.stats = Stats()

    def _choose(self, key: str, body: Mapping[str, Any]) -> tuple[Recording | None, Source | None]:
        """The recording that answers this request and how it was found; (None, None) for a miss
        that the error path answers, (None, "upstream") for one forwarded."""
        if self.config.mode == "record":
            return None, "upstream"
        found = self.recordings.get(key)
        if found is not None:
            return found, "recorded"
        if self.config.on_miss == "nearest":
            near = nearest_recording(self.recordings.values(), body["messages"], body.get("response_format"))
            return (near, "nearest") if near is not None else (None, None)
        if self.config.on_miss == "upstream":
            return None, "upstream"
        return None, None

    async def complete(self, body: Mapping[str, Any]) -> Reply:
        """Answer one chat-completions request body."""
        arrived = time.monotonic()
        self.stats.requests += 1
        invalid = validate_request(body)
        if invalid:
            self.stats.errors += 1
            return Reply(400, error_body(invalid, type="invalid_request_error"))
        messages, response_format = body["messages"], body.get("response_format")
        key = request_key(messages, response_format)
        recording, source = self._choose(key, body)
        if self.config.mode == "replay" and source != "recorded":
            self.stats.misses += 1
        if source is None:
            message = f"no recording for this request (key {key}); record it first, or start with --on-miss"
            return Reply(404, error_body(message, type="not_found_error", code="recording_not_found"))

        text = prompt_text(messages)
        if recording is not None:
            tokens, delay = recording.total_tokens, self.config.latency.draw()
            expected_end = arrived + delay
        else:  # forwarded: counted as OpenAI counts a request it has not run yet, prompt + max_tokens
            tokens, delay, expected_end = estimated_tokens(text) + int(body.get("max_tokens") or 0), 0.0, math.inf
        decision = self.limiter.admit(tokens, arrived, expected_end)
        if not decision.admitted:
            self.stats.rate_limited += 1
            return rate_limited(decision, self.limiter.limit_text())
        self.stats.max_concurrent = max(self.stats.max_concurrent, self.limiter.in_flight)
        try:
            work = self._after(delay, recording.response) if recording is not None else self._forward(body)
            reply = await self._until_stopped(work)
        finally:
            self.limiter.release(decision.ticket)
        if reply.status != 200:
            self.stats.errors += 1
            return reply
        served = cached_text(messages, response_format)
        response = self._as_served(reply.body, served) if self.config.mode == "replay" else reply.body
        self.stats.answered += 1
        self.stats.by_source[source] = self.stats.by_source.get(source, 0) + 1
        self.stats.latencies.append(time.monotonic() - arrived)
        return Reply(200, response)

    def stop_serving(self) -> None:
        """Answer every request still waiting at once (503), rather than make a stop wait them out."""
        self._stopping.set()

    async def _after(self, delay: float, response: dict[str, Any]) -> Reply:
        # Asynchronous: every admitted request waits at once, as a provider serves many together.
        await asyncio.sleep(delay)
        return Reply(200, response)

    async def _until_stopped(self, work: Coroutine[Any, Any, Reply]) -> Reply:
        """``work``'s reply, or a 503 when the server stops first (``work`` is then cancelled)."""
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            stop.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return Reply(503, error_body("the replay server is shutting down", type="server_error", code="shutting_down"))

    def _as_served(self, response: Mapping[str, Any], text: str) -> dict[str, Any]:
        """A replayed answer gets a fresh id and time, and this server's cached-token count."""
        cached = self.cache.cached_tokens(text) if self.config.prompt_cache else 0
        body = with_cached_tokens(response, cached)
        body["id"] = f"chatcmpl-replay-{uuid.uuid4().hex[:24]}"
        body["created"] = int(time.time())
        usage = body["usage"]
        self.stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.stats.cached_tokens += int(usage["prompt_tokens_details"]["cached_tokens"])
        return body

    async def _forward(self, body: Mapping[str, Any]) -> Reply:
        """Send the request upstream; a good answer is recorded (and replayable from now on)."""
        if self._http is None:
            return Reply(500, error_body("no --upstream to forward to", type="server_error"))
        started = time.monotonic()
        try:
            answer = await self._http.post("chat/completions", json=dict(body))
        except httpx.HTTPError as exc:
            return Reply(502, error_body(f"upstream failed: {type(exc).__name__}: {exc}", type="server_error"))
        upstream_s = time.monotonic() - started
        try:
            payload = answer.json()
        except ValueError:
            payload = error_body(f"upstream answered {answer.status_code} without JSON", type="server_error")
        if answer.status_code != 200 or not isinstance(payload, dict):
            return Reply(answer.status_code, payload if isinstance(payload, dict) else {"error": payload})
        line = recording_line(body, payload, upstream_s)
        if self.config.record_to is not None:
            await asyncio.to_thread(append_line, self.config.record_to, line)
        recording = Recording.from_line(line)
        self.recordings.setdefault(recording.key, recording)
        return Reply(200, payload)


def validate_request(body: Any) -> str | None:
    """Why this body cannot be answered, or None."""
    if not isinstance(body, Mapping):
        return "the request body must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, Mapping) for m in messages):
        return "'messages' must be a non-empty list of message objects"
    if body.get("stream"):
        return "stream=true is not supported by the replay server"
    response_format = body.get("response_format")
    if response_format is not None and not isinstance(response_format, Mapping):
        return "'response_format' must be an object"
    return None


def rate_limited(decision: Decision, limits: str) -> Reply:
    wait = decision.retry_after_s
    message = (
        f"Rate limit reached ({decision.reason}; limits: {limits}). Please try again in {wait:.3f}s. "
        "(memstream replay server: a synthetic provider limit)"
    )
    body = error_body(message, type="rate_limit_error", code="rate_limit_exceeded")
    return Reply(429, body, retry_after_headers(wait))


# --- HTTP ----------------------------------------------------------------------------------------


def create_app(service: ReplayService) -> FastAPI:
    """The HTTP face of ``service``; every error is an OpenAI error body."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with service:
            yield

    app = FastAPI(title="memstream replay server", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), type=kind), status_code=exc.status_code)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return service.models()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> JSONResponse:
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            service.stats.requests += 1
            service.stats.errors += 1
            return JSONResponse(error_body(f"the body is not JSON: {exc}", type="invalid_request_error"), 400)
        reply = await service.complete(body)
        return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return service.stats_json()

    @app.post("/stats/reset")
    async def stats_reset() -> dict[str, Any]:
        service.reset_stats()
        return service.stats_json()

    return app


def _exit_cleanly(signum: int, _frame: object) -> None:
    raise SystemExit(0)


class _Server(uvicorn.Server):
    """uvicorn's server that also tells the service to stop: a graceful shutdown waits for the
    requests in flight, and a replayed one may be sleeping out a long latency."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], object]):
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


def serve(service: ReplayService, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT; print the ready line once the socket listens.

    uvicorn catches both signals, shuts down gracefully, then raises the signal again under the
    handler that was there before it: this one, so a stop exits 0 rather than dying of the signal."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_cleanly)

    config = uvicorn.Config(
        create_app(service),
        host=host,
        port=port,
        log_level="warning",
        # Forwarded requests are the only ones a stop waits for (replayed ones are cut short): not for long.
        timeout_graceful_shutdown=3,
    )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        # From a signal handler: the event is set by the loop, not in the middle of whatever it was running.
        server = _Server(config, lambda: loop.call_soon_threadsafe(service.stop_serving))
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
            print(
                f"replay_server: ready on http://{host}:{bound}/v1 ({len(service.recordings)} recordings)", flush=True
            )
        await task

    asyncio.run(run())


# --- Running it: CLI, subprocess helpers, recording without a server ----------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="An OpenAI-compatible server that records the local LLM's real answers and replays them "
        "with synthetic provider latency and limits (a benchmark harness).",
    )
    parser.add_argument(
        "mode", choices=["record", "replay"], help="record: forward and append; replay: answer from recordings"
    )
    parser.add_argument(
        "--recordings",
        nargs="+",
        type=Path,
        default=[],
        metavar="FILE",
        help="JSONL recordings (record: the one to append to)",
    )
    parser.add_argument(
        "--record-to",
        type=Path,
        default=None,
        metavar="FILE",
        help="where forwarded answers are appended (default: the first --recordings)",
    )
    parser.add_argument(
        "--upstream", default=None, metavar="URL", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8011/v1"
    )
    parser.add_argument("--upstream-timeout", type=float, default=600.0, metavar="S")
    parser.add_argument(
        "--on-miss", choices=["error", "upstream", "nearest"], default="error", help="replay: a request nobody recorded"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8012, help="0: any free port (the ready line names it)")
    latency = parser.add_mutually_exclusive_group()
    latency.add_argument(
        "--latency-fixed", type=float, default=None, metavar="S", help="replay: every answer after S seconds"
    )
    latency.add_argument(
        "--latency-p50", type=float, default=None, metavar="S", help="replay: lognormal latency median"
    )
    parser.add_argument(
        "--latency-p99", type=float, default=None, metavar="S", help="replay: lognormal latency 99th percentile"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the latency draws")
    parser.add_argument("--rpm", type=int, default=None, help="requests per minute (429 beyond)")
    parser.add_argument(
        "--tpm", type=int, default=None, help="tokens per minute: recorded prompt + completion (429 beyond)"
    )
    parser.add_argument("--max-concurrency", type=int, default=None, help="requests in flight (429 beyond)")
    parser.add_argument(
        "--prompt-cache", action=argparse.BooleanOptionalAction, default=True, help="simulate cached_tokens"
    )
    parser.add_argument("--prompt-cache-entries", type=int, default=200_000, help="prefix hashes kept (LRU)")
    args = parser.parse_args(argv)
    problem = argument_problem(args)
    if problem:
        parser.error(problem)
    return args


def argument_problem(args: argparse.Namespace) -> str | None:
    if args.mode == "record" and (not args.upstream or len(args.recordings) != 1):
        return "record needs --upstream URL and exactly one --recordings FILE"
    if args.mode == "replay" and not args.recordings:
        return "replay needs --recordings FILE [FILE ...]"
    if args.on_miss == "upstream" and not args.upstream:
        return "--on-miss upstream needs --upstream URL"
    if (args.latency_p50 is None) != (args.latency_p99 is None):
        return "--latency-p50 and --latency-p99 go together"
    if args.latency_p50 is not None and not 0 < args.latency_p50 <= args.latency_p99:
        return "need 0 < --latency-p50 <= --latency-p99"
    if args.latency_fixed is not None and args.latency_fixed < 0:
        return "--latency-fixed must be >= 0"
    for name in ("rpm", "tpm", "max_concurrency"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be >= 1"
    return None


def config_from_args(args: argparse.Namespace) -> Config:
    if args.latency_p50 is not None:
        latency = LatencyModel(p50=args.latency_p50, p99=args.latency_p99, seed=args.seed)
    else:
        latency = LatencyModel.fixed(args.latency_fixed or 0.0)
    recordings = tuple(p.resolve() for p in args.recordings)
    record_to = args.record_to.resolve() if args.record_to else (recordings[0] if recordings else None)
    return Config(
        mode=args.mode,
        recordings=recordings,
        record_to=record_to,
        upstream=args.upstream,
        upstream_timeout_s=args.upstream_timeout,
        on_miss=args.on_miss,
        latency=latency,
        limits=Limits(rpm=args.rpm, tpm=args.tpm, max_concurrency=args.max_concurrency),
        prompt_cache=args.prompt_cache,
        prompt_cache_entries=args.prompt_cache_entries,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    service = ReplayService(config_from_args(args))
    try:
        serve(service, args.host, args.port)
    finally:
        print(f"replay_server: stopped ({canonical_json(service.stats_json())})", flush=True)


def start_replay(
    args: Sequence[str], port: int, log_path: Path, *, python: str = sys.executable, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start the server as a subprocess on 127.0.0.1:``port`` with CLI ``args`` (mode first), its
    output in ``log_path``; in its own session, so a Ctrl-C meant for the caller does not reach it.
    Pair with :func:`wait_ready` and :func:`stop_replay`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # By file path, not -m: the same in a checkout and in an installed wheel.
    command = [python, str(Path(__file__).resolve()), *args, "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("ab") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True
        )


@contextlib.contextmanager
def running(args: Sequence[str], log_path: Path) -> Iterator[str]:
    """The server with CLI ``args`` on a free loopback port for the block (start_replay, wait_ready,
    stop_replay); yields its base URL. A server that does not exit 0 on SIGTERM is an error."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = start_replay(args, port, log_path)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(url, 60, process)
        yield url
    finally:
        code = stop_replay(process)
    if code != 0:
        raise RuntimeError(f"the replay server exited {code} on SIGTERM: {log_path}")


def fetch_stats(url: str) -> dict[str, Any]:
    """``GET /stats`` of the server at ``url`` (its base URL ending in /v1)."""
    stats: dict[str, Any] = httpx.get(url.removesuffix("/v1") + "/stats", timeout=10).json()
    return stats


def wait_ready(url: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until ``url`` (a base URL ending in /v1) answers ``GET /models``; raise TimeoutError after
    ``timeout`` seconds, or RuntimeError at once when ``process`` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the replay server exited ({process.returncode}) before answering at {url}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url.rstrip("/") + "/models", timeout=2.0).status_code == 200:
                return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the replay server at {url} did not answer within {timeout}s")
        time.sleep(0.1)


def stop_replay(process: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; the exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def record_prompts(
    upstream_url: str,
    requests: Iterable[Mapping[str, Any]],
    out_path: Path,
    *,
    model: str = "local",
    timeout: float = 600.0,
) -> list[str]:
    """Record chat-completions ``requests`` (bodies; ``model`` is filled in when missing) against the
    upstream one at a time (the local server serialises them anyway) into ``out_path``, skipping
    those recorded there already, so an interrupted recording resumes. Returns each request's key."""
    done = set(load_recordings([out_path]))
    keys = []
    with httpx.Client(base_url=upstream_url.rstrip("/") + "/", timeout=timeout) as client:
        for request in requests:
            body = {"model": model, **request}
            key = request_key(body["messages"], body.get("response_format"))
            keys.append(key)
            if key in done:
                continue
            started = time.monotonic()
            answer = client.post("chat/completions", json=body)
            answer.raise_for_status()
            append_line(out_path, recording_line(body, answer.json(), time.monotonic() - started))
            done.add(key)
    return keys


if __name__ == "__main__":
    main()
