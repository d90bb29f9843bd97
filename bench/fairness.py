"""``memstream bench fairness``: a tenant's live traffic while another imports its history (issue 47, part 4).

One worker (all stages; extractive unless ``llm``) and one gateway on the broker, two tenants:

- **B**, the one measured, runs in a process of its own (as a tenant's own client does). It
  produces live turns with the SDK at ``b_rate`` (conversations of ``b_conversation_turns`` turns,
  then a new one) and asks an evidence-only question every ``question_s``. Every
  ``probe_every``-th turn is a fresh-turn probe: asked for with its own text until a reply cites it
  (asked again as it ages, a tenth of its age apart: at most a tenth late). Turn-to-card: from
  producing a turn until the memory write holding it (its flush's cards) is on ``memory.cards``; it
  includes the wait for the conversation to go quiet (``stm_idle_s``).
- **A**, the noisy one, goes through the gateway with a rate limit of ``a_turns_per_s``: it floods
  live turns (``POST /v1/turns``) as fast as the gateway lets it (after a 429 it tries again within
  ``flood_backoff_s``, not after Retry-After: a flood does not wait) and imports ``import_turns``
  history turns.

Three phases of ``phase_s``, each with conversations of its own: **baseline** (B alone), **bulk** (A
imports through the bulk lane, ``POST /v1/import``, and floods) and **live** (the same import sent as
live turns onto ``memory.turns`` with the SDK, as an import without the bulk lane would, and the same
flood). Between phases the pipeline drains (after the bulk phase: until the whole import is in), so a
phase starts on an empty pipeline; after the last, every conversation is flushed. Then every turn
acknowledged (by the broker or with a 202) must be in the store, flushed, once: lost, a turn with no
raw-turn point there (or only its fresh one); duplicated, a turn in more than one distinct memory write
(a redelivered write has the same id); and no turn of a refused (429) request may be there. B's p99s
in the bulk and live phases are given as ratios to the baseline's (target: within 2x under the bulk
import). A probe or question with no answer in time counts as its timeout in the percentiles."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Iterable

import httpx
import orjson

from memstream.bench.deploy import worker_samples
from memstream.bench.deployment import Deployment
from memstream.bench.freshness import tail_writes
from memstream.bench.report import source_commit
from memstream.bench.scoring import percentile
from memstream.client import AsyncMemoryClient, MemstreamError, wait_written
from memstream.config import Settings, absolute_path
from memstream.processors.write.index import TURNS, is_fresh, turn_point_id
from memstream.schemas import MemoryWrite, Reply, Turn
from memstream.schemas.topics import DRAIN_TOPICS, Topic
from memstream.streams import runtime
from memstream.streams.lag import topics_lag, wait_drained

TENANT_A, TENANT_B = "fair-a", "fair-b"
KEY_A = "bench-fairness-key-a"
PHASES = ("baseline", "bulk", "live")
FIGURES = ("fresh", "card", "reply")
FLOOD_CONVERSATIONS = 8
NAMES = ["Ana", "Ben", "Caro", "Dev", "Eli", "Faye", "Gus", "Hana"]
THINGS = ["a bike", "the cello", "a puppy", "tomatoes", "a kayak", "chess", "pottery", "a telescope", "bees", "tea"]
PLACES = ["Porto", "Oslo", "the library", "the market", "Lisbon", "the lake", "Kyoto", "the park", "Lima", "Bern"]
VERBS = ["bought", "started", "found", "lost", "painted", "fixed", "sold", "borrowed", "saw", "planted"]


@dataclass
class FairnessOptions:
    import_turns: int = 20_000  # A's history, sent once per import phase
    import_conversation_turns: int = 200  # turns of one imported conversation (one request each)
    phase_s: float = 300.0
    b_rate: float = 1.0  # B's live turns per second
    b_conversation_turns: int = 6  # then B goes on in a new conversation (the old one goes quiet, flushes)
    probe_every: int = 5  # every Nth B turn is a fresh-turn probe
    question_s: float = 5.0  # between B's questions
    a_turns_per_s: float = 4.0  # A's rate limit at the gateway
    a_burst_s: float = 2.0
    flood_batch: int = 4  # turns per POST /v1/turns of A's flood
    flood_backoff_s: float = 0.05  # after a 429
    a_llm_calls: int = 50  # A's LLM budget per window (its fallbacks count only with ``llm``)
    stm_idle_s: float = 5.0
    probe_timeout_s: float = 120.0  # a probe or question without an answer by then counts as this
    settle_timeout_s: float = 3600.0  # each drain between phases, and the last
    sample_s: float = 2.0
    llm: bool = False  # extraction by the local LLM server (shared and serial here: slow)
    seed: int = 0
    workdir: Path = Path(".data/bench/fairness")


@dataclass
class Timed:
    phase: str
    at_s: float  # since the start of the run, when it was sent
    seconds: float | None  # None: no answer in time (or an error reply)


def sentence(rng: random.Random, n: int) -> str:
    name, thing, place, verb = rng.choice(NAMES), rng.choice(THINGS), rng.choice(PLACES), rng.choice(VERBS)
    return f"{name} {verb} {thing} in {place} on day {n}, and it cost {rng.randint(2, 900)} euros."


def history(o: FairnessOptions, phase: str) -> list[Turn]:
    """A's import: ``import_turns`` turns of past conversations, ``import_conversation_turns`` each,
    a minute apart (the same text in both import phases, in conversations named after the phase)."""
    rng = random.Random(o.seed)
    start = datetime(2023, 1, 1, tzinfo=timezone.utc)
    turns = []
    for i in range(o.import_turns):
        c, k = divmod(i, o.import_conversation_turns)
        turns.append(
            Turn(
                tenant_id=TENANT_A,
                conversation_id=f"{phase}-h{c:04d}",
                session_id=f"S{k // 50 + 1}",
                turn_id=f"h{k}",
                speaker=NAMES[k % 2],
                text=sentence(rng, i),
                event_time=start + timedelta(days=c, minutes=k),
            )
        )
    return turns


def latency_figures(timed: Iterable[Timed], phase: str, missed_as: float | None) -> dict[str, Any]:
    """p50/p99/max of a phase's latencies; one missed counts as ``missed_as`` (a lower bound of its
    wait), or is left out when that is None."""
    mine = [t for t in timed if t.phase == phase]
    values = [t.seconds for t in mine if t.seconds is not None]
    missed = len(mine) - len(values)
    if missed_as is not None:
        values += [missed_as] * missed
    if not values:
        return {"n": len(mine), "p50_s": None, "p99_s": None, "max_s": None, "missed": missed}
    return {
        "n": len(mine),
        "p50_s": round(percentile(values, 50), 3),
        "p99_s": round(percentile(values, 99), 3),
        "max_s": round(max(values), 3),
        "missed": missed,
    }


def ratio(value: float | None, base: float | None) -> float | None:
    return round(value / base, 2) if value is not None and base else None


def delivery(
    sent: Iterable[str], refused: Iterable[str], stored: set[str], writes_of: dict[str, set[str]]
) -> dict[str, int]:
    """Turn point ids acknowledged (``sent``) and refused against the flushed raw-turn points in the
    store and the distinct memory writes each turn was in."""
    acked, denied = set(sent), set(refused)
    return {
        "turns_sent": len(acked),
        "turns_lost": len(acked - stored),
        "turns_duplicated": sum(1 for pid in acked if len(writes_of.get(pid, ())) > 1),
        "refused_turns": len(denied),
        "refused_turns_stored": len(denied & stored),
    }


class TenantB:
    """The measured tenant: live turns at its rate, fresh-turn probes, questions; each timed."""

    def __init__(self, o: FairnessOptions, client: AsyncMemoryClient, elapsed: Callable[[], float]):
        self.o, self.client, self.elapsed = o, client, elapsed
        self.rng = random.Random(o.seed + 1)
        self.n = 0
        self.sent: dict[str, tuple[str, float, float]] = {}  # turn point id -> (phase, at_s, monotonic)
        self.card_seen: dict[str, float] = {}  # turn point id -> monotonic, its write first seen
        self.fresh: list[Timed] = []
        self.replies: list[Timed] = []
        self.reply_errors = 0
        self.recent: list[Turn] = []
        self.conversations: set[str] = set()
        self.probes: list[asyncio.Task[None]] = []

    def next_turn(self, phase: str) -> Turn:
        c, k = divmod(self.n, self.o.b_conversation_turns)
        self.n += 1
        return Turn(
            tenant_id=TENANT_B,
            conversation_id=f"{phase}-b{c:04d}",
            session_id="S1",
            turn_id=f"t{k}",
            speaker=NAMES[2 + k % 2],
            text=f"Note {self.n}: {sentence(self.rng, self.n)}",
            event_time=datetime.now(timezone.utc),
        )

    async def stream(self, phase: str, end: float) -> None:
        """A turn every 1/``b_rate`` s until ``end``; every ``probe_every``-th is probed."""
        self.n = 0  # each phase's conversations start again from b0000 (its own names)
        self.recent = []  # questions ask about this phase's turns
        sent = 0
        start = time.monotonic()
        while time.monotonic() < end:
            turn = self.next_turn(phase)
            at, now = self.elapsed(), time.monotonic()
            self.sent[turn_point_id(TENANT_B, turn.conversation_id, turn.turn_id)] = (phase, at, now)
            await self.client.remember([turn])
            self.conversations.add(turn.conversation_id)
            self.recent = (self.recent + [turn])[-30:]
            if sent % self.o.probe_every == 0:
                self.probes.append(asyncio.create_task(self.probe(phase, turn, at, now)))
            sent += 1
            await asyncio.sleep(max(0.0, start + sent / self.o.b_rate - time.monotonic()))

    async def ask(self, question: str, conversation_id: str, timeout_s: float) -> Reply | None:
        """An evidence-only question in one of B's conversations; None: no reply in time."""
        try:
            return await self.client.ask(
                question,
                tenant_id=TENANT_B,
                conversation_id=conversation_id,
                answer=False,
                timeout_s=timeout_s,
                raise_on_error=False,
            )
        except MemstreamError:
            return None

    async def probe(self, phase: str, turn: Turn, at: float, sent: float) -> None:
        """Ask with the turn's text until a reply cites it; asked again a tenth of its age later."""
        while (age := time.monotonic() - sent) < self.o.probe_timeout_s:
            reply = await self.ask(turn.text, turn.conversation_id, 30.0)
            if reply is not None and any(turn.turn_id in e.turn_ids for e in reply.evidence):
                self.fresh.append(Timed(phase, at, time.monotonic() - sent))
                return
            await asyncio.sleep(min(5.0, max(0.25, age / 10)))
        self.fresh.append(Timed(phase, at, None))

    async def questions(self, phase: str, end: float) -> None:
        while time.monotonic() < end:
            started = time.monotonic()
            if self.recent:
                turn = self.rng.choice(self.recent)
                question = f"What did {turn.speaker} say about {turn.text.split(' in ')[0].split()[-1]}?"
                at = self.elapsed()
                reply = await self.ask(question, turn.conversation_id, self.o.probe_timeout_s)
                ok = reply is not None and reply.error is None
                self.reply_errors += not ok
                self.replies.append(Timed(phase, at, time.monotonic() - started if ok else None))
            await asyncio.sleep(max(0.0, min(started + self.o.question_s, end) - time.monotonic()))

    async def run_phase(self, phase: str, end: float) -> None:
        """Stream and ask until ``end``, then wait for the phase's probes."""
        await asyncio.gather(self.stream(phase, end), self.questions(phase, end))
        await asyncio.gather(*self.probes)
        self.probes = []

    def saw(self, write: MemoryWrite) -> None:
        if write.tenant_id != TENANT_B:
            return
        now = time.monotonic()
        for source in write.source_turns:
            self.card_seen.setdefault(turn_point_id(TENANT_B, write.conversation_id, source.turn_id), now)

    def cards(self) -> list[Timed]:
        return [
            Timed(phase, at, self.card_seen[pid] - sent if pid in self.card_seen else None)
            for pid, (phase, at, sent) in self.sent.items()
        ]


