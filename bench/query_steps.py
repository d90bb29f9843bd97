"""``memstream bench query-steps``: where a query's time goes, in process over a run's store: each step
of the engine (the reply's ``latency_ms``) and each kind of store search (by the payload keys its
filter matches any of), p50 / p90 / max over LoCoMo questions spread over the dev file, K = 10, no LLM.

    memstream bench query-steps .data/bench/retrieval/<run> --json OUT
    memstream bench query-steps .data/bench/retrieval/<run> --drop-index entity_triggers --json OUT

``--drop-index`` removes a payload index from the cards first (Qdrant Edge): what the same store
costs as written before that index existed. The worker adds it back when it starts.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from pathlib import Path
from typing import Any, Sequence

from memstream.adapters import open_store
from memstream.adapters.st_embedder import SentenceTransformerEmbedder
from memstream.bench.ablate import ask
from memstream.bench.cases import locomo_set
from memstream.bench.retrieval import _query_options
from memstream.bench.scoring import spread
from memstream.config import Settings
from memstream.processors.query.engine import QueryEngine
from memstream.processors.write.index import CARDS, COLLECTIONS
from memstream.streams import runtime


def percentiles(values: list[float]) -> dict[str, float]:
    """How many, p50, p90 (nearest rank below) and max."""
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 2),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "max": round(ordered[-1], 2),
    }


def run_query_steps(
    data_dir: Path, *, data: Path, questions: int = 100, drop_index: Sequence[str] = ()
) -> dict[str, Any]:
    """Every step's and every search's time over ``questions`` questions of ``data`` asked of the store
    in ``data_dir`` (a deployment's data folder: its qdrant-edge/ is read)."""
    bench = locomo_set(data)
    asked = spread(bench.questions, questions)  # every conversation's, not the first ones'
    settings = Settings(data_dir=data_dir)
    runtime.apply_torch_threads(settings)
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    searches: dict[str, list[float]] = {}
    steps: dict[str, list[float]] = {}
    with contextlib.closing(open_store(settings)) as store:
        if drop_index:
            import qdrant_edge as qe

            for field in drop_index:
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
        for q in asked[:3]:  # warm-up: model and store pages
            ask(engine, q, 10, None)
        searches.clear()
        for q in asked:
            for name, ms in ask(engine, q, 10, None).latency_ms.items():
                steps.setdefault(name, []).append(ms)
    return {
        "data_dir": str(data_dir),
        "cards": cards,
        "questions": len(asked),
        "dropped_indexes": list(drop_index),
        "steps_ms": {k: percentiles(v) for k, v in sorted(steps.items())},
        "searches_ms": {k: percentiles(v) for k, v in sorted(searches.items())},
    }


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A line per step and per kind of search: n, p50, p90, max."""
    return [
        f"{name:28s} n {s['n']:5.0f}  p50 {s['p50']:7.1f}  p90 {s['p90']:7.1f}  max {s['max']:7.1f}"
        for section in ("steps_ms", "searches_ms")
        for name, s in result[section].items()
    ]
