"""Recall of a finished `memstream bench locomo|longmemeval` run's store, in process, at K = 10 and
filled to 300 / 1,000 evidence tokens the way the benches ask over Kafka (fixed policy, K = fill_k,
max_tokens), one split, for RetrievalParams variants given as JSON overrides; with --baselines, the
same-run baselines held to each variant's evidence tokens per question.

    .venv/bin/python scripts/fill_recall.py longmemeval RUN_DIR tune \\
        '{"top-up": {}, "no top-up": {"time_top_up": false}}' --json OUT
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

from memstream.adapters import open_store
from memstream.adapters.st_embedder import SentenceTransformerEmbedder
from memstream.bench.ablate import ask
from memstream.bench.cases import BenchQuestion, locomo_set, longmemeval_set, score
from memstream.bench.e2e import SENTENCE_STORE, Limits, baseline_rankings, provenance, take_units
from memstream.bench.report import source_commit
from memstream.bench.retrieval import _query_options, baseline_store, sentence_baseline_store
from memstream.bench.scoring import fill_k
from memstream.config import Settings
from memstream.processors.query.engine import QueryEngine

DATA = {
    "locomo": Path("../shared/data/locomo/locomo_dev.json"),
    "longmemeval": Path("../shared/data/longmemeval/longmemeval_s_dev.json"),
}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=sorted(DATA))
    parser.add_argument("run", type=Path, help="the bench's --out folder (its deployment/ holds the store)")
    parser.add_argument("split", choices=("tune", "report"))
    parser.add_argument("variants", help="JSON: variant name -> RetrievalParams overrides")
    parser.add_argument("--data", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--baselines",
        action="store_true",
        help="also the same-run baselines (whole raw turns and their sentences), each held to memstream's "
        "evidence tokens per question in that variant and budget, as the benches hold them",
    )
    args = parser.parse_args()
    data = args.data or DATA[args.bench]
    bench = locomo_set(data) if args.bench == "locomo" else longmemeval_set(data)
    settings = Settings(data_dir=args.run / "deployment")
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    questions = [q for q in bench.questions if bench.split(q.qid) == args.split and q.retrieval_scored]
    by_conversation = args.bench == "locomo"  # LongMemEval: a conversation (haystack) per question
    result: dict = {
        "bench": args.bench,
        "commit": source_commit(),
        "run": str(args.run),
        "split": args.split,
        "questions": len(questions),
    }
    with contextlib.ExitStack() as opened:
        store = opened.enter_context(contextlib.closing(open_store(settings)))
        rankings: dict[str, dict] = {}
        if args.baselines:
            asked = {q.conversation_id for q in questions}  # a split's run ingested only its conversations
            turns = [t for cid, ts in bench.conversations.items() if cid in asked for t in ts]
            # As the benches do: LoCoMo's whole turns in their own store, LongMemEval's in the pipeline's.
            own = bench.baseline_index == "own"
            whole = (
                opened.enter_context(contextlib.closing(baseline_store(args.run / "baseline", turns, embedder)))
                if own
                else store
            )
            sentences = opened.enter_context(
                contextlib.closing(sentence_baseline_store(args.run / SENTENCE_STORE, turns, embedder))
            )
            limits = Limits.for_k(max(k for _, k, _ in BUDGETS))
            vectors = embedder.embed([q.text for q in questions])
            for q, vector in zip(questions, vectors, strict=True):
                rankings[q.qid] = baseline_rankings(q, whole, sentences, vector, limits)
        base = _query_options(settings)
        for name, overrides in json.loads(args.variants).items():
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
                print(name, label, rows[label]["recall"], rows[label]["evidence_tokens"], flush=True)
                for b, r in rows[label].get("baselines_at_these_tokens", {}).items():
                    print("   ", b, r["recall"], flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