B_FIGURES = ("sent", "fresh", "replies", "reply_errors", "conversations")  # what B's process sends back a phase


class TenantBApart(TenantB):
    """B run in a process of its own, as a tenant's own client is; this side keeps its figures. Measured
    from the bench's own event loop, B's replies would also wait on A's import and flood and on the
    tail of every memory write that loop runs (and on that process's garbage collections)."""

    def __init__(self, o: FairnessOptions, settings: Settings, t0: float, elapsed: Callable[[], float]):
        super().__init__(o, None, elapsed)  # type: ignore[arg-type]  # B's client is the other process's
        spawn = multiprocessing.get_context("spawn")  # no fork of a process with a loop and threads
        self.conn, child = spawn.Pipe()
        self.process = spawn.Process(target=tenant_b_process, args=(o, settings, t0, child), daemon=True)
        self.process.start()
        child.close()

    async def _answer(self) -> Any:
        answer = await asyncio.to_thread(self.conn.recv)
        if isinstance(answer, dict) and "error" in answer:
            raise RuntimeError(f"tenant B's process failed:\n{answer['error']}")
        return answer

    async def start(self) -> None:
        """Once B's client is connected: a phase starts with B ready."""
        await self._answer()

    async def run_phase(self, phase: str, end: float) -> None:
        self.conn.send((phase, end))  # ``end`` is time.monotonic(): one clock for every process here
        done = await self._answer()
        for key in B_FIGURES:  # a dict, lists, a count and a set: each grows by the phase's
            mine, more = getattr(self, key), done[key]
            setattr(self, key, mine | more if isinstance(mine, (dict, set)) else mine + more)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.process.join(30)
        if self.process.is_alive():
            self.process.terminate()


