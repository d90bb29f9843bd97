"""Where a query's time goes, in process over a run's store: each step of the engine (the reply's
``latency_ms``) and each kind of store search (by the payload keys its filter matches any of), p50 /
p90 / max over LoCoMo questions spread over the dev file, K = 10, no LLM.

    .venv/bin/python scripts/query_steps.py .data/bench/retrieval/<run> --json OUT
    .venv/bin/python scripts/query_steps.py .data/bench/retrieval/<run> --drop-index entity_triggers --json OUT

``--drop-index`` removes a payload index from the cards first (Qdrant Edge): what the same store
costs as written before that index existed. The worker adds it back when it starts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from memstream.adapters import open_store
from memstream.adapters.st_embedder import SentenceTransformerEmbedder
from memstream.bench.ablate import ask
from memstream.bench.cases import locomo_set
from memstream.bench.cli import LOCOMO_DEV
from memstream.bench.retrieval import _query_options
from memstream.config import Settings
from memstream.processors.query.engine import QueryEngine
from memstream.processors.write.index import CARDS, COLLECTIONS
from memstream.streams import runtime


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 2),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "max": round(ordered[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path, help="a deployment's data folder (its qdrant-edge/ is read)")
    parser.add_argument("--data", type=Path, default=LOCOMO_DEV)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--drop-index", action="append", default=[], help="payload index to remove from the cards")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    bench = locomo_set(args.data)
    step = len(bench.questions) / args.questions
    questions = [bench.questions[int(i * step)] for i in range(args.questions)]
    settings = Settings(data_dir=args.data_dir)
    runtime.apply_torch_threads(settings)
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    searches: dict[str, list[float]] = {}
    steps: dict[str, list[float]] = {}
    with contextlib.closing(open_store(settings)) as store:
        if args.drop_index:
            import qdrant_edge as qe

            for field in args.drop_index:
                store._require(CARDS).update(qe.UpdateOperation.delete_field_index(field))  # type: ignore[attr-defined]
        else:
            store.ensure_collections(COLLECTIONS, embedder.dim)  # as a starting worker does
        cards = store.count(CARDS)
        search = store.search

        def timed(collection: str, tenant_id: str, vector: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            hits = search(collection, tenant_id, vector, **kw)
            where = kw.get("where")
            key = f"{collection}:{','.join(sorted(where.any_of)) if where is not None else ''}"
            searches.setdefault(key, []).append((time.perf_counter() - t0) * 1000.0)
            return hits

        store.search = timed  # type: ignore[method-assign]
        engine = QueryEngine(store, embedder, None, _query_options(settings))
        for q in questions[:3]:  # warm-up: model and store pages
            ask(engine, q, 10, None)
        searches.clear()
        for q in questions:
            for name, ms in ask(engine, q, 10, None).latency_ms.items():
                steps.setdefault(name, []).append(ms)
    result = {
        "data_dir": str(args.data_dir),
        "cards": cards,
        "questions": len(questions),
        "dropped_indexes": args.drop_index,
        "steps_ms": {k: spread(v) for k, v in sorted(steps.items())},
        "searches_ms": {k: spread(v) for k, v in sorted(searches.items())},
    }
    for section in ("steps_ms", "searches_ms"):
        for name, s in result[section].items():
            print(f"{name:28s} n {s['n']:5.0f}  p50 {s['p50']:7.1f}  p90 {s['p90']:7.1f}  max {s['max']:7.1f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
