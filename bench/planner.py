"""``memstream bench planner``: LLM calls per question for each query planner mode, and what they buy.

Every question of a LoCoMo dev split is asked in process (evidence only, no answer call) over the
store of a finished ``memstream bench locomo`` run, once per planner mode: ``rules`` (no call),
``llm`` (a call for every question, two when its JSON needs a repair) and ``hybrid`` (the rules, and
the LLM for the doubted fields of a question the rules doubt: ``processors.plan.rule_doubts``). Per
mode and split: evidence recall, planner LLM calls per question (read from each reply's costs, so the
reply's own accounting is what is measured) and planner latency (p50 / p99). Per plan field (profile,
operation, time range, entities, participants): how often the LLM plan differs from the rule plan.

Which doubts are worth a call is chosen on the tune split (each doubt alone: does taking the LLM's
fields for its questions gain recall?), and ``hybrid-tuned`` with the chosen ones is reported on the
report split beside ``hybrid`` with every doubt (the setting's default).

The LLM is called once per distinct prompt (:class:`RecordedLLM`): the planner runs at temperature 0,
so a later mode gets the kept answer and is charged the kept latency, and every mode sees the same
LLM plans. Without a run folder only the plans are measured (no recall): for LongMemEval, whose
haystacks would take an hour to ingest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from memstream.bench.cases import REPORT, TUNE, BenchQuestion, score
from memstream.bench.e2e_ask import provenance
from memstream.bench.plots import pyplot, save_figure
from memstream.bench.queries import bench_query
from memstream.bench.scoring import percentile
from memstream.ports import LLM, Embedder, LLMError, LlmRequest, LlmResult, VectorStore
from memstream.processors.query.engine import QueryEngine, QueryOptions
from memstream.processors.query.plan import DOUBTS, Doubt, HybridPlanner, LlmPlanner, Planner, rule_doubts, rule_plan
from memstream.schemas import Plan, Query, StageCost

if TYPE_CHECKING:
    from memstream.config import Settings

MODES = ("rules", "llm", "hybrid")  # the settings' modes (``auto`` is one of these once resolved)
TUNED = "hybrid-tuned"  # hybrid with the doubts chosen on the tune split
FIELDS = ("profile", "operation", "time", "entities", "participants")
SPLITS = (TUNE, REPORT)


# --- the LLM, each distinct call made once -----------------------------------------------------------


class RecordedLLM(LLM):
    """The planner's LLM, each distinct call made once. The first call of a prompt goes to ``live``
    and its result (or error) is kept with its latency; a repeat returns what was kept and is charged
    the kept latency (``charged_s``), as if it had waited again. ``live_s`` is the time spent in live
    calls, so a caller's wall time less ``live_s`` plus ``charged_s`` is what the call would cost."""

    def __init__(self, live: LLM | None):
        self.live = live
        self.model = live.model if live is not None else "recorded"
        self.kept: dict[str, tuple[LlmResult | LLMError, float]] = {}
        self.live_calls = 0
        self.live_s = 0.0
        self.charged_s = 0.0

    @staticmethod
    def key(messages: Sequence[Mapping[str, str]], schema_name: str, max_tokens: int | None) -> str:
        return json.dumps([[dict(m) for m in messages], schema_name, max_tokens], sort_keys=True)

    def answer(self, request: LlmRequest) -> LlmResult:
        key = self.key(request.messages, request.schema_name, request.max_tokens)
        if key not in self.kept:
            if self.live is None:
                raise LLMError("no live LLM and no kept answer for this prompt", "connection")
            started = time.perf_counter()
            outcome: LlmResult | LLMError
            try:
                # Without the caller's deadline: the answer is kept for every later caller.
                outcome = dataclasses.replace(request, timeout_s=None).send(self.live)
            except LLMError as exc:
                outcome = exc
            seconds = time.perf_counter() - started
            self.kept[key] = (outcome, seconds)
            self.live_calls += 1
            self.live_s += seconds
        outcome, seconds = self.kept[key]
        self.charged_s += seconds
        if isinstance(outcome, LLMError):
            raise outcome
        return outcome