def tenant_b_process(o: FairnessOptions, settings: Settings, t0: float, conn: Connection) -> None:
    """B's process: a phase for each ``(phase, end)`` received, its figures sent back; None ends it."""

    async def main() -> None:
        async with AsyncMemoryClient(settings) as client:
            b = TenantB(o, client, lambda: time.monotonic() - t0)
            conn.send("ready")
            while (command := await asyncio.to_thread(conn.recv)) is not None:
                await b.run_phase(*command)
                conn.send({key: getattr(b, key) for key in B_FIGURES})
                for key in B_FIGURES:  # the next phase's figures start empty
                    setattr(b, key, type(getattr(b, key))())

    try:
        asyncio.run(main())
    except Exception:
        conn.send({"error": traceback.format_exc()})


class TenantA:
    """The noisy tenant: its history import (bulk lane or live turns) and its flood, through the gateway."""

    def __init__(self, o: FairnessOptions, client: AsyncMemoryClient, http: httpx.AsyncClient):
        self.o, self.client, self.http = o, client, http
        self.accepted: set[str] = set()  # turn point ids the gateway or the broker acknowledged
        self.refused: set[str] = set()  # ... of requests refused with 429
        self.conversations: set[str] = set()
        self.rate_limited: Counter[str] = Counter()  # per phase
        self.flood_turns: Counter[str] = Counter()  # accepted, per phase
        self.flood_requests: Counter[str] = Counter()
        self.import_sent_s: dict[str, float] = {}  # how long sending the import took (not letting it in)
        self.n = 0

    def _ids(self, turns: Iterable[Turn]) -> list[str]:
        return [turn_point_id(t.tenant_id, t.conversation_id, t.turn_id) for t in turns]

    async def import_bulk(self, phase: str) -> None:
        """The history through ``POST /v1/import``, a conversation a request, two in flight."""
        started = time.monotonic()
        by_conversation: dict[str, list[Turn]] = defaultdict(list)
        for turn in history(self.o, phase):
            by_conversation[turn.conversation_id].append(turn)
        queue = list(by_conversation.values())

        async def sender() -> None:
            while queue:
                turns = queue.pop(0)
                body = b"\n".join(orjson.dumps(t.model_dump(mode="json")) for t in turns)
                response = await self.http.post(
                    "/v1/import", content=body, headers={"Content-Type": "application/x-ndjson"}
                )
                if response.status_code != 202:
                    raise RuntimeError(f"POST /v1/import: {response.status_code} {response.text[:500]}")
                self.accepted.update(self._ids(turns))
                self.conversations.add(turns[0].conversation_id)

        await asyncio.gather(sender(), sender())
        self.import_sent_s[phase] = round(time.monotonic() - started, 2)

    async def import_live(self, phase: str) -> None:
        """The same history as live turns onto ``memory.turns`` (no bulk lane, no gateway limit)."""
        started = time.monotonic()
        turns = history(self.o, phase)
        await self.client.remember(turns)
        self.accepted.update(self._ids(turns))
        self.conversations.update(t.conversation_id for t in turns)
        self.import_sent_s[phase] = round(time.monotonic() - started, 2)

    def flood_batch(self, phase: str) -> list[Turn]:
        now = datetime.now(timezone.utc)
        turns = []
        # no bigger than the tenant's burst: a request over it would be refused whole (413), never admitted
        size = max(1, min(self.o.flood_batch, int(self.o.a_turns_per_s * self.o.a_burst_s)))
        for _ in range(size):
            c = self.n % FLOOD_CONVERSATIONS
            turns.append(
                Turn(
                    tenant_id=TENANT_A,
                    conversation_id=f"{phase}-f{c}",
                    session_id="S1",
                    turn_id=f"f{self.n}",
                    speaker=NAMES[self.n % 2],
                    text=f"Flood {self.n}: {NAMES[self.n % 8]} {VERBS[self.n % 10]} {THINGS[self.n % 10]}.",
                    event_time=now,
                )
            )
            self.n += 1
        return turns

    async def flood(self, phase: str, end: float) -> None:
        """Live turns through ``POST /v1/turns`` as fast as the gateway admits them, until ``end``."""
        while time.monotonic() < end:
            turns = self.flood_batch(phase)
            response = await self.http.post("/v1/turns", json={"turns": [t.model_dump(mode="json") for t in turns]})
            self.flood_requests[phase] += 1
            if response.status_code == 202:
                self.accepted.update(self._ids(turns))
                self.conversations.update(t.conversation_id for t in turns)
                self.flood_turns[phase] += len(turns)
            elif response.status_code == 429:
                self.refused.update(self._ids(turns))
                self.rate_limited[phase] += 1
                await asyncio.sleep(self.o.flood_backoff_s)
            else:
                raise RuntimeError(f"POST /v1/turns: {response.status_code} {response.text[:500]}")


