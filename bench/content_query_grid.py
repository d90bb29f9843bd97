"""``memstream bench content-query-grid``: the grid the content query and the graph's per-item budget
were chosen on (LoCoMo tune split).

Over the store of a finished ``memstream bench locomo --out RUN`` folder (workers stopped), in process:
the content query's mode and the word a speaker's name becomes (at K = 10 and at the 1,000-token fill
of ``bench ablate``), and the graph's neighbours per hop (at the 1,000-token fill: at K = 10 every row
keeps 16); the sentence and whole-turn baselines at each row's tokens."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Any, Callable, Iterator

import memstream.bench.ablate as ablate
import memstream.processors.query.content as content_module
from memstream.adapters import open_store
from memstream.adapters.st_embedder import SentenceTransformerEmbedder
from memstream.bench.cases import locomo_set
from memstream.bench.e2e_state import SENTENCE_STORE
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


@contextlib.contextmanager
def names_become(word: str | None) -> Iterator[None]:
    """The content query with a speaker's name replaced by ``word`` (None: the shipped "someone")."""
    setattr(content_module, "without_names", functools.partial(without_names, word=word or "someone"))
    try:
        yield
    finally:
        setattr(content_module, "without_names", without_names)


def row_variants(
    row: str, overrides: dict[str, Any], budgets: dict[str, dict[str, Any]]
) -> dict[str, tuple[str, dict[str, Any], str | None]]:
    """A row at each of its budgets, as ``bench ablate`` variants (name -> what, params, profile)."""
    return {f"{row} @ {b}": (row, {**params, **overrides}, None) for b, params in budgets.items()}


def run_content_query_grid(run: Path, data: Path, split: str, *, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every row of ``ROWS`` over the run's store; ``split``: tune, report or all."""
    bench = locomo_set(data)
    settings = Settings(data_dir=run / "deployment")
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    turns = [t for ts in bench.conversations.values() for t in ts]
    out: dict[str, Any] = {"bench": "content_query_grid", "run": str(run), "split": split, "rows": {}}
    options = ablate.AblationOptions(run=run, data=data, split=None if split == "all" else split)
    with contextlib.ExitStack() as opened:
        store = opened.enter_context(contextlib.closing(open_store(settings)))
        whole = opened.enter_context(contextlib.closing(baseline_store(run / "baseline", turns, embedder)))
        sentences = opened.enter_context(
            contextlib.closing(sentence_baseline_store(run / SENTENCE_STORE, turns, embedder))
        )
        for row, overrides, budgets, word in ROWS:
            with names_become(word):
                result = ablate.run_ablation(
                    options,
                    bench,
                    store,
                    whole,
                    sentences,
                    embedder,
                    _query_options(settings),
                    variants=row_variants(row, overrides, budgets),
                )
            for name, r in result["variants"].items():
                for part, figures in r["splits"].items():
                    m, rrf = figures["memstream"], figures["baselines"]["rrf_sentences"]
                    out["rows"].setdefault(name, {})[part] = {"memstream": m, "rrf_sentences": rrf}
                    say(
                        f"{name:50s} {part:6s} recall {m['evidence_recall']:.3f} tokens {m['tokens']:7.1f} "
                        f"rrf sentences {rrf['evidence_recall']:.3f} by category {m['recall_by_group']}"
                    )
        out["commit"] = result["commit"]
    return out