# --- one question under one mode ------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    plan: Plan
    calls: int  # planner LLM calls, from the reply's (or the planner's) cost
    plan_ms: float  # planner latency, LLM waits included
    recall: float | None  # evidence recall; None without a store
    tokens: int = 0  # the planner calls' prompt and completion tokens


def planner_calls(costs: Iterable[StageCost]) -> int:
    """The planner's LLM calls among a reply's costs (the answer and research calls are not)."""
    return sum(c.calls for c in costs if c.stage == "plan")


def planner_tokens(costs: Iterable[StageCost]) -> int:
    """The planner calls' prompt and completion tokens among a reply's costs."""
    return sum(c.prompt_tokens + c.completion_tokens for c in costs if c.stage == "plan")


def charged_ms(wall_ms: float, llm: RecordedLLM, live_before: float, charged_before: float) -> float:
    """What a step would have cost with every LLM call made live: its wall time, less the live calls'
    time in it, plus the kept latency charged for every call in it."""
    return wall_ms + ((llm.charged_s - charged_before) - (llm.live_s - live_before)) * 1000.0


def query_of(q: BenchQuestion, k: int) -> Query:
    return bench_query(q, reply_topic="planner", k=k)


def ask_engine(engine: QueryEngine, llm: RecordedLLM, q: BenchQuestion, k: int) -> Outcome:
    """The question through the query engine: the plan, its calls and latency as the reply states them."""
    live, charged = llm.live_s, llm.charged_s
    reply = engine.run(query_of(q, k))
    assert reply.plan is not None
    scores = score(q, provenance(reply))
    return Outcome(
        reply.plan,
        planner_calls(reply.costs),
        round(charged_ms(reply.latency_ms.get("plan_ms", 0.0), llm, live, charged), 3),
        scores.get("evidence_recall"),
        planner_tokens(reply.costs),
    )


def ask_planner(planner: Planner, llm: RecordedLLM, q: BenchQuestion) -> Outcome:
    """The question's plan only (no store)."""
    live, charged = llm.live_s, llm.charged_s
    started = time.perf_counter()
    plan, cost = planner.plan(q.text, q.asked_at)
    wall_ms = (time.perf_counter() - started) * 1000.0
    return Outcome(plan, cost.calls, round(charged_ms(wall_ms, llm, live, charged), 3), None, planner_tokens([cost]))


# --- comparing plans (pure) -----------------------------------------------------------------------


def plan_fields(plan: Plan) -> dict[str, Any]:
    """The compared fields of a plan, each as a comparable value (entities as a case-folded set: their
    order and case carry nothing for retrieval)."""
    return {
        "profile": plan.profile,
        "operation": plan.operation,
        "time": (plan.time_from, plan.time_to),
        "entities": frozenset(e.casefold() for e in plan.entities),
        "participants": plan.participants,
    }


def differing_fields(a: Plan, b: Plan) -> tuple[str, ...]:
    """The compared fields (``FIELDS`` order) on which two plans differ."""
    fa, fb = plan_fields(a), plan_fields(b)
    return tuple(f for f in FIELDS if fa[f] != fb[f])


@dataclass
class Record:
    """One question: its doubts and its outcome under each mode."""

    question: BenchQuestion
    split: str
    doubts: tuple[Doubt, ...]
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def differs(self, mode: str = "llm") -> tuple[str, ...]:
        return differing_fields(self.outcomes["rules"].plan, self.outcomes[mode].plan)