def worker_counts(port: int | None) -> dict[str, float]:
    """The worker's imported turns and LLM budget fallbacks so far (zeros while it does not answer)."""
    out = {"imported": 0.0, "fallbacks": 0.0}
    with contextlib.suppress(OSError):
        for s in worker_samples(port):  # type: ignore[arg-type]
            if s.name == "memstream_imported_turns_total":
                out["imported"] += s.value
            elif s.name == "memstream_llm_budget_fallbacks_total":
                out["fallbacks"] += s.value
    return out


class FairnessRun:
    """The three phases over one deployment, a gateway, a tail of ``memory.cards`` and a sampler."""

    def __init__(self, o: FairnessOptions, dep: Deployment, gateway_url: str, status: Callable[[str], None]):
        self.o, self.dep, self.url, self.status = o, dep, gateway_url, status
        self.settings = dep.settings
        self.t0 = 0.0
        self.windows: dict[str, dict[str, Any]] = {}
        self.samples: list[dict[str, Any]] = []
        self.writes_of: dict[str, set[str]] = defaultdict(set)  # turn point id -> distinct write ids
        self.last_write = 0.0
        self.done = asyncio.Event()
        self.a: TenantA
        self.b: TenantB

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def saw(self, write: MemoryWrite) -> None:
        self.last_write = time.monotonic()
        for source in write.source_turns:
            self.writes_of[turn_point_id(write.tenant_id, write.conversation_id, source.turn_id)].add(write.write_id)
        self.b.saw(write)

    async def sample(self) -> dict[str, Any]:
        counts = await asyncio.to_thread(worker_counts, self.dep.workers[0].metrics_port)
        lag = await topics_lag(self.settings, self.dep.reading([Topic.TURNS, Topic.BULK_TURNS]))
        return {
            "t_s": round(self.elapsed(), 1),
            **counts,
            "lag_turns": lag.get(self.settings.topic(Topic.TURNS), 0),
            "lag_bulk": lag.get(self.settings.topic(Topic.BULK_TURNS), 0),
        }

    async def sampler(self) -> None:
        while not self.done.is_set():
            self.samples.append(await self.sample())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.done.wait(), self.o.sample_s)

    async def phase(self, phase: str) -> None:
        """B (and A) for ``phase_s``; the phase's counts are taken when it ends, before its last
        probes are answered."""
        start = await self.sample()
        end = time.monotonic() + self.o.phase_s
        self.status(f"{phase}: B live" + ("" if phase == "baseline" else f", A importing ({phase}) and flooding"))
        stop: dict[str, Any] = {}

        async def at_end() -> None:
            await asyncio.sleep(max(0.0, end - time.monotonic()))
            stop.update(await self.sample())

        tasks = [self.b.run_phase(phase, end), at_end()]
        if phase != "baseline":
            imports = self.a.import_bulk if phase == "bulk" else self.a.import_live
            tasks += [imports(phase), self.a.flood(phase, end)]
        await asyncio.gather(*tasks)
        self.windows[phase] = {
            "start_s": start["t_s"],
            "end_s": stop["t_s"],
            "imported": stop["imported"] - start["imported"],
            "fallbacks": stop["fallbacks"] - start["fallbacks"],
        }

    async def settle(self, phase: str) -> None:
        """Drain (the bulk phase: until its whole import is in and through) and let idle buffers flush;
        after the last phase, flush every conversation and wait until the tail has seen the last write."""
        self.status(f"{phase}: draining")
        reading = self.dep.reading(DRAIN_TOPICS)
        drained = await wait_drained(self.settings, reading, timeout_s=self.o.settle_timeout_s)
        window = self.windows[phase]
        window["drained_s"] = round(drained - self.t0 - window["start_s"], 1)
        window["imported_total"] = (await self.sample())["imported"]
        if phase != PHASES[-1]:
            # the phase's quiet conversations flush once idle: before the next phase starts, not in it
            await asyncio.sleep(self.o.stm_idle_s + 2.0)
            await wait_drained(self.settings, reading, timeout_s=self.o.settle_timeout_s)
            return
        self.status("flushing every conversation")
        conversations = {(TENANT_A, c) for c in self.a.conversations} | {(TENANT_B, c) for c in self.b.conversations}
        await wait_written(self.settings, reading, conversations, timeout_s=self.o.settle_timeout_s)
        while time.monotonic() - self.last_write < 3.0:  # the tail reads the last writes
            await asyncio.sleep(0.5)

    async def run(self) -> None:
        self.t0 = time.monotonic()
        stop = asyncio.Event()
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with (
            AsyncMemoryClient(self.settings) as client,
            httpx.AsyncClient(base_url=self.url, headers=headers, timeout=120) as http,
        ):
            self.a = TenantA(self.o, client, http)
            self.b = b = TenantBApart(self.o, self.settings, self.t0, self.elapsed)
            tail = asyncio.create_task(tail_writes(self.settings, self.saw, stop))
            sampler = asyncio.create_task(self.sampler())
            try:
                await b.start()
                for phase in PHASES:
                    await self.phase(phase)
                    await self.settle(phase)
            finally:
                b.close()
                self.done.set()
                stop.set()
                await asyncio.gather(tail, sampler, return_exceptions=True)


