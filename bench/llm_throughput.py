"""``memstream bench llm-throughput``: what one worker does in LLM mode when its LLM answers after a
hosted provider's latency, at 1, 4, 16 and 64 calls in flight.

- **ingest**: one worker running the extract stage (the LLM-bound one; the CPU-bound stages before
  and after it scale apart, see ``memstream capacity``) is handed the STM flushes of 64 conversations
  at once (copies of the recorded ones under other tenants, three flushes each); turns/s = the turns
  those flushes hold / the time until every one is extracted. One conversation's flushes are
  extracted in order, one at a time: its calls in flight are one, and a worker's are at most the
  conversations it has flushes of.
- **questions**: one worker running the query stage over the memories of those conversations is
  asked LLM-answered questions (the recorded ones, again until about 16 per slot), twice as many
  outstanding as it keeps in flight; questions/s and the reply p50/p99 as the asker saw them.
- **eight at once**: eight LLM-answered questions asked together of an endpoint that answers every
  call after exactly ``check_latency_s``, one at a time in flight and at the default: the simple
  check anyone can repeat.

The LLM is a stand-in for a provider's timing, and the results say so: the local model's real
answers (SmolLM2-135M on llama.cpp, ``infra/llm``), recorded once through the replay server in front
of it with the same prompts the measured workers send, then served by ``infra/llm/replay_server.py``
after a latency drawn from a lognormal (default p50 1.2 s, p99 4 s) under a provider-style limit
(429 + Retry-After past ``provider_concurrency`` calls at once or ``provider_rpm`` a minute). The
recording runs the whole pipeline once (all stages, one worker, the local model) and is kept in the
work folder: later runs reuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import orjson

from memstream.bench.deploy import llm_costs, worker_samples
from memstream.bench.deployment import Deployment
from memstream.bench.dev_data import locomo_dev_if_present
from memstream.bench.plots import pyplot, save_figure
from memstream.bench.report import source_commit
from memstream.bench.scoring import percentile
from memstream.client import AsyncMemoryClient
from memstream.config import Settings
from memstream.datasets import LocomoSample, demo_conversation_path, load_locomo, locomo_turns
from memstream.infra.llm import replay_server
from memstream.schemas import StmFlush
from memstream.schemas.topics import Topic
from memstream.streams import runtime

RECORDING = "recording"  # the work folder's recording run: deployment, store, flushes, questions, answers


@dataclass(frozen=True)
class LlmThroughputOptions:
    data: Path | None = None  # LoCoMo JSON; default: ../shared dev data when present, else the packaged conversation
    conversations: int = 2  # of the data, each under its own tenant
    sessions: int | None = None  # of each conversation (None: all)
    questions: int = 120  # LLM-answered questions recorded, and asked at each in-flight count
    in_flight: tuple[int, ...] = (1, 4, 16, 64)
    # The ingest worker is handed ``copies`` of each conversation (each under a tenant of its own), the
    # first ``flushes_per_conversation`` flushes of each: one conversation's flushes are extracted one
    # after another (in order), so the calls in flight are at most the conversations in flight.
    copies: int = 32
    flushes_per_conversation: int = 3
    latency_p50_s: float = 1.2
    latency_p99_s: float = 4.0
    provider_concurrency: int = 48  # calls at once the stand-in provider takes before answering 429
    provider_rpm: float = 0.0  # ... and calls a minute (0 = no limit)
    check_latency_s: float = 1.0  # the eight-at-once check's fixed latency
    seed: int = 0
    workdir: Path = Path(".data/bench/llm-throughput")


@dataclass
class Recording:
    """What the recording run left in its folder."""

    folder: Path

    @property
    def answers(self) -> Path:
        return self.folder / "answers.jsonl"

    @property
    def flushes(self) -> Path:
        return self.folder / "flushes.jsonl"

    @property
    def questions(self) -> Path:
        return self.folder / "questions.jsonl"

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.json"

    @property
    def deployment(self) -> Path:
        return self.folder / "deployment"

    def store_path(self) -> Path:
        return Settings(data_dir=self.deployment).store_path  # no broker needed to know where it is


@dataclass
class Run:
    """One measured run: a figure and what it cost."""

    in_flight: int
    items: int  # turns, or questions
    seconds: float
    per_s: float
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    rate_limited: int = 0  # 429s the worker met (and waited out)
    provider: dict[str, Any] = field(default_factory=dict)  # the replay server's /stats
    p50_s: float | None = None
    p99_s: float | None = None
    errors: int = 0


def default_data() -> Path:
    return locomo_dev_if_present() or demo_conversation_path()


def bench_samples(options: LlmThroughputOptions) -> list[LocomoSample]:
    return load_locomo(options.data or default_data())[: options.conversations]


def tenant_of(index: int) -> str:
    return f"llm-bench-{index}"


# --- the recording ---------------------------------------------------------------------------------


def recording_key(options: LlmThroughputOptions) -> dict[str, Any]:
    """What the recording depends on: a change in any of it records again."""
    return {
        "data": str((options.data or default_data()).resolve()),
        "conversations": options.conversations,
        "sessions": options.sessions,
        "questions": options.questions,
        "local_llm": runtime.local_llm_env(Settings()) | {"MEMSTREAM_LLM_BASE_URL": ""},
    }


def pick_questions(samples: Sequence[LocomoSample], n: int) -> list[dict[str, Any]]:
    """Answerable questions (not LoCoMo's adversarial category 5), taken in turn from each conversation,
    each asked at the time of its conversation's last session (relative dates then read the same)."""
    per = [[qa for qa in s.qa if qa.category != 5] for s in samples]
    last = [list(locomo_turns(s, tenant_id="x"))[-1].event_time.isoformat() for s in samples]
    out: list[dict[str, Any]] = []
    for i in range(max((len(p) for p in per), default=0)):
        for index, (sample, qas) in enumerate(zip(samples, per)):
            if i < len(qas) and len(out) < n:
                out.append(
                    {
                        "tenant": tenant_of(index),
                        "conversation": sample.sample_id,
                        "question": qas[i].question,
                        "question_time": last[index],
                    }
                )
    return out


def record(options: LlmThroughputOptions, status: Callable[[str], None]) -> Recording:
    """Run the pipeline once with the local model behind the replay server in record mode: every
    extraction and answer call the measured workers will make is in its recording."""
    rec = Recording(options.workdir / RECORDING)
    key = recording_key(options)
    if rec.manifest.exists() and json.loads(rec.manifest.read_text()) == key:
        status("reusing the recording in " + str(rec.folder))
        return rec
    shutil.rmtree(rec.folder, ignore_errors=True)
    rec.folder.mkdir(parents=True)
    base = Settings()
    samples = bench_samples(options)
    with (
        runtime.LOCAL_LLM.session(base),
        replay(
            ["record", "--upstream", runtime.local_llm_url(base), "--recordings", str(rec.answers)], rec.folder
        ) as url,
    ):
        env = runtime.local_llm_env(base) | {
            "MEMSTREAM_LLM_BASE_URL": url,
            "MEMSTREAM_STM_IDLE_S": "5",
            "MEMSTREAM_SLEEP_IDLE_S": "86400",  # no consolidation: its calls are not measured here
        }
        dep = Deployment(base, rec.deployment, env)
        try:
            status("recording: ingesting with the local model (minutes)")
            dep.start_worker("recording")
            for index, sample in enumerate(samples):
                dep.produce(locomo_turns(sample, tenant_id=tenant_of(index), max_sessions=options.sessions))
            dep.drain(timeout_s=7200)
            questions = pick_questions(samples, options.questions)
            status(f"recording: {len(questions)} answers from the local model")
            asyncio.run(ask_all(dep.settings, questions, outstanding=1, timeout_s=600))
        finally:
            dep.stop_workers()
        flushes = [
            {"key": k.decode(), "value": v.decode()}
            for k, v in dep.read_topic(Topic.STM_FLUSH, timeout_s=60)
            if k and b'"stm_flush"' in v
        ]
    rec.flushes.write_text("".join(json.dumps(f) + "\n" for f in flushes))
    rec.questions.write_text("".join(json.dumps(q) + "\n" for q in questions))
    rec.manifest.write_text(json.dumps(key, indent=2) + "\n")
    return rec


# --- the stand-in provider -------------------------------------------------------------------------


def replay(args: Sequence[str], folder: Path) -> contextlib.AbstractContextManager[str]:
    """The replay server with ``args`` for a block, its log in ``folder``; yields its base URL."""
    return replay_server.running(args, folder / f"replay-{time.monotonic_ns()}.log")


def provider_args(options: LlmThroughputOptions, rec: Recording, *, fixed_s: float | None = None) -> list[str]:
    args = ["replay", "--recordings", str(rec.answers), "--on-miss", "nearest", "--seed", str(options.seed)]
    if fixed_s is not None:
        return args + ["--latency-fixed", str(fixed_s)]
    args += ["--latency-p50", str(options.latency_p50_s), "--latency-p99", str(options.latency_p99_s)]
    args += ["--max-concurrency", str(options.provider_concurrency)]
    if options.provider_rpm:
        args += ["--rpm", str(options.provider_rpm)]
    return args


def worker_env(url: str, in_flight: int) -> dict[str, str]:
    """The local model's worker settings, its calls sent to the stand-in provider, ``in_flight`` of them."""
    return runtime.local_llm_env(Settings()) | {
        "MEMSTREAM_LLM_BASE_URL": url,
        "MEMSTREAM_LLM_IN_FLIGHT": str(in_flight),
        "MEMSTREAM_LLM_MAX_CONCURRENCY": str(max(in_flight, 1)),
        "MEMSTREAM_SLEEP_IDLE_S": "86400",
    }


def stage_cost(port: int | None, stage: str) -> dict[str, int]:
    assert port is not None, "the bench's workers serve their metrics"
    stages, _ = llm_costs(port)
    return stages.get(stage, {})


def rate_limited(port: int | None) -> int:
    assert port is not None, "the bench's workers serve their metrics"
    return int(sum(s.value for s in worker_samples(port) if s.name == "memstream_llm_rate_limited_total"))


# --- ingest ----------------------------------------------------------------------------------------


def first_flushes(flushes: Sequence[dict[str, str]], options: LlmThroughputOptions) -> list[dict[str, str]]:
    """The first ``flushes_per_conversation`` recorded flushes of each conversation, in order."""
    taken: dict[str, int] = {}
    out = []
    for flush in flushes:
        if taken.get(flush["key"], 0) < options.flushes_per_conversation:
            taken[flush["key"]] = taken.get(flush["key"], 0) + 1
            out.append(flush)
    return out


def retenanted(flush: dict[str, str], copy: int) -> tuple[str, bytes]:
    """A recorded flush as if another tenant had said it (the prompt, which names no tenant, is the same)."""
    tenant = flush["key"].split("/", 1)[0]
    new = f"{tenant}-c{copy}"
    value = orjson.loads(flush["value"])

    def swap(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (new if k == "tenant_id" and v == tenant else swap(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v) for v in node]
        return node

    moved = StmFlush.model_validate(swap(value))
    return moved.key, moved.to_bytes()


def measure_ingest(options: LlmThroughputOptions, rec: Recording, in_flight: int, status: Callable[[str], None]) -> Run:
    base = Settings()
    flushes = first_flushes([json.loads(line) for line in rec.flushes.read_text().splitlines()], options)
    messages = [retenanted(f, c) for c in range(options.copies) for f in flushes]
    turns = options.copies * sum(len(StmFlush.from_bytes(f["value"].encode()).turns()) for f in flushes)
    folder = options.workdir / f"ingest-{in_flight}"
    shutil.rmtree(folder, ignore_errors=True)
    with replay(provider_args(options, rec), options.workdir) as url:
        dep = Deployment(base, folder, worker_env(url, in_flight))
        try:
            status(f"ingest, {in_flight} in flight: {len(messages)} flushes, {turns} turns")
            worker = dep.start_worker(f"extract-{in_flight}", stages="extract")
            started = time.monotonic()
            asyncio.run(produce_raw(dep.settings, Topic.STM_FLUSH, messages))
            ended = dep.drain(timeout_s=3600, topics=[Topic.STM_FLUSH], flush=False)
            cost = stage_cost(worker.metrics_port, "extract")
            limited = rate_limited(worker.metrics_port)
            stats = replay_server.fetch_stats(url)
        finally:
            dep.stop_workers()
    seconds = ended - started
    return Run(
        in_flight,
        turns,
        round(seconds, 2),
        round(turns / seconds, 1),
        calls=cost.get("calls", 0),
        prompt_tokens=cost.get("prompt_tokens", 0),
        completion_tokens=cost.get("completion_tokens", 0),
        rate_limited=limited,
        provider=stats,
    )


async def produce_raw(settings: Settings, topic: str, messages: Sequence[tuple[str, bytes]]) -> None:
    async with AsyncMemoryClient(settings) as client:
        for key, value in messages:
            await client.send_raw(settings.topic(topic), key.encode(), value)


# --- questions -------------------------------------------------------------------------------------


async def ask_all(
    settings: Settings, questions: Sequence[dict[str, Any]], *, outstanding: int, timeout_s: float
) -> tuple[list[float], int]:
    """Ask every question with ``outstanding`` at a time; each reply's seconds, and the errors."""
    gate = asyncio.Semaphore(outstanding)
    seconds: list[float] = []
    errors = 0

    async with AsyncMemoryClient(settings) as client:

        async def one(q: dict[str, Any]) -> None:
            nonlocal errors
            async with gate:
                sent = time.monotonic()
                reply = await client.ask(
                    q["question"],
                    tenant_id=q["tenant"],
                    conversation_id=q["conversation"],
                    question_time=datetime.fromisoformat(q["question_time"]),
                    timeout_s=timeout_s,
                    raise_on_error=False,
                )
                seconds.append(time.monotonic() - sent)
                errors += int(not reply.ok or reply.answer_mode != "llm")

        await asyncio.gather(*(one(q) for q in questions))
    return seconds, errors


def query_deployment(rec: Recording, folder: Path, env: dict[str, str]) -> Deployment:
    """A deployment of its own (topics, group) over the recording's memories."""
    shutil.rmtree(folder, ignore_errors=True)
    return Deployment(Settings(), folder, env | {"MEMSTREAM_QDRANT_PATH": str(rec.store_path())})


def measure_questions(
    options: LlmThroughputOptions, rec: Recording, in_flight: int, status: Callable[[str], None]
) -> Run:
    recorded = [json.loads(line) for line in rec.questions.read_text().splitlines()]
    # Long enough at every count to be more than its ramp: the recorded questions, asked again (the
    # same evidence, the same recorded answer) until about 16 a slot.
    questions = recorded * max(1, round(16 * in_flight / len(recorded)))
    with replay(provider_args(options, rec), options.workdir) as url:
        dep = query_deployment(rec, options.workdir / f"query-{in_flight}", worker_env(url, in_flight))
        try:
            status(f"questions, {in_flight} in flight: {len(questions)}")
            worker = dep.start_worker(f"query-{in_flight}", stages="query")
            started = time.monotonic()
            seconds, errors = asyncio.run(ask_all(dep.settings, questions, outstanding=2 * in_flight, timeout_s=600))
            elapsed = time.monotonic() - started
            cost = stage_cost(worker.metrics_port, "answer")
            limited = rate_limited(worker.metrics_port)
            stats = replay_server.fetch_stats(url)
        finally:
            dep.stop_workers()
    return Run(
        in_flight,
        len(questions),
        round(elapsed, 2),
        round(len(questions) / elapsed, 2),
        calls=cost.get("calls", 0),
        prompt_tokens=cost.get("prompt_tokens", 0),
        completion_tokens=cost.get("completion_tokens", 0),
        rate_limited=limited,
        provider=stats,
        p50_s=round(percentile(seconds, 50), 2),
        p99_s=round(percentile(seconds, 99), 2),
        errors=errors,
    )


def eight_at_once(options: LlmThroughputOptions, rec: Recording, in_flight: int) -> list[float]:
    """Eight LLM-answered questions asked together, the endpoint answering each call after exactly
    ``check_latency_s``: each reply's seconds, in the order they came back."""
    questions = [json.loads(line) for line in rec.questions.read_text().splitlines()][:8]
    with replay(provider_args(options, rec, fixed_s=options.check_latency_s), options.workdir) as url:
        dep = query_deployment(rec, options.workdir / f"eight-{in_flight}", worker_env(url, in_flight))
        try:
            dep.start_worker(f"eight-{in_flight}", stages="query")
            seconds, _ = asyncio.run(ask_all(dep.settings, questions, outstanding=8, timeout_s=120))
        finally:
            dep.stop_workers()
    return sorted(round(s, 2) for s in seconds)


# --- the bench -------------------------------------------------------------------------------------


def per_item(run: Run, items: int = 1) -> dict[str, float]:
    """Calls and tokens per ``items`` turns or questions."""
    return {
        "calls": round(items * run.calls / run.items, 2),
        "prompt_tokens": round(items * run.prompt_tokens / run.items, 1),
        "completion_tokens": round(items * run.completion_tokens / run.items, 1),
    }


def run_llm_throughput_bench(
    options: LlmThroughputOptions, *, status: Callable[[str], None] = lambda s: None
) -> dict[str, Any]:
    base = Settings()
    with runtime.KAFKA.session(base):
        rec = record(options, status)
        ingest = [measure_ingest(options, rec, n, status) for n in options.in_flight]
        questions = [measure_questions(options, rec, n, status) for n in options.in_flight]
        status("eight questions at once")
        check = {str(n): eight_at_once(options, rec, n) for n in (1, base.llm_in_flight)}
    one = ingest[0].per_s if ingest and ingest[0].in_flight == 1 else None
    return {
        "bench": "llm-throughput",
        "commit": source_commit(),
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count()},
        "llm": (
            "stand-in for a provider's timing: the local model's recorded answers (SmolLM2-135M, llama.cpp) "
            "replayed by infra/llm/replay_server.py after a lognormal latency, with 429 + Retry-After past "
            "the provider limits"
        ),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
        "ingest": [asdict(r) | {"per_1000_turns": per_item(r, 1000)} for r in ingest],
        "ingest_speedup": {str(r.in_flight): round(r.per_s / one, 1) for r in ingest} if one else {},
        "questions": [asdict(r) | {"per_question": per_item(r)} for r in questions],
        "eight_at_once_s": check,
    }


def plot(result: dict[str, Any], out: Path) -> Path:
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    ingest, questions = result["ingest"], result["questions"]
    left.plot([r["in_flight"] for r in ingest], [r["per_s"] for r in ingest], "o-", label="ingest turns/s")
    left.plot(
        [r["in_flight"] for r in questions], [r["per_s"] for r in questions], "s-", label="LLM-answered questions/s"
    )
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("LLM calls in flight per worker")
    left.set_title("one worker")
    left.legend()
    right.plot([r["in_flight"] for r in questions], [r["p50_s"] for r in questions], "o-", label="reply p50")
    right.plot([r["in_flight"] for r in questions], [r["p99_s"] for r in questions], "s--", label="reply p99")
    right.set_xscale("log", base=2)
    right.set_xlabel("LLM calls in flight per worker")
    right.set_ylabel("seconds")
    right.set_title("LLM-answered questions")
    right.legend()
    o = result["options"]
    fig.suptitle(
        f"LLM mode, latency p50 {o['latency_p50_s']} s / p99 {o['latency_p99_s']} s "
        "(recorded local-model answers replayed: a stand-in for a provider's timing)",
        fontsize=9,
    )
    return save_figure(plt, fig, out, dpi=110)