def _share(n: int, total: int) -> float | None:
    return round(n / total, 3) if total else None


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def mode_summary(records: Sequence[Record], mode: str) -> dict[str, Any]:
    """A mode's figures over ``records``: recall, planner calls and latency."""
    outcomes = [r.outcomes[mode] for r in records if mode in r.outcomes]
    if not outcomes:
        return {"questions": 0}
    latency = [o.plan_ms for o in outcomes]
    recall = [o.recall for o in outcomes if o.recall is not None]
    groups = sorted({r.question.group for r in records})
    out: dict[str, Any] = {
        "questions": len(outcomes),
        "evidence_recall": _mean(recall),
        "recall_by_group": {
            g: _mean(
                [
                    o.recall
                    for r in records
                    if r.question.group == g and (o := r.outcomes.get(mode)) and o.recall is not None
                ]
            )
            for g in groups
        }
        if recall
        else None,
        "llm_calls": sum(o.calls for o in outcomes),
        "llm_calls_per_question": round(sum(o.calls for o in outcomes) / len(outcomes), 3),
        "asked_llm_share": _share(sum(o.calls > 0 for o in outcomes), len(outcomes)),
        "llm_tokens_per_question": round(sum(o.tokens for o in outcomes) / len(outcomes), 1),
        "plan_ms": {
            "p50": round(percentile(latency, 50), 2),
            "p99": round(percentile(latency, 99), 2),
            "mean": round(statistics.fmean(latency), 2),
        },
        "differs_from_rules": _share(
            sum(bool(differing_fields(r.outcomes["rules"].plan, r.outcomes[mode].plan)) for r in records), len(records)
        )
        if all("rules" in r.outcomes and mode in r.outcomes for r in records)
        else None,
    }
    if not recall:
        del out["evidence_recall"], out["recall_by_group"]
    return out


def plan_differences(records: Sequence[Record]) -> dict[str, Any]:
    """How often the LLM plan differs from the rule plan, per field and at all; how often the LLM
    planner fell back to the rules (invalid JSON twice, or an error); and how often each doubt fires."""
    n = len(records)
    differs = [r.differs("llm") for r in records]
    return {
        "questions": n,
        "llm_differs": {f: _share(sum(f in d for d in differs), n) for f in FIELDS}
        | {"any": _share(sum(map(bool, differs)), n)},
        "llm_fell_back": _share(sum(r.outcomes["llm"].plan.planner == "rules" for r in records), n),
        "doubts": {d: _share(sum(d in r.doubts for r in records), n) for d in DOUBTS},
        "unsure": _share(sum(bool(r.doubts) for r in records), n),
    }


def doubt_gains(records: Sequence[Record], per_doubt: Mapping[Doubt, Mapping[str, Outcome]]) -> dict[str, Any]:
    """Per doubt, over the questions it fires on: recall with the rule plan, with the whole LLM plan,
    and with the LLM's fields for this doubt only (``per_doubt[d][qid]``), and how often the LLM plan
    differs on the doubted fields."""
    out: dict[str, Any] = {}
    for d in DOUBTS:
        flagged = [r for r in records if d in r.doubts]
        alone = per_doubt.get(d, {})

        def recall(outcomes: Iterable[Outcome | None]) -> float | None:
            return _mean([o.recall for o in outcomes if o is not None and o.recall is not None])

        out[d] = {
            "questions": len(flagged),
            "rules_recall": recall(r.outcomes.get("rules") for r in flagged),
            "llm_recall": recall(r.outcomes.get("llm") for r in flagged),
            "llm_fields_recall": recall(alone.get(r.question.qid) for r in flagged),
            "llm_differs": _share(sum(bool(r.differs("llm")) for r in flagged), len(flagged)),
        }
    return out


def choose_triggers(gains: Mapping[str, Mapping[str, Any]], *, min_questions: int = 3) -> tuple[Doubt, ...]:
    """The doubts worth an LLM call: those whose questions (at least ``min_questions``) gained recall
    with the LLM's fields on the tune split. A tie does not pay: the call costs time for nothing."""
    chosen = []
    for d in DOUBTS:
        g = gains.get(d, {})
        rules, llm = g.get("rules_recall"), g.get("llm_fields_recall")
        if g.get("questions", 0) >= min_questions and rules is not None and llm is not None and llm > rules:
            chosen.append(d)
    return tuple(chosen)