def worker_env(o: FairnessOptions) -> dict[str, str]:
    return {
        "MEMSTREAM_EXTRACT_MODE": "auto" if o.llm else "extractive",
        "MEMSTREAM_STM_IDLE_S": str(o.stm_idle_s),
        "MEMSTREAM_STM_TICK_S": "1",
        "MEMSTREAM_LLM_TENANT_BUDGETS": json.dumps({TENANT_A: {"calls": o.a_llm_calls}}),
    }


def stored_turns(dep: Deployment, tenants: Iterable[str]) -> set[str]:
    """The raw-turn points of ``tenants`` whose flush reached the store (a fresh one alone: not)."""
    with dep.store() as store:
        return {
            hit.id
            for tenant in tenants
            for hit in store.scroll(TURNS, tenant, limit=1_000_000)
            if not is_fresh(dict(hit.payload))
        }


def phase_result(run: FairnessRun, phase: str) -> dict[str, Any]:
    o, a, b, window = run.o, run.a, run.b, run.windows[phase]
    seconds = window["end_s"] - window["start_s"]
    figures = {
        "fresh": latency_figures(b.fresh, phase, o.probe_timeout_s),
        "card": latency_figures(b.cards(), phase, None),
        "reply": latency_figures(b.replies, phase, o.probe_timeout_s),
    }
    done = next(
        (s["t_s"] for s in run.samples if s["t_s"] >= window["start_s"] and s["imported"] >= o.import_turns), None
    )
    # the import's rate while it ran: over the phase, or until it was all in when that came sooner
    import_s = min(seconds, done - window["start_s"]) if done is not None else seconds
    return {
        "seconds": round(seconds, 1),
        "b_turns": sum(1 for p, _, _ in b.sent.values() if p == phase),
        **{f"b_{name}": figures[name] for name in FIGURES},
        "a_import_turns": 0 if phase == "baseline" else o.import_turns,
        "a_import_sent_s": a.import_sent_s.get(phase),
        "a_import_let_in_during_phase": int(window["imported"]),
        "a_import_rate_per_s": round(window["imported"] / import_s, 1) if phase == "bulk" and import_s > 0 else None,
        "a_import_all_let_in_s": round(done - window["start_s"], 1) if phase == "bulk" and done else None,
        "a_flood_turns": a.flood_turns[phase],
        "a_flood_turns_per_s": round(a.flood_turns[phase] / seconds, 2),
        "a_flood_requests": a.flood_requests[phase],
        "rate_limited_429": a.rate_limited[phase],
        "llm_budget_fallbacks": int(window["fallbacks"]),
        "drained_after_s": window["drained_s"],
    }


