"""The grid the content query and the graph's per-item budget were chosen on (LoCoMo tune split).

Over the store of a finished ``memstream bench locomo --out RUN`` folder (workers stopped), in process:
the content query's mode and the word a speaker's name becomes (at K = 10 and at the 1,000-token fill
of ``bench ablate``), and the graph's neighbours per hop (at the 1,000-token fill: at K = 10 every row
keeps 16); the sentence and whole-turn baselines at each row's tokens. Usage:

    .venv/bin/python scripts/content_query_grid.py RUN --json docs/results/ablation/content_graph_tuning.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
from pathlib import Path
from typing import Any

import memstream.bench.ablate as ablate
import memstream.processors.query.engine as query_module
from memstream.adapters import open_store
from memstream.adapters.st_embedder import SentenceTransformerEmbedder
from memstream.bench.cases import locomo_set
from memstream.bench.cli import LOCOMO_DEV
from memstream.bench.e2e import SENTENCE_STORE
from memstream.bench.retrieval import _query_options, baseline_store, sentence_baseline_store
from memstream.config import Settings
from memstream.processors.query.graph import GraphParams
from memstream.processors.text import without_names

K10: dict[str, Any] = {}
FILL300 = ablate.fill_params(300)
FILL1000 = ablate.fill_params(1000)
CONTENT_BUDGETS = {"K=10": K10, "fill 1000": FILL1000}
GRAPH_BUDGETS = {"fill 1000": FILL1000}  # at K = 10 every row keeps 16 per hop
# (row name, overrides, the budgets, the word a name becomes: None = the shipped "someone")
ROWS: list[tuple[str, dict[str, Any], dict[str, dict[str, Any]], str | None]] = [
    *[(f"content {m}", {"content_query": m}, CONTENT_BUDGETS, None) for m in ("none", "semantic", "vote")],
    ("content semantic, name -> they", {"content_query": "semantic"}, CONTENT_BUDGETS, "they"),
    *[
        (f"graph per_hop={n} fixed", {"graph": GraphParams(per_hop=n, per_item=0.0)}, GRAPH_BUDGETS, None)
        for n in (16, 32, 64)
    ],
    *[(f"graph per_item={x}", {"graph": GraphParams(per_item=x)}, GRAPH_BUDGETS, None) for x in (0.25, 0.75)],
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--data", type=Path, default=LOCOMO_DEV)
    parser.add_argument("--split", default="tune", choices=("tune", "report", "all"))
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    bench = locomo_set(args.data)
    settings = Settings(data_dir=args.run / "deployment")
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    turns = [t for ts in bench.conversations.values() for t in ts]
    out: dict[str, Any] = {"bench": "content_query_grid", "run": str(args.run), "split": args.split, "rows": {}}
    with contextlib.ExitStack() as opened:
        store = opened.enter_context(contextlib.closing(open_store(settings)))
        whole = opened.enter_context(contextlib.closing(baseline_store(args.run / "baseline", turns, embedder)))
        sentences = opened.enter_context(
            contextlib.closing(sentence_baseline_store(args.run / SENTENCE_STORE, turns, embedder))
        )
        for row, overrides, budgets, word in ROWS:
            query_module.without_names = functools.partial(without_names, word=word or "someone")
            variants = {f"{row} @ {b}": (row, {**params, **overrides}, None) for b, params in budgets.items()}
            ablate.chosen_variants = lambda options, v=variants: v  # type: ignore[assignment]
            result = ablate.run_ablation(
                ablate.AblationOptions(run=args.run, data=args.data, split=None if args.split == "all" else args.split),
                bench,
                store,
                whole,
                sentences,
                embedder,
                _query_options(settings),
            )
            for name, r in result["variants"].items():
                for split, figures in r["splits"].items():
                    m, rrf = figures["memstream"], figures["baselines"]["rrf_sentences"]
                    out["rows"].setdefault(name, {})[split] = {"memstream": m, "rrf_sentences": rrf}
                    print(
                        f"{name:50s} {split:6s} recall {m['evidence_recall']:.3f} tokens {m['tokens']:7.1f} "
                        f"rrf sentences {rrf['evidence_recall']:.3f} by category {m['recall_by_group']}",
                        flush=True,
                    )
        out["commit"] = result["commit"]
    query_module.without_names = without_names
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