# --- the run --------------------------------------------------------------------------------------


def records_for(questions: Sequence[BenchQuestion], split_of: Callable[[str], str]) -> list[Record]:
    """Each question with its split and the rules' doubts about it, no mode asked yet."""
    return [
        Record(q, split_of(q.qid), rule_doubts(q.text, q.asked_at, rule_plan(q.text, q.asked_at))) for q in questions
    ]


def run_modes(
    records: Sequence[Record],
    llm: RecordedLLM,
    ask: Callable[[str, Planner | None, BenchQuestion], Outcome],
    *,
    chosen: tuple[Doubt, ...] | None = None,
    min_questions: int = 3,
    on_question: Callable[[], None] = lambda: None,
) -> tuple[tuple[Doubt, ...], dict[str, Any]]:
    """Every question under each mode (``llm`` first: its calls are the live ones); then, unless the
    doubts worth a call are ``chosen`` already, each doubt alone on the tune questions it fires on and
    the choice (:func:`choose_triggers`); then ``hybrid-tuned`` with the chosen doubts.
    ``ask(mode, planner, q)``: the question under a settings mode (``planner`` None) or under a given
    planner (the tuned and per-doubt hybrids). Returns the chosen doubts and the per-doubt gains."""
    for mode in ("llm", "rules", "hybrid"):
        for r in records:
            r.outcomes[mode] = ask(mode, None, r.question)
            on_question()
    gains: dict[str, Any] = {}
    if chosen is None:
        tune = [r for r in records if r.split == TUNE]
        per_doubt: dict[Doubt, dict[str, Outcome]] = {}
        for d in DOUBTS:
            planner = HybridPlanner(LlmPlanner(llm), triggers=(d,))
            per_doubt[d] = {r.question.qid: ask("hybrid", planner, r.question) for r in tune if d in r.doubts}
        gains = doubt_gains(tune, per_doubt)
        chosen = choose_triggers(gains, min_questions=min_questions)
    tuned = HybridPlanner(LlmPlanner(llm), triggers=chosen)
    for r in records:
        r.outcomes[TUNED] = ask("hybrid", tuned, r.question)
        on_question()
    return chosen, gains


def summary(records: Sequence[Record], chosen: tuple[Doubt, ...], gains: Mapping[str, Any]) -> dict[str, Any]:
    """One data set's figures per split: the doubts each hybrid calls on, how the plans differ, each
    mode's recall, calls and latency, and the per-doubt gains the choice was made on."""
    splits = [s for s in SPLITS if any(r.split == s for r in records)]
    return {
        "triggers": {"hybrid": list(DOUBTS), TUNED: list(chosen)},
        "questions": {s: sum(r.split == s for r in records) for s in splits},
        "plans": {s: plan_differences([r for r in records if r.split == s]) for s in splits},
        "modes": {
            m: {s: mode_summary([r for r in records if r.split == s], m) for s in splits} for m in (*MODES, TUNED)
        },
        "doubts_on_tune": dict(gains),
    }