def fairness_result(run: FairnessRun, o: FairnessOptions, stored: set[str], commit: str | None) -> dict[str, Any]:
    phases = {phase: phase_result(run, phase) for phase in PHASES}
    ratios: dict[str, float | None] = {}
    for name in FIGURES:
        base = phases["baseline"][f"b_{name}"]["p99_s"]
        for phase in ("bulk", "live"):
            ratios[f"{name}_p99_ratio_{phase}"] = ratio(phases[phase][f"b_{name}"]["p99_s"], base)
    bulk_ratios = [ratios[f"{name}_p99_ratio_bulk"] for name in FIGURES]
    counts = delivery([*run.a.accepted, *run.b.sent], run.a.refused, stored, run.writes_of)
    return {
        "bench": "fairness",
        "commit": commit,
        "machine": {"cpus": os.cpu_count()},
        "extraction": "llm (local server)" if o.llm else "extractive (no LLM)",
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(o).items()},
        **ratios,
        "target_within_2x_bulk": all(r is not None and r <= 2.0 for r in bulk_ratios),
        **counts,
        "rate_limited_429": sum(run.a.rate_limited.values()),
        "llm_budget_fallbacks": sum(p["llm_budget_fallbacks"] for p in phases.values()),
        "a_import_rate_per_s": phases["bulk"]["a_import_rate_per_s"],
        "b_reply_errors": run.b.reply_errors,
        "phases": phases,
        "windows_s": {p: [run.windows[p]["start_s"], run.windows[p]["end_s"]] for p in PHASES},
        "series": {
            "fresh_s": [[t.phase, round(t.at_s, 1), t.seconds and round(t.seconds, 3)] for t in run.b.fresh],
            "card_s": [[t.phase, round(t.at_s, 1), t.seconds and round(t.seconds, 3)] for t in run.b.cards()],
            "reply_s": [[t.phase, round(t.at_s, 1), t.seconds and round(t.seconds, 3)] for t in run.b.replies],
        },
        "samples": run.samples,
    }


