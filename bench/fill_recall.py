"""``memstream bench fill-recall``: recall of a finished ``memstream bench locomo|longmemeval`` run's
store, in process, at K = 10 and filled to 300 / 1,000 evidence tokens the way the benches ask over
Kafka (fixed policy, K = fill_k, max_tokens), one split, for RetrievalParams variants given as JSON
overrides; with --baselines, the same-run baselines held to each variant's evidence tokens per question.

    memstream bench fill-recall longmemeval RUN_DIR tune \\
        '{"top-up": {}, "no top-up": {"time_top_up": false}}' --json OUT
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from memstream.adapters import open_store
from memstream.adapters.st_embedder import SentenceTransformerEmbedder
from memstream.bench.ablate import ask
from memstream.bench.cases import BenchQuestion, locomo_set, longmemeval_set, score
from memstream.bench.dev_data import LOCOMO_DEV, LONGMEMEVAL_DEV
from memstream.bench.e2e_ask import provenance
from memstream.bench.e2e_baselines import Limits, baseline_rankings, take_units
from memstream.bench.e2e_state import SENTENCE_STORE
from memstream.bench.report import source_commit
from memstream.bench.retrieval import _query_options, baseline_store, sentence_baseline_store
from memstream.bench.scoring import fill_k
from memstream.config import Settings
from memstream.processors.query.engine import QueryEngine

DATA = {"locomo": LOCOMO_DEV, "longmemeval": LONGMEMEVAL_DEV}
BUDGETS = (("K = 10", 10, None), ("300 tokens", fill_k(300), 300), ("1,000 tokens", fill_k(1000), 1000))


def mean_scores(rows: list[tuple[BenchQuestion, dict[str, float]]], *, per_conversation: bool) -> dict:
    """Mean of each metric over ``(question, scores)`` rows, overall, per group (category or question
    type) and, with ``per_conversation``, per conversation (LongMemEval has one per question)."""
    overall: dict[str, list[float]] = {}
    by: dict[str, dict[str, dict[str, list[float]]]] = {"per_group": {}, "per_conversation": {}}
    for q, scores in rows:
        for metric, value in scores.items():
            overall.setdefault(metric, []).append(value)
            by["per_group"].setdefault(q.group, {}).setdefault(metric, []).append(value)
            by["per_conversation"].setdefault(q.conversation_id, {}).setdefault(metric, []).append(value)
    if not per_conversation:
        del by["per_conversation"]

    def mean(metrics: dict[str, list[float]]) -> dict[str, float]:
        return {m: round(sum(v) / len(v), 4) for m, v in metrics.items()}

    return {"recall": mean(overall), **{name: {key: mean(d[key]) for key in sorted(d)} for name, d in by.items()}}


def run_fill_recall(
    bench_name: str,
    run: Path,
    split: str,
    variants: str,
    *,
    data: Path | None = None,
    baselines: bool = False,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """``variants``: JSON, variant name -> RetrievalParams overrides; ``data``: default, the bench's dev set."""
    data = data or DATA[bench_name]
    bench = locomo_set(data) if bench_name == "locomo" else longmemeval_set(data)
    settings = Settings(data_dir=run / "deployment")
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    questions = [q for q in bench.questions if bench.split(q.qid) == split and q.retrieval_scored]
    by_conversation = bench_name == "locomo"  # LongMemEval: a conversation (haystack) per question
    result: dict = {
        "bench": bench_name,
        "commit": source_commit(),
        "run": str(run),
        "split": split,
        "questions": len(questions),
    }
    with contextlib.ExitStack() as opened:
        store = opened.enter_context(contextlib.closing(open_store(settings)))
        rankings: dict[str, dict] = {}
        if baselines:
            asked = {q.conversation_id for q in questions}  # a split's run ingested only its conversations
            turns = [t for cid, ts in bench.conversations.items() if cid in asked for t in ts]
            # As the benches do: LoCoMo's whole turns in their own store, LongMemEval's in the pipeline's.
            own = bench.baseline_index == "own"
            whole = (
                opened.enter_context(contextlib.closing(baseline_store(run / "baseline", turns, embedder)))
                if own
                else store
            )
            sentences = opened.enter_context(
                contextlib.closing(sentence_baseline_store(run / SENTENCE_STORE, turns, embedder))
            )
            limits = Limits.for_k(max(k for _, k, _ in BUDGETS))
            vectors = embedder.embed([q.text for q in questions])
            for q, vector in zip(questions, vectors, strict=True):
                rankings[q.qid] = baseline_rankings(q, whole, sentences, vector, limits)
        base = _query_options(settings)
        for name, overrides in json.loads(variants).items():
            retrieval = dataclasses.replace(base.retrieval, **overrides)
            engine = QueryEngine(store, embedder, None, dataclasses.replace(base, retrieval=retrieval))
            rows = result.setdefault("variants", {}).setdefault(name, {"overrides": overrides})
            for label, k, max_tokens in BUDGETS:
                mine: list[tuple[BenchQuestion, dict[str, float]]] = []
                theirs: dict[str, list[tuple[BenchQuestion, dict[str, float]]]] = {}
                tokens = 0
                for q in questions:
                    reply = ask(engine, q, k, None, max_tokens)
                    tokens += reply.context_tokens
                    mine.append((q, score(q, provenance(reply))))
                    for baseline, ranking in rankings.get(q.qid, {}).items():
                        chosen, _ = take_units(ranking, max(reply.context_tokens, 1))
                        theirs.setdefault(baseline, []).append((q, score(q, [u.turn_id for u in chosen])))
                rows[label] = {
                    **mean_scores(mine, per_conversation=by_conversation),
                    "evidence_tokens": round(tokens / len(questions), 1),
                }
                if theirs:
                    rows[label]["baselines_at_these_tokens"] = {
                        b: mean_scores(r, per_conversation=by_conversation) for b, r in theirs.items()
                    }
                say(f"{name} {label} {rows[label]['recall']} {rows[label]['evidence_tokens']}")
                for b, r in rows[label].get("baselines_at_these_tokens", {}).items():
                    say(f"    {b} {r['recall']}")
    return result
