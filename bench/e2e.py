"""End-to-end benchmark runs: LoCoMo or LongMemEval through the real streaming pipeline.

Phases, each resumable from the output folder:

1. **ingest**: every conversation is produced onto the turns topic of a deployment kept in
   ``<out>/deployment`` (its own topics and store), the worker drains the pipeline, then the tenant
   is consolidated (a command, as at sleep time). Kafka is the checkpoint: a run interrupted while
   the worker drains resumes from the committed offsets.
2. **ask**: every question goes over the request/reply topics, at the configured K (with an answer
   when ``llm``), at each K of the budget sweep and filled to each evidence-token budget; with ``llm``
   the answer is judged. One JSON line per finished question in ``<out>/questions.jsonl``: a resumed
   run asks only the others.
3. **evaluate**: with the worker stopped, the same-run baselines rank the raw turns, whole and cut
   into the extractive cards' sentences (one sentence per turn kept), dense, BM25 and fused (RRF),
   and keep what comes closest to each question's memstream evidence tokens; the full context is
   counted; then ``results.json``, ``report.md`` and the plots are written (``bench.report``), every
   figure per tuning split (``bench.cases.split_of``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from memstream.bench.cases import TENANT, BenchQuestion, BenchSet, answer_score, full_context, ranked_scores, score
from memstream.bench.deploy import llm_costs
from memstream.bench.deployment import Deployment
from memstream.bench.report import (
    BASELINES,
    SENTENCES,
    WHOLE_TURNS,
    budget_key,
    source_commit,
    summarize_run,
    write_outputs,
)
from memstream.bench.scoring import fill_k, one_per_turn, rrf_fuse, take_nearest_budget
from memstream.client import AsyncMemoryClient
from memstream.config import Settings
from memstream.ports import Embedder, StoreFilter, StoreHit, VectorStore
from memstream.processors.query.engine import answer_messages
from memstream.processors.tokens import count_tokens
from memstream.processors.write.index import CARDS, TURNS
from memstream.schemas import Reply
from memstream.schemas.topics import DRAIN_TOPICS, FRONT_TOPICS, INGEST_TOPICS, Topic
from memstream.streams import runtime

STATE = "state.json"
RECORDS = "questions.jsonl"
SENTENCE_STORE = "baseline-sentences"
INDEX_BACKLOG = 64  # memory writes left for the index stage when the next conversation goes in
# Options that only change how the questions are asked: a run may change them until its first
# question is asked (its memories do not depend on them).
ASK_OPTIONS = frozenset({"llm", "judge_model", "planner", "k", "sweep_k", "sweep_tokens"})


@dataclass
class E2EOptions:
    out: Path
    extract: str = "extractive"  # how memories are built: "extractive" or "llm"
    consolidate: bool = True  # consolidate the tenant after ingestion, before asking
    llm: bool = False  # answers (the worker's LLM) and the judge
    judge_base_url: str | None = None  # None: the answer endpoint
    judge_model: str | None = None
    judge_api_key: str | None = None
    planner: str | None = None  # None: rules with the local LLM server, else the configured planner
    k: int | None = None  # evidence items per question (None: configured)
    sweep_k: Sequence[int] = (5, 10, 20, 40)
    # Evidence-token budgets: each question asked again for the items, in rank order, that fit one
    # (the retrieval targets are stated at 300 and 1,000 tokens).
    sweep_tokens: Sequence[int] = (300, 1000)
    torch_threads: int = 1  # per model call: the worker's stages embed in parallel, one core each
    seed: int = 0
    ask_timeout_s: float = 300.0

    def fingerprint(self, bench: BenchSet) -> dict[str, Any]:
        """What a resumed run must share with the interrupted one."""
        ids = hashlib.sha256("\n".join(q.qid for q in bench.questions).encode()).hexdigest()[:16]
        return {
            "bench": bench.name,
            "data": str(Path(bench.data).resolve()),
            "questions": len(bench.questions),
            "question_ids": ids,
            "extract": self.extract,
            "consolidate": self.consolidate,
            "llm": self.llm,
            "judge_model": self.judge_model,
            "planner": self.planner,
            "k": self.k,
            "sweep_k": list(self.sweep_k),
            "sweep_tokens": list(self.sweep_tokens),
            "seed": self.seed,
        }


@dataclass
class RunState:
    """What is done, kept in ``<out>/state.json`` after every step."""

    fingerprint: dict[str, Any]
    produced: list[str] = field(default_factory=list)  # conversations on the turns topic
    produced_turns: int = 0
    ingested: bool = False
    consolidated: bool = False
    ingest_seconds: float = 0.0  # worker time spent ingesting, over all segments
    ingest_segments: int = 0
    ingest_commits: list[str] = field(default_factory=list)  # the code each segment ran, in order, once each
    indexed_turns: int = 0  # turn points written in earlier segments (progress only)
    construction: dict[str, dict[str, int]] = field(default_factory=dict)  # LLM per stage, all segments
    store_counts: dict[str, int] = field(default_factory=dict)
    consolidation_s: float = 0.0
    consolidation_decisions: dict[str, int] = field(default_factory=dict)
    started_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @classmethod
    def open(cls, out: Path, fingerprint: dict[str, Any], *, fresh: bool) -> RunState:
        path = out / STATE
        if fresh or not path.exists():
            if fresh:
                for name in (STATE, RECORDS):
                    (out / name).unlink(missing_ok=True)
                _remove_tree(out / "deployment")
                _remove_tree(out / "baseline")
                _remove_tree(out / SENTENCE_STORE)
            out.mkdir(parents=True, exist_ok=True)
            state = cls(fingerprint)
            state.save(out)
            return state
        state = cls(**json.loads(path.read_text()))
        differs = sorted(
            k for k in fingerprint.keys() | state.fingerprint.keys() if fingerprint.get(k) != state.fingerprint.get(k)
        )
        if differs and set(differs) <= ASK_OPTIONS and not read_records(out):
            state.fingerprint = fingerprint  # nothing asked yet: the new way of asking applies to all
            state.save(out)
        elif differs:
            raise ValueError(
                f"{out} holds a run with other options ({', '.join(differs)}): "
                "pass --fresh to start it over, or another --out"
            )
        return state

    def save(self, out: Path) -> None:
        tmp = out / (STATE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, out / STATE)


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def read_records(out: Path) -> dict[str, dict[str, Any]]:
    """Finished questions by id (a line cut short by a crash is ignored: that question is asked again)."""
    path = out / RECORDS
    records: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                records[record["qid"]] = record
    return records


def append_record(out: Path, record: dict[str, Any]) -> None:
    path = out / RECORDS
    # After a crash mid-write the file ends in a cut line: start on a line of our own.
    cut = False
    if path.exists() and path.stat().st_size:
        with path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            cut = fh.read(1) != b"\n"
    with path.open("a") as fh:
        fh.write(("\n" if cut else "") + json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


@dataclass
class Ui:
    """What the command shows while it runs."""

    status: Callable[[str], None] = lambda text: None
    ingest: Callable[[int, int], None] = lambda done, total: None  # turns indexed of total
    asked: Callable[[int, int], None] = lambda done, total: None  # questions finished of total


@dataclass
class Endpoints:
    """The LLM endpoints of a run: the worker's (answers, and extraction when asked) and the judge's."""

    worker_env: dict[str, str]
    answer_model: str | None
    judge: Any = None  # an LLM port
    judge_model: str | None = None


def _llm_endpoints(running: contextlib.ExitStack, base: Settings, options: E2EOptions, ui: Ui) -> Endpoints:
    needs_llm = options.llm or options.extract == "llm"
    if not needs_llm:
        return Endpoints({"MEMSTREAM_LLM_BASE_URL": ""}, None)
    if base.llm_base_url:
        env: dict[str, str] = {}
        url, model, key = base.llm_base_url, base.llm_model, base.llm_api_key
    else:
        ui.status("starting the local LLM server")
        running.enter_context(runtime.LOCAL_LLM.session(base))
        env = runtime.local_llm_env(base)
        url, model, key = env["MEMSTREAM_LLM_BASE_URL"], env["MEMSTREAM_LLM_MODEL"], "local"
    judge = judge_model = None
    if options.llm:
        from memstream.adapters.openai_llm import OpenAICompatibleLLM
        from memstream.instrumented import MeteredLLM
        from memstream.metrics import Metrics

        judge_model = options.judge_model or model
        judge = MeteredLLM(
            OpenAICompatibleLLM(
                options.judge_base_url or url, judge_model, options.judge_api_key or key, timeout_s=base.llm_timeout_s
            ),
            Metrics(),
            "judge",
            retries=base.llm_retries,
        )  # transient failures retried
    return Endpoints(env, model, judge, judge_model)


def _worker_env(options: E2EOptions, endpoints: Endpoints, *, phase: str) -> dict[str, str]:
    env = {
        "MEMSTREAM_EXTRACT_MODE": options.extract,
        "MEMSTREAM_COMPRESSOR_MODEL": "",
        # Consolidation runs when the bench asks for it, not when a conversation happens to idle.
        "MEMSTREAM_SLEEP_IDLE_S": "1000000000",
        "MEMSTREAM_CONSOLIDATE_EVERY_S": "0",
        "MEMSTREAM_TORCH_THREADS": str(options.torch_threads),
    }
    uses_llm = options.extract == "llm" if phase == "ingest" else options.llm
    env |= endpoints.worker_env if uses_llm else {"MEMSTREAM_LLM_BASE_URL": ""}
    if phase == "ask" and options.planner:
        env["MEMSTREAM_QUERY_PLANNER"] = options.planner
    return env


def _add_costs(into: dict[str, dict[str, int]], more: dict[str, dict[str, int]]) -> None:
    for stage, cost in more.items():
        mine = into.setdefault(stage, {})
        for k, v in cost.items():
            mine[k] = mine.get(k, 0) + v


class Runner:
    def __init__(self, bench: BenchSet, options: E2EOptions, *, fresh: bool = False, ui: Ui | None = None):
        self.bench, self.options, self.ui = bench, options, ui or Ui()
        self.out = options.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.state = RunState.open(self.out, options.fingerprint(bench), fresh=fresh)
        self.base = Settings()

    def _save(self) -> None:
        self.state.save(self.out)

    def _deployment(self, env: dict[str, str]) -> Deployment:
        folder = self.out / "deployment"
        if (folder / Deployment.MANIFEST).exists():
            return Deployment.reopen(self.base, folder, env)
        return Deployment(self.base, folder, env)

    def run(self) -> dict[str, Any]:
        with contextlib.ExitStack() as running:
            self.ui.status("starting Kafka")
            running.enter_context(runtime.KAFKA.session(self.base))
            endpoints = _llm_endpoints(running, self.base, self.options, self.ui)
            if not self.state.ingested or (self.options.consolidate and not self.state.consolidated):
                self._ingest(running, endpoints)
            records = read_records(self.out)
            missing = [q for q in self.bench.questions if q.qid not in records]
            if missing:
                self._ask(running, endpoints, missing, len(records))
                records = read_records(self.out)
            deployment = self._deployment(_worker_env(self.options, endpoints, phase="ask"))
            evaluation = self._evaluate(deployment, records)
        result = self._result(records, evaluation, endpoints)
        return write_outputs(self.out, self.bench, result)

    # --- ingest ---------------------------------------------------------------------------------
    def _ingest(self, running: contextlib.ExitStack, endpoints: Endpoints) -> None:
        deployment = self._deployment(_worker_env(self.options, endpoints, phase="ingest"))
        running.callback(deployment.stop_workers)
        self._check_broker(deployment)
        self.ui.status("starting a worker (all stages)")
        deployment.start_worker("ingest")
        port = deployment.env["MEMSTREAM_METRICS_PORT"]
        total = self.bench.turns
        scraped: dict[str, Any] = {"llm": {}, "other": {}}
        last_scrape = [0.0]

        def scrape() -> None:
            with contextlib.suppress(OSError, ValueError):
                scraped["llm"], scraped["other"] = llm_costs(port)
            written = int(scraped["other"].get("memstream_points_written_total|turns", 0))
            self.ui.ingest(min(total, self.state.indexed_turns + written), total)

        def on_lag(_lag: dict[str, int]) -> None:
            if time.monotonic() - last_scrape[0] >= 2.0:
                last_scrape[0] = time.monotonic()
                scrape()

        t0 = time.monotonic()
        ingesting = not self.state.ingested
        try:
            if ingesting:
                for conversation_id, turns in self.bench.conversations.items():
                    if conversation_id in self.state.produced:
                        continue
                    self._wait_for_room(deployment, on_lag)
                    self.ui.status(
                        f"producing {conversation_id} ({len(self.state.produced) + 1} of "
                        f"{len(self.bench.conversations)})"
                    )
                    deployment.produce(turns)
                    self.state.produced.append(conversation_id)
                    self.state.produced_turns += len(turns)
                    self._save()
                self.ui.status(f"ingesting {total} turns of {len(self.bench.conversations)} conversations")
                finished = deployment.drain(timeout_s=7 * 24 * 3600, topics=INGEST_TOPICS, progress=on_lag)
                scrape()
                self._end_ingest_segment(finished - t0, scraped["other"], done=True)
                ingesting = False
            if self.options.consolidate and not self.state.consolidated:
                self.ui.status(f"consolidating tenant {TENANT!r}")
                t0 = time.monotonic()
                deployment.consolidate(tenant=TENANT, scope="pending")
                self.state.consolidation_s = round(deployment.drain(timeout_s=24 * 3600, topics=DRAIN_TOPICS) - t0, 1)
                scrape()
                self.state.consolidation_decisions = {
                    k.split("|", 1)[1]: int(v)
                    for k, v in scraped["other"].items()
                    if k.startswith("memstream_consolidation_decisions_total|")
                }
                self.state.consolidated = True
        finally:
            scrape()
            if ingesting:  # interrupted: the time and progress so far count, the rest resumes from Kafka
                self._end_ingest_segment(time.monotonic() - t0, scraped["other"], done=False)
            # The worker's counters cover its whole life: this segment's ingestion and consolidation.
            _add_costs(self.state.construction, scraped["llm"])
            self._save()
        deployment.stop_workers()
        with deployment.store() as store:
            self.state.store_counts = {
                c: store.count(c, TENANT) for c in ("cards", "scenes", "triggers", "turns", "profiles")
            }
        self._save()

    @staticmethod
    def _wait_for_room(deployment: Deployment, on_lag: Callable[[dict[str, int]], None]) -> None:
        """Produce the next conversation once the stages before the index have taken the last one in
        and the index has at most ``INDEX_BACKLOG`` memory writes to go. All at once, the segmenter
        (which embeds on the event loop) would take in the whole backlog first while the later
        stages idle; far ahead, its turn vectors would leave the embedding cache before the index
        stage reuses them. This way the index stage (the slowest) always has work, and the
        segmenter works on the next conversation meanwhile."""
        while True:
            lag = deployment.lag(INGEST_TOPICS)
            on_lag(lag)
            if sum(lag[t] for t in FRONT_TOPICS) == 0 and lag[Topic.CARDS] <= INDEX_BACKLOG:
                return
            time.sleep(0.5)

    def _end_ingest_segment(self, seconds: float, counters: dict[str, float], *, done: bool) -> None:
        written = int(counters.get("memstream_points_written_total|turns", 0))
        self.state.ingest_seconds = round(self.state.ingest_seconds + seconds, 1)
        self.state.ingest_segments += 1
        commit = source_commit()
        if commit and commit not in self.state.ingest_commits:
            self.state.ingest_commits.append(commit)
        self.state.indexed_turns = min(self.bench.turns, self.state.indexed_turns + written)
        self.state.ingested = done
        self._save()

    def _check_broker(self, deployment: Deployment) -> None:
        """A resumed run needs the turns it produced: a broker that lost them would leave holes."""
        if self.state.produced_turns and deployment.message_count("turns") < self.state.produced_turns:
            raise RuntimeError(
                f"the broker no longer holds the turns this run produced into {deployment.settings.topic('turns')}; "
                "pass --fresh to start over"
            )

    # --- ask --------------------------------------------------------------------------------------
    def _ask(
        self, running: contextlib.ExitStack, endpoints: Endpoints, questions: Sequence[BenchQuestion], done: int
    ) -> None:
        deployment = self._deployment(_worker_env(self.options, endpoints, phase="ask"))
        running.callback(deployment.stop_workers)
        self.ui.status("starting a worker (all stages) for the questions")
        deployment.start_worker("ask")
        total = len(self.bench.questions)
        self.ui.status(
            f"asking {len(questions)} questions over Kafka"
            + (f" (answers by {endpoints.answer_model}, judged by {endpoints.judge_model})" if self.options.llm else "")
        )
        self.ui.asked(done, total)
        asyncio.run(self._ask_all(deployment.settings, endpoints, questions, done, total))
        deployment.stop_workers()

    async def _ask_all(
        self, settings: Settings, endpoints: Endpoints, questions: Sequence[BenchQuestion], done: int, total: int
    ) -> None:
        from memstream.bench.judge import Judge

        judge = Judge(endpoints.judge) if endpoints.judge is not None else None
        timeout = self.options.ask_timeout_s
        commit = source_commit()
        async with AsyncMemoryClient(settings) as client:
            for q in questions:
                t0 = time.perf_counter()
                reply = await client.ask(
                    q.text,
                    tenant_id=TENANT,
                    conversation_id=q.conversation_id,
                    k=self.options.k,
                    answer=self.options.llm,
                    question_time=q.asked_at,
                    timeout_s=timeout,
                    raise_on_error=False,  # an error reply is a scored outcome
                )
                record = question_record(q, reply, (time.perf_counter() - t0) * 1000.0)
                record["commit"] = commit
                for k in self.options.sweep_k:
                    swept = await client.ask(
                        q.text,
                        tenant_id=TENANT,
                        conversation_id=q.conversation_id,
                        k=k,
                        answer=False,
                        question_time=q.asked_at,
                        timeout_s=timeout,
                    )
                    record["sweep"][str(k)] = reply_context(q, swept)
                for budget in self.options.sweep_tokens:
                    filled = await client.ask(
                        q.text,
                        tenant_id=TENANT,
                        conversation_id=q.conversation_id,
                        k=fill_k(budget),
                        max_tokens=budget,
                        answer=False,
                        question_time=q.asked_at,
                        timeout_s=timeout,
                    )
                    record["budgets"][str(budget)] = reply_context(q, filled)
                if judge is not None:
                    record["judge"] = await asyncio.to_thread(
                        judge_answer, judge, self.bench.name, q, record["answer"] or ""
                    )
                    wrong = control_answer(self.bench.questions, q)
                    if wrong is not None:
                        record["judge_control"] = await asyncio.to_thread(
                            judge_answer, judge, self.bench.name, q, wrong
                        )
                append_record(self.out, record)
                done += 1
                self.ui.asked(done, total)

    # --- evaluate -------------------------------------------------------------------------------
    def _evaluate(self, deployment: Deployment, records: dict[str, dict[str, Any]]) -> dict[str, Any]:
        from memstream.adapters.st_embedder import SentenceTransformerEmbedder

        settings = deployment.settings
        runtime.apply_torch_threads(settings)
        embedder = SentenceTransformerEmbedder.from_settings(settings)
        full_texts = {cid: full_context(turns) for cid, turns in self.bench.conversations.items()}
        full_tokens = {cid: count_tokens(text) for cid, text in full_texts.items()}
        top = max(
            [*self.options.sweep_k, *map(fill_k, self.options.sweep_tokens), settings.evidence_k, self.options.k or 0]
        )
        limits = Limits.for_k(top)
        ranked = self.bench.name == "longmemeval"
        with contextlib.ExitStack() as opened:
            store = opened.enter_context(deployment.store())
            if self.bench.baseline_index == "own":
                self.ui.status("indexing the raw turns for the baselines")
                whole = opened.enter_context(contextlib.closing(self._own_baseline(embedder)))
            else:
                whole = store
            sentences = opened.enter_context(contextlib.closing(self._sentence_baseline(embedder)))
            self.ui.status("ranking raw turns and their sentences for the baselines")
            rows: dict[str, dict[str, Any]] = {}
            for q in self.bench.questions:
                record = records[q.qid]
                budgets = {
                    "main": record["context_tokens"],
                    **{k: s["context_tokens"] for k, s in record["sweep"].items()},
                    **{budget_key(b): s["context_tokens"] for b, s in record.get("budgets", {}).items()},
                }
                rankings = baseline_rankings(q, whole, sentences, embedder.embed([q.text])[0], limits)
                rows[q.qid] = {
                    "full_context_tokens": full_tokens[q.conversation_id],
                    "full_context_scores": answer_score(q, [full_texts[q.conversation_id]]),
                    **baseline_rows(q, rankings, budgets, ranked=ranked),
                }
            cards = store.count(CARDS, TENANT)
        return {
            "baselines": rows,
            "cards": cards,
            "embedding_model": embedder_name(settings),
            "baseline_limits": asdict(limits),
        }

    def _own_baseline(self, embedder: Embedder) -> VectorStore:
        """The raw turns as a plain RAG system indexes them (``speaker: text`` and the image captions),
        kept in ``<out>/baseline``."""
        from memstream.bench.retrieval import baseline_store

        return baseline_store(
            self.out / "baseline", [t for ts in self.bench.conversations.values() for t in ts], embedder
        )

    def _sentence_baseline(self, embedder: Embedder) -> VectorStore:
        """The raw turns' sentences (and image captions), kept in ``<out>/baseline-sentences``: built
        once, a conversation at a time, so an interrupted run resumes it."""
        from memstream.bench.retrieval import sentence_baseline_store

        conversations = len(self.bench.conversations)

        def progress(done: int, total: int) -> None:
            if done < total:
                self.ui.status(f"indexing the sentences of the raw turns: conversation {done + 1} of {conversations}")

        return sentence_baseline_store(
            self.out / SENTENCE_STORE,
            [t for ts in self.bench.conversations.values() for t in ts],
            embedder,
            progress=progress,
        )

    def _result(
        self, records: dict[str, dict[str, Any]], evaluation: dict[str, Any], endpoints: Endpoints
    ) -> dict[str, Any]:
        return summarize_run(
            self.bench,
            self.options,
            self.state,
            records,
            evaluation,
            answer_model=endpoints.answer_model,
            judge_model=endpoints.judge_model,
        )


def embedder_name(settings: Settings) -> str:
    return settings.embedding_model or "all-MiniLM-L6-v2 (packaged)"


def provenance(reply: Reply) -> list[str]:
    """The turn ids behind the returned evidence, in rank order, each once."""
    seen: dict[str, None] = {}
    for e in reply.evidence:
        for t in e.turn_ids:
            seen.setdefault(t, None)
    return list(seen)


def reader_context(question: str, reply: Reply) -> str:
    """Everything the answer call would receive for this reply (``processors.query.answer_messages``:
    the system prompt, the evidence lines, the speaker profile, the question); no LLM is called."""
    operation = reply.plan.operation if reply.plan is not None else "lookup"
    messages = answer_messages(question, operation, reply.evidence, reply.profile_text)
    return "\n".join(m["content"] for m in messages)


def context_texts(reply: Reply) -> list[str]:
    """The texts a reader gets from a reply, in rank order: the evidence, then the speaker profile."""
    return [e.text for e in reply.evidence] + ([reply.profile_text] if reply.profile_text else [])


def reply_context(q: BenchQuestion, reply: Reply) -> dict[str, Any]:
    """What a reply returned, as the report scores it: provenance, tokens (evidence only, and all the
    answer call would read), texts (answer-bearing recall) and turn ids per evidence item."""
    turn_ids = provenance(reply)
    return {
        "evidence_items": len(reply.evidence),
        "context_tokens": reply.context_tokens,
        "reader_tokens": count_tokens(reader_context(q.text, reply)),
        "turns_per_evidence": [len(set(e.turn_ids)) for e in reply.evidence],
        "turn_ids": turn_ids,
        "scores": score(q, turn_ids),
        "context_texts": context_texts(reply),
    }


def question_record(q: BenchQuestion, reply: Reply, latency_ms: float) -> dict[str, Any]:
    return {
        "qid": q.qid,
        "group": q.group,
        "abstention": q.abstention,
        "ok": reply.ok,
        "error": reply.error,
        "latency_ms": round(latency_ms, 1),
        "worker_latency_ms": reply.latency_ms,
        "profile": reply.access_profile,
        **reply_context(q, reply),
        "answer": reply.answer,
        "answer_mode": reply.answer_mode,
        "costs": [c.model_dump(mode="json") for c in reply.costs],
        "sweep": {},
        "budgets": {},
    }


def judge_answer(judge: Any, bench: str, q: BenchQuestion, answer: str) -> dict[str, Any]:
    from memstream.bench.judge import bleu1, token_f1

    unreadable = judge.unreadable
    if bench == "locomo":
        correct, cost = judge.locomo(q.text, q.gold_answer, answer)
        extra = {"f1": round(token_f1(answer, q.gold_answer), 4), "bleu1": round(bleu1(answer, q.gold_answer), 4)}
    else:
        correct, cost = judge.longmemeval(q.group, q.qid, q.text, q.gold_answer, answer)
        extra = {}
    return {
        "correct": correct,
        "readable": judge.unreadable == unreadable,
        "cost": cost.model_dump(mode="json"),
        **extra,
    }


CONTROLS = 20  # questions whose judge is also shown a wrong answer


def control_answer(questions: Sequence[BenchQuestion], q: BenchQuestion) -> str | None:
    """For about ``CONTROLS`` questions spread over the run, a wrong answer: the gold answer of a
    question half the list away (another one if that happens to be the same text). A judge that
    accepts it is not to be trusted; the report gives the rate."""
    i = questions.index(q)
    if i % max(1, len(questions) // CONTROLS):
        return None
    for step in range(len(questions) // 2 + 1, len(questions) // 2 + 1 + len(questions)):
        other = questions[(i + step) % len(questions)]
        if other is not q and other.gold_answer.strip().lower() != q.gold_answer.strip().lower():
            return other.gold_answer
    return None


@dataclass(frozen=True)
class Limits:
    """How many hits each baseline search asks for: enough ranked units to fill the largest budget
    after one chunk per turn is kept (sentences are short, and several may come from one turn)."""

    whole: int
    sentences: int

    @classmethod
    def for_k(cls, top: int) -> Limits:
        """Enough hits for the largest K (or filled budget's K) a run asks."""
        return cls(whole=max(50, 4 * top), sentences=max(200, 10 * top))


@dataclass(frozen=True)
class Unit:
    """One ranked unit of a baseline: a whole raw turn, or one sentence (or image caption) of one."""

    key: str  # the store point: what fusion ranks
    turn_id: str
    text: str  # what the reader would get, and what its tokens count


def hit_unit(hit: StoreHit) -> Unit:
    """A search hit as a unit; points of the pipeline's own turn store carry no ``chunk_text``."""
    p = hit.payload
    return Unit(hit.id, p["turn_id"], p.get("chunk_text") or f"{p['speaker']}: {p['text']}")


def fuse(dense: Sequence[Unit], sparse: Sequence[Unit]) -> list[Unit]:
    """Hybrid ranking: reciprocal rank fusion (k = 60) of the dense and BM25 rankings of the same units."""
    units = {u.key: u for u in (*dense, *sparse)}
    return [units[key] for key in rrf_fuse([[u.key for u in dense], [u.key for u in sparse]])]


def rankings_of(dense: Sequence[Unit], sparse: Sequence[Unit], suffix: str) -> dict[str, list[Unit]]:
    """Dense, BM25 and their fusion, each with one unit per turn (its best-ranked chunk)."""

    def turn_of(u: Unit) -> str:
        return u.turn_id

    return {
        f"dense_{suffix}": one_per_turn(dense, turn_of),
        f"bm25_{suffix}": one_per_turn(sparse, turn_of),
        f"rrf_{suffix}": one_per_turn(fuse(dense, sparse), turn_of),
    }


def baseline_rankings(
    q: BenchQuestion, whole: VectorStore, sentences: VectorStore, vector: Any, limits: Limits
) -> dict[str, list[Unit]]:
    """Every baseline's ranking of the question's conversation: whole raw turns (``*_topk``) and
    the sentences of raw turns (``*_sentences``), dense (same embedder as memstream), BM25 and RRF."""
    scope = StoreFilter(equals={"conversation_id": q.conversation_id})
    out: dict[str, list[Unit]] = {}
    for store, limit, suffix in ((whole, limits.whole, "topk"), (sentences, limits.sentences, "sentences")):
        dense = [hit_unit(h) for h in store.search(TURNS, TENANT, vector, where=scope, limit=limit)]
        sparse = [hit_unit(h) for h in store.search_text(TURNS, TENANT, q.text, where=scope, limit=limit)]
        out |= rankings_of(dense, sparse, suffix)
    return out


def take_units(ranking: Sequence[Unit], budget: int) -> tuple[list[Unit], int]:
    """A baseline's first units whose tokens come closest to ``budget`` (at least one), and their tokens."""
    texts = [u.text for u in ranking]
    keep = take_nearest_budget(texts, budget, count_tokens) if texts else 0
    return list(ranking[:keep]), sum(count_tokens(t) for t in texts[:keep])


def baseline_rows(
    q: BenchQuestion, rankings: dict[str, list[Unit]], budgets: dict[str, int], *, ranked: bool
) -> dict[str, dict[str, Any]]:
    """Every baseline at each budget (memstream's tokens for the question at the main K and each
    swept K): turn recall and answer-bearing recall of the units taken; with ``ranked`` (LongMemEval)
    also LongMemEval's own metrics of the first K ranked units at each swept K."""
    out: dict[str, dict[str, Any]] = {}
    for name, ranking in rankings.items():
        for key, budget in budgets.items():
            chosen, tokens = take_units(ranking, max(int(budget), 1))
            entry: dict[str, Any] = {
                "context_tokens": tokens,
                "scores": {**score(q, [u.turn_id for u in chosen]), **answer_score(q, [u.text for u in chosen])},
            }
            if ranked and key.isdigit():  # a swept K
                entry["ranked_scores"] = ranked_scores(q, [u.turn_id for u in ranking], int(key), cited=False)
            out.setdefault(name, {})[key] = entry
    return out


__all__ = [
    "E2EOptions",
    "RunState",
    "Runner",
    "Ui",
    "read_records",
    "append_record",
    "question_record",
    "provenance",
    "baseline_rows",
    "baseline_rankings",
    "take_units",
    "fuse",
    "Unit",
    "reply_context",
    "reader_context",
    "judge_answer",
    "BASELINES",
    "WHOLE_TURNS",
    "SENTENCES",
]