def run_fairness(o: FairnessOptions, *, status: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    if o.import_turns < 1 or o.phase_s <= 0 or o.b_rate <= 0:
        raise ValueError("import_turns, phase_s and b_rate must be positive")
    commit = source_commit()  # the code the worker runs: taken at the start (commits may land meanwhile)
    base = Settings()
    env = worker_env(o)
    folder = absolute_path(o.workdir) / "deployment"
    shutil.rmtree(folder, ignore_errors=True)  # an earlier run's memories would answer for these turns
    with contextlib.ExitStack() as running:
        status("starting Kafka")
        running.enter_context(runtime.KAFKA.session(base))
        if o.llm:
            status("starting the local LLM server")
            running.enter_context(runtime.LOCAL_LLM.session(base))
            env |= runtime.local_llm_env(base)
        dep = Deployment(base, folder, env)
        running.callback(dep.stop_workers)
        status("starting a worker (all stages) and a gateway")
        dep.start_worker("fairness")
        limits = {TENANT_A: {"turns_per_s": o.a_turns_per_s, "burst_s": o.a_burst_s}}
        gateway = dep.start_gateway({TENANT_A: KEY_A}, env={"MEMSTREAM_GATEWAY_RATE_LIMITS": json.dumps(limits)})
        run = FairnessRun(o, dep, gateway.url, status)
        asyncio.run(run.run())
        status("reading the store")
        dep.stop_workers()
        stored = stored_turns(dep, (TENANT_A, TENANT_B))
    return fairness_result(run, o, stored, commit)


def plot_fairness(result: dict[str, Any], out: Path) -> Path:
    """B's latencies over the run, each phase shaded, A's import let in; and B's p99s per phase."""
    from memstream.bench.plots import pyplot, save_figure

    plt = pyplot()
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(9, 9), gridspec_kw={"height_ratios": [3, 1.4, 2]})
    labels = {"fresh_s": "fresh turn", "card_s": "turn to card", "reply_s": "reply"}
    for key, label in labels.items():
        points = [(at, s) for _, at, s in result["series"][key] if s is not None]
        top.plot([p[0] for p in points], [p[1] for p in points], ".", markersize=3, label=label)
    top.set_yscale("log")
    top.set_ylabel("B's latency (s, log)")
    top.legend(fontsize=8, loc="upper right")
    samples = result["samples"]
    middle.plot([s["t_s"] for s in samples], [s["imported"] for s in samples], label="A's imported turns let in")
    middle.plot([s["t_s"] for s in samples], [s["lag_turns"] for s in samples], label="lag on turns")
    middle.set_ylabel("turns", fontsize=8)
    middle.legend(fontsize=8)
    colors = {"baseline": "green", "bulk": "blue", "live": "red"}
    for ax in (top, middle):
        for phase, (start, end) in result["windows_s"].items():
            ax.axvspan(start, end, color=colors[phase], alpha=0.08)
            ax.text(start, 1.0, f" {phase}", transform=ax.get_xaxis_transform(), va="top", fontsize=8)
    middle.set_xlabel("seconds")
    last = max([s["t_s"] for s in samples] + [end for _, end in result["windows_s"].values()])
    for ax in (top, middle):
        ax.set_xlim(0, last)  # the same time axis (the samples go on through the last drain)
    width = 0.25
    for i, phase in enumerate(PHASES):
        values = [result["phases"][phase][f"b_{name}"]["p99_s"] or float("nan") for name in FIGURES]
        bottom.bar([j + (i - 1) * width for j in range(len(FIGURES))], values, width, label=phase, color=colors[phase])
    bottom.set_xticks(range(len(FIGURES)), ["fresh turn p99", "turn to card p99", "reply p99"])
    bottom.set_yscale("log")  # replies take tenths of a second, cards seconds
    bottom.set_ylabel("B's p99 (s, log)")
    bottom.legend(fontsize=8)
    n = result["options"]["import_turns"]
    fig.suptitle(
        f"fairness: B's latencies while A imports {n} turns (bulk lane, then as live turns)\n"
        f"B's p99 / baseline under the bulk import: fresh {result['fresh_p99_ratio_bulk']}, "
        f"card {result['card_p99_ratio_bulk']}, reply {result['reply_p99_ratio_bulk']}",
        fontsize=9,
    )
    return save_figure(plt, fig, out)
