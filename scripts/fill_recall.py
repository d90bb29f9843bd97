"""Recall of a finished `memstream bench locomo|longmemeval` run's store, in process, at K = 10 and
filled to 300 / 1,000 evidence tokens the way the benches ask over Kafka (fixed policy, K = fill_k,
max_tokens), one split, for RetrievalParams variants given as JSON overrides.

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
from memstream.bench.cases import locomo_set, longmemeval_set, score
from memstream.bench.e2e import provenance
from memstream.bench.retrieval import _query_options
from memstream.bench.scoring import fill_k
from memstream.config import Settings
from memstream.processors.query import QueryEngine

DATA = {
    "locomo": Path("../shared/data/locomo/locomo_dev.json"),
    "longmemeval": Path("../shared/data/longmemeval/longmemeval_s_dev.json"),
}
BUDGETS = (("K = 10", 10, None), ("300 tokens", fill_k(300), 300), ("1,000 tokens", fill_k(1000), 1000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=sorted(DATA))
    parser.add_argument("run", type=Path, help="the bench's --out folder (its deployment/ holds the store)")
    parser.add_argument("split", choices=("tune", "report"))
    parser.add_argument("variants", help="JSON: variant name -> RetrievalParams overrides")
    parser.add_argument("--data", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    data = args.data or DATA[args.bench]
    bench = locomo_set(data) if args.bench == "locomo" else longmemeval_set(data)
    settings = Settings(data_dir=args.run / "deployment")
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    questions = [q for q in bench.questions if bench.split(q.qid) == args.split and q.retrieval_scored]
    result: dict = {"bench": args.bench, "run": str(args.run), "split": args.split, "questions": len(questions)}
    with contextlib.closing(open_store(settings)) as store:
        base = _query_options(settings)
        for name, overrides in json.loads(args.variants).items():
            retrieval = dataclasses.replace(base.retrieval, **overrides)
            engine = QueryEngine(store, embedder, None, dataclasses.replace(base, retrieval=retrieval))
            rows = result.setdefault("variants", {}).setdefault(name, {"overrides": overrides})
            for label, k, max_tokens in BUDGETS:
                recall: dict[str, list[float]] = {}
                groups: dict[str, dict[str, list[float]]] = {}
                tokens = 0
                for q in questions:
                    reply = ask(engine, q, k, None, max_tokens)
                    tokens += reply.context_tokens
                    for metric, value in score(q, provenance(reply)).items():
                        recall.setdefault(metric, []).append(value)
                        groups.setdefault(q.group, {}).setdefault(metric, []).append(value)
                rows[label] = {
                    "recall": {m: round(sum(v) / len(v), 4) for m, v in recall.items()},
                    "evidence_tokens": round(tokens / len(questions), 1),
                    "per_group": {
                        g: {m: round(sum(v) / len(v), 4) for m, v in by.items()} for g, by in sorted(groups.items())
                    },
                }
                print(name, label, rows[label]["recall"], rows[label]["evidence_tokens"], flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