def question_rows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Per question: its doubts, and per mode its calls, latency, recall and the fields that differ
    from the rules (question text left out: the dev data stays out of the repository)."""
    return [
        {
            "qid": r.question.qid,
            "split": r.split,
            "group": r.question.group,
            "doubts": list(r.doubts),
            "modes": {
                m: {"calls": o.calls, "plan_ms": o.plan_ms, "recall": o.recall, "differs": list(r.differs(m))}
                for m, o in r.outcomes.items()
            },
        }
        for r in records
    ]


def engine_asker(
    store: VectorStore, embedder: Embedder, base: QueryOptions, llm: RecordedLLM, k: int
) -> Callable[[str, Planner | None, BenchQuestion], Outcome]:
    """Questions through a query engine per settings mode, built as a worker builds it (the planner
    from ``QueryOptions.planner`` and the planner's LLM); a given planner replaces the engine's."""
    engines: dict[str, QueryEngine] = {}

    def ask(mode: str, planner: Planner | None, q: BenchQuestion) -> Outcome:
        if mode not in engines:
            engines[mode] = QueryEngine(store, embedder, None, dataclasses.replace(base, planner=mode), planner_llm=llm)
        engine = engines[mode]
        if planner is None:
            return ask_engine(engine, llm, q, k)
        own = engine.planner
        engine.planner = planner
        try:
            return ask_engine(engine, llm, q, k)
        finally:
            engine.planner = own

    return ask


def planner_asker(llm: RecordedLLM) -> Callable[[str, Planner | None, BenchQuestion], Outcome]:
    """Plans only (no store): each settings mode's planner as the engine would build it."""
    from memstream.processors.query.plan import planner_for

    planners: dict[str, Planner] = {}

    def ask(mode: str, planner: Planner | None, q: BenchQuestion) -> Outcome:
        if planner is None:
            planner = planners.setdefault(mode, planner_for(mode, llm))
        return ask_planner(planner, llm, q)

    return ask


# --- the command ----------------------------------------------------------------------------------


@dataclass
class PlannerBenchOptions:
    data: Path  # LoCoMo JSON
    run: Path | None = None  # a finished `memstream bench locomo --out` folder; None: plans only
    conversations: tuple[str, ...] = ("conv-26", "conv-41")  # one tune, one report (cases.split_of)
    longmemeval: Path | None = None  # LongMemEval JSON: its plans too (no recall)
    k: int = 10
    min_questions: int = 3  # a doubt is chosen on at least this many tune questions


def live_llm(settings: Settings, running: contextlib.ExitStack) -> tuple[LLM, str]:
    """The configured LLM (MEMSTREAM_LLM_BASE_URL), else the local SmolLM2 server (started for the run
    only if it is down, and then stopped after it), and its model name."""
    from memstream.adapters.openai_llm import OpenAICompatibleLLM
    from memstream.streams import runtime

    if settings.llm_base_url:
        url, model, key = settings.llm_base_url, settings.llm_model, settings.llm_api_key
    else:
        running.enter_context(runtime.LOCAL_LLM.session(settings))
        env = runtime.local_llm_env(settings)
        url, model, key = env["MEMSTREAM_LLM_BASE_URL"], env["MEMSTREAM_LLM_MODEL"], "local"
    return OpenAICompatibleLLM(url, model, key, timeout_s=settings.llm_timeout_s), model


def run_planner_bench(
    options: PlannerBenchOptions, *, on_question: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """The LoCoMo questions of ``options.conversations`` under every mode (recall over the run's
    store when a run is given), then LongMemEval's plans when asked for."""
    from memstream.bench.cases import locomo_set, longmemeval_set
    from memstream.bench.report import source_commit
    from memstream.config import Settings

    settings = Settings()
    bench = locomo_set(options.data, conversations=options.conversations)
    with contextlib.ExitStack() as running:
        live, model = live_llm(settings, running)
        llm = RecordedLLM(live)
        records = records_for(bench.questions, bench.split)
        if options.run is not None:
            ask = running.enter_context(_engine_over(options.run, llm, options.k))
        else:
            ask = planner_asker(llm)
        chosen, gains = run_modes(records, llm, ask, min_questions=options.min_questions, on_question=on_question)
        result: dict[str, Any] = {
            "bench": "planner",
            "commit": source_commit(),
            "data": str(options.data),
            "run": str(options.run) if options.run else None,
            "k": options.k,
            "llm": {"model": model},
            "locomo": summary(records, chosen, gains),
        }
        detail = {"locomo": question_rows(records)}
        if options.longmemeval is not None:
            lme = longmemeval_set(options.longmemeval)
            lme_records = records_for(lme.questions, lme.split)
            run_modes(lme_records, llm, planner_asker(llm), chosen=chosen, on_question=on_question)
            result["longmemeval"] = summary(lme_records, chosen, {})
            detail["longmemeval"] = question_rows(lme_records)
        result["llm"].update(live_calls=llm.live_calls, live_s=round(llm.live_s, 1))
        result["per_question"] = detail
    return result


@contextlib.contextmanager
def _engine_over(
    run: Path, llm: RecordedLLM, k: int
) -> Iterator[Callable[[str, Planner | None, BenchQuestion], Outcome]]:
    """An engine asker over a finished run's store (its workers stopped), as ``bench ablate`` opens it."""
    from memstream.adapters import open_existing_store
    from memstream.adapters.st_embedder import SentenceTransformerEmbedder
    from memstream.bench.deployment import Deployment
    from memstream.bench.retrieval import _query_options
    from memstream.config import Settings
    from memstream.streams import runtime

    folder = run / "deployment"
    if not (folder / Deployment.MANIFEST).exists():
        raise FileNotFoundError(f"{folder} holds no deployment: give a finished `memstream bench locomo --out` folder")
    settings = Settings(data_dir=folder, llm_base_url="")  # the store and the worker's query options
    runtime.apply_torch_threads(settings)
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    with contextlib.closing(open_existing_store(settings)) as store:
        yield engine_asker(store, embedder, _query_options(settings), llm, k)


def plot(result: dict[str, Any], out: Path) -> Path:
    """Per mode, LoCoMo tune and report: evidence recall, and the planner's mean wait per question
    (calls × their latency; the p50 of a mode that calls for a few questions is the rules' 0.2 ms),
    with the LLM calls per question written on each bar."""
    plt = pyplot()

    locomo = result["locomo"]
    modes = list(locomo["modes"])
    splits = list(locomo["questions"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(splits)
    for i, s in enumerate(splits):
        xs = [j + (i - (len(splits) - 1) / 2) * width for j in range(len(modes))]
        rows = [locomo["modes"][m][s] for m in modes]
        left.bar(
            xs, [row.get("evidence_recall") or 0.0 for row in rows], width, label=f"{s} ({locomo['questions'][s]})"
        )
        waits = [row["plan_ms"]["mean"] for row in rows]
        right.bar(xs, waits, width, label=s)
        for x, wait, row in zip(xs, waits, rows):
            right.annotate(f"{row['llm_calls_per_question']:.2f}", (x, wait), ha="center", va="bottom", fontsize=8)
    for ax in (left, right):
        ax.set_xticks(range(len(modes)), modes)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(loc="upper right")
    lo = min(locomo["modes"][m][s].get("evidence_recall") or 1.0 for m in modes for s in splits)
    left.set_ylim(max(0.0, lo - 0.1), 1.0)
    left.set_ylabel(f"evidence recall, K = {result['k']}")
    left.set_title("LoCoMo dev: recall per planner mode")
    right.set_ylabel("planner wait per question, mean (ms)")
    right.set_title(f"planner wait ({result['llm']['model']}); LLM calls per question on the bars")
    return save_figure(plt, fig, out)


__all__ = [
    "FIELDS",
    "MODES",
    "TUNED",
    "Outcome",
    "PlannerBenchOptions",
    "Record",
    "RecordedLLM",
    "ask_engine",
    "ask_planner",
    "charged_ms",
    "choose_triggers",
    "differing_fields",
    "doubt_gains",
    "engine_asker",
    "mode_summary",
    "plan_differences",
    "plan_fields",
    "planner_asker",
    "planner_calls",
    "planner_tokens",
    "plot",
    "question_rows",
    "records_for",
    "run_planner_bench",
    "live_llm",
    "run_modes",
    "summary",
]
