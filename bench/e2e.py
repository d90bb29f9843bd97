"""End-to-end benchmark runs: LoCoMo or LongMemEval through the real streaming pipeline.

Phases, each resumable from the output folder (``bench.e2e_state``):

1. **ingest** (``bench.e2e_ingest``): every conversation is produced onto the turns topic of a
   deployment kept in ``<out>/deployment`` (its own topics and store), the worker drains the
   pipeline, then the tenant is consolidated (a command, as at sleep time). Kafka is the checkpoint:
   a run interrupted while the worker drains resumes from the committed offsets.
2. **ask** (``bench.e2e_ask``): every question goes over the request/reply topics, at the configured
   K (with an answer when ``llm``), at each K of the budget sweep and filled to each evidence-token
   budget; with ``llm`` the answer is judged. One JSON line per finished question in
   ``<out>/questions.jsonl``: a resumed run asks only the others.
3. **evaluate** (``bench.e2e_baselines``): with the worker stopped, the same-run baselines rank the
   raw turns, whole and cut into the extractive cards' sentences (one sentence per turn kept), dense,
   BM25 and fused (RRF), and keep what comes closest to each question's memstream evidence tokens;
   the full context is counted; then ``results.json``, ``report.md`` and the plots are written
   (``bench.report``), every figure per tuning split (``bench.cases.split_of``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

from memstream.bench.cases import BenchSet
from memstream.bench.deployment import Deployment
from memstream.bench.e2e_ask import Asking
from memstream.bench.e2e_baselines import Evaluation
from memstream.bench.e2e_ingest import Ingestion
from memstream.bench.e2e_state import E2EOptions, RunState, read_records
from memstream.bench.report import summarize_run, write_outputs
from memstream.config import Settings
from memstream.streams import runtime


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


class Runner:
    """The phases in order, each skipped when the output folder shows it done, then the outputs."""

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
                deployment = self._deployment(_worker_env(self.options, endpoints, phase="ingest"))
                running.callback(deployment.stop_workers)
                ingestion = Ingestion(
                    self.bench, self.options, self.state, self._save, status=self.ui.status, progress=self.ui.ingest
                )
                ingestion.run(deployment)
            records = read_records(self.out)
            missing = [q for q in self.bench.questions if q.qid not in records]
            if missing:
                deployment = self._deployment(_worker_env(self.options, endpoints, phase="ask"))
                running.callback(deployment.stop_workers)
                models = f"answers by {endpoints.answer_model}, judged by {endpoints.judge_model}"
                asking = Asking(self.bench, self.options, self.out, status=self.ui.status, asked=self.ui.asked)
                asking.run(
                    deployment, missing, len(records), judge=endpoints.judge, models=models if self.options.llm else ""
                )
                records = read_records(self.out)
            deployment = self._deployment(_worker_env(self.options, endpoints, phase="ask"))
            evaluation = Evaluation(self.bench, self.options, self.out, status=self.ui.status).run(deployment, records)
        result = summarize_run(
            self.bench,
            self.options,
            self.state,
            records,
            evaluation,
            answer_model=endpoints.answer_model,
            judge_model=endpoints.judge_model,
        )
        return write_outputs(self.out, self.bench, result)
