"""``memstream bench ablate``: what each retrieval mechanism adds, over the store of a finished
``memstream bench locomo`` run (its ``deployment`` folder, workers stopped), in process: the query
engine runs every question once per variant (a mechanism switched off, or one that is off by default
switched on), and the sentence and whole-turn baselines of the same run are held to each variant's
own tokens per question. Figures per split: the rules may be chosen on ``tune``; ``report`` is the
figure (``bench/cases.py: split_of``).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from memstream.bench.cases import REPORT, TUNE, BenchQuestion, BenchSet, answer_score, locomo_set, score
from memstream.bench.e2e_ask import provenance
from memstream.bench.e2e_baselines import Limits, Unit, baseline_rankings, take_units
from memstream.bench.e2e_state import SENTENCE_STORE
from memstream.bench.plots import pyplot, save_figure
from memstream.bench.queries import bench_query
from memstream.bench.report import source_commit
from memstream.bench.scoring import fill_k
from memstream.ports import Embedder, VectorStore
from memstream.processors.query.engine import QueryEngine, QueryOptions
from memstream.processors.query.graph import GraphParams
from memstream.processors.tokens import count_tokens
from memstream.schemas import Reply

# name -> (what it changes, RetrievalParams overrides, forced access profile or None)
VARIANTS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "memstream": (
        "as configured: rule planner, triggers, cascade, entity votes, one item per turn, graph expansion",
        {},
        None,
    ),
    "no triggers": ("no trigger promotes its card or scene", {"trigger_threshold": 2.0}, None),
    "no planner profiles": ("always Lookup: no Compose cascade or rewrites, no Replay", {}, "lookup"),
    "no entity votes": ("naming a planned entity earns no vote", {"entity_weight": 0.0}, None),
    "no one-item-per-turn": ("evidence may repeat a turn earlier evidence covers", {"new_turns_only": False}, None),
    "research 2 rounds": ("+ the research loop, one further round (multi-hop plans)", {"research_rounds": 2}, None),
    "research 3 rounds": ("+ the research loop, two further rounds (multi-hop plans)", {"research_rounds": 3}, None),
    "no content query": (
        "the semantic rank is closeness to the question itself, speakers' names and all",
        {"content_query": "none"},
        None,
    ),
    "content query as a vote": (
        "the content query's dense search is one more fusion vote instead",
        {"content_query": "vote"},
        None,
    ),
    "no period top-up": (
        "a plan's period that holds fewer than K items is not topped up from outside it",
        {"time_top_up": False},
        None,
    ),
    "no graph expansion": ("no graph expansion from the best evidence", {"graph": 0}, None),
    "graph 2 hops": ("graph expansion, two hops", {"graph": 2}, None),
    "graph, multi-hop plans only": ("graph expansion only for aggregate, compare, spread plans", {"graph": -1}, None),
    "graph, entity edges only": ("graph expansion along shared entities only", {"graph": "entity"}, None),
    "graph, scene edges only": ("graph expansion along shared scenes only", {"graph": "scene"}, None),
    "graph, temporal edges only": ("graph expansion along adjacent turns only", {"graph": "temporal"}, None),
}
# Graph variants above are written short; ``retrieval_overrides`` spells them out.
GRAPH_VARIANTS: dict[Any, GraphParams] = {
    0: GraphParams(hops=0),
    2: GraphParams(hops=2),
    -1: GraphParams(multihop_only=True),
    "entity": GraphParams(prior_scene=0.0, prior_temporal=0.0),
    "temporal": GraphParams(prior_entity=0.0, prior_scene=0.0),
    "scene": GraphParams(prior_entity=0.0, prior_temporal=0.0),
    "fixed": GraphParams(per_item=0.0),
}
# The grid the graph's priors, seeds and per-hop budget were chosen on (tune split only:
# ``--only "graph grid" --split tune``); names spell the values.
GRAPH_GRID: dict[str, GraphParams] = {
    f"graph grid hops={h} seeds={s} per_hop={n} priors={e}/{c}/{t}": GraphParams(
        hops=h, seeds=s, per_hop=n, prior_entity=e, prior_scene=c, prior_temporal=t
    )
    for h, s, n, (e, c, t) in [
        (1, 5, 8, (1.0, 0.5, 0.5)),
        (1, 5, 8, (0.5, 0.5, 1.0)),
        (1, 5, 8, (0.25, 0.5, 1.0)),
        (1, 5, 8, (0.5, 1.0, 1.0)),
        (1, 5, 8, (1.0, 1.0, 1.0)),
        (1, 3, 8, (1.0, 0.5, 0.5)),
        (1, 10, 8, (1.0, 0.5, 0.5)),
        (1, 5, 4, (1.0, 0.5, 0.5)),
        (1, 5, 16, (1.0, 0.5, 0.5)),
        (2, 5, 8, (0.5, 0.5, 1.0)),
        (2, 5, 16, (1.0, 0.5, 0.5)),
        # second round, around the first round's best
        (1, 5, 16, (1.0, 1.0, 1.0)),
        (1, 3, 16, (1.0, 1.0, 1.0)),
        (1, 5, 24, (1.0, 1.0, 1.0)),
        (2, 5, 16, (1.0, 1.0, 1.0)),
        (1, 5, 16, (0.0, 1.0, 0.0)),
        (1, 5, 16, (0.5, 1.0, 0.5)),
    ]
}
GRAPH_VARIANTS.update(GRAPH_GRID)


# A variant's key for the query's own evidence-token budget (``Query.max_tokens``), as the
# end-to-end benches send it: not a RetrievalParams field.
MAX_TOKENS = "max_tokens"


def retrieval_overrides(params: dict[str, Any]) -> dict[str, Any]:
    """A variant's RetrievalParams overrides (its ``graph`` shorthand made a GraphParams; the query's
    ``max_tokens`` left out)."""
    params = {k: v for k, v in params.items() if k != MAX_TOKENS}
    if "graph" not in params or isinstance(params["graph"], GraphParams):
        return params
    return {**params, "graph": GRAPH_VARIANTS[params["graph"]]}


# The budgets: as many items as fit 300 / 1,000 evidence tokens (no drop-off), a pool large
# enough to fill them.
BUDGET_FILLS = (300, 1000)


def bench_fill(budget: int) -> dict[str, Any]:
    """A query filled to ``budget`` evidence tokens as ``bench locomo|longmemeval --sweep-tokens`` asks
    it: the fixed policy, K = ``fill_k(budget)`` and the query's ``max_tokens`` (so the period top-up,
    which only the fixed policy does, counts as it does over Kafka)."""
    return {"evidence_k": fill_k(budget), MAX_TOKENS: budget}


def fill_params(budget: int) -> dict[str, Any]:
    """Items in rank order until ``budget`` evidence tokens (no drop-off), with a pool to fill them:
    the adaptive policy without its drop-off, as the content-query and graph grids were chosen
    (``bench content-query-grid``); ``bench_fill`` is how the benches ask."""
    return {
        "evidence_policy": "adaptive",
        "evidence_dropoff": 1e-6,
        "evidence_min_items": 1,
        "evidence_max_items": 150,
        "evidence_max_tokens": budget,
        "evidence_k": fill_k(budget),
    }


def budget_variants() -> dict[str, tuple[str, dict[str, Any], str | None]]:
    out: dict[str, tuple[str, dict[str, Any], str | None]] = {
        f"fill {b} tokens": (f"as configured, items in rank order until {b} evidence tokens", bench_fill(b), None)
        for b in BUDGET_FILLS
    }
    # What the large-budget mechanisms add where they matter most.
    out[f"fill {BUDGET_FILLS[-1]} tokens, no content query"] = (
        "until 1,000 tokens, the semantic rank by the question itself",
        {**bench_fill(BUDGET_FILLS[-1]), "content_query": "none"},
        None,
    )
    out[f"fill {BUDGET_FILLS[-1]} tokens, graph not widened"] = (
        "until 1,000 tokens, the graph keeps 16 per hop whatever K",
        {**bench_fill(BUDGET_FILLS[-1]), "graph": "fixed"},
        None,
    )
    out[f"fill {BUDGET_FILLS[-1]} tokens, no period top-up"] = (
        "until 1,000 tokens, a period with fewer than K items is not topped up",
        {**bench_fill(BUDGET_FILLS[-1]), "time_top_up": False},
        None,
    )
    return out


# The adaptive policy at several drop-offs (chosen on the tune split).
ADAPTIVE_DROPOFFS = (0.3, 0.4, 0.5, 0.6, 0.7)
BASELINE_NAMES = ("rrf_sentences", "dense_sentences", "bm25_sentences", "rrf_topk", "bm25_topk", "dense_topk")


# Fixed K beside the default's: the curve the adaptive policy must beat at equal tokens.
FIXED_KS = (5, 20, 40)


def fixed_k_variants() -> dict[str, tuple[str, dict[str, Any], str | None]]:
    return {f"fixed K={k}": (f"as configured, {k} evidence items", {"evidence_k": k}, None) for k in FIXED_KS}


def adaptive_variants(budget: int) -> dict[str, tuple[str, dict[str, Any], str | None]]:
    return {
        f"adaptive {d:.1f}": (
            f"items until the fused score drops under {d:.1f} of the best, within {budget} tokens",
            {"evidence_policy": "adaptive", "evidence_dropoff": d, "evidence_max_tokens": budget},
            None,
        )
        for d in ADAPTIVE_DROPOFFS
    }


@dataclass
class AblationOptions:
    run: Path  # a finished `memstream bench locomo --out` folder
    data: Path
    k: int = 10
    adaptive_budget: int = 1000
    only: tuple[str, ...] = ()  # variant names containing one of these (and "memstream"); all when empty
    split: str | None = None  # only this split's questions (tuning runs on "tune")


@dataclass
class Outcome:
    scores: dict[str, float]
    tokens: int
    rounds: int
    group: str = ""
    latency_ms: float | None = None  # the engine's own time for the question (baselines: None)


def ask(engine: QueryEngine, q: BenchQuestion, k: int, profile: str | None, max_tokens: int | None = None) -> Reply:
    now = datetime.now(timezone.utc)
    query = bench_query(q, reply_topic="ablate", sent_at=now, profile=profile or "auto", k=k, max_tokens=max_tokens)
    return engine.run(query, clock=lambda: now)


def reply_outcome(q: BenchQuestion, reply: Reply) -> Outcome:
    texts = [e.text for e in reply.evidence]
    return Outcome(
        {**score(q, provenance(reply)), **answer_score(q, texts)},
        sum(count_tokens(t) for t in texts),
        reply.plan.rounds if reply.plan else 1,
        q.group,
        reply.latency_ms.get("total_ms"),
    )


def baseline_outcome(q: BenchQuestion, ranking: Sequence[Unit], budget: int) -> Outcome:
    chosen, tokens = take_units(ranking, max(budget, 1))
    return Outcome(
        {**score(q, [u.turn_id for u in chosen]), **answer_score(q, [u.text for u in chosen])}, tokens, 1, q.group
    )


def mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    recall = [o.scores["evidence_recall"] for o in outcomes if "evidence_recall" in o.scores]
    bearing = [o.scores["answer_bearing"] for o in outcomes if "answer_bearing" in o.scores]
    return {
        "questions": len(outcomes),
        "evidence_recall": mean(recall),
        "answer_bearing": mean(bearing),
        "tokens": round(statistics.fmean(o.tokens for o in outcomes), 1) if outcomes else None,
        "rounds": round(statistics.fmean(o.rounds for o in outcomes), 2) if outcomes else None,
        "p50_ms": round(statistics.median(timed), 1)
        if (timed := [o.latency_ms for o in outcomes if o.latency_ms])
        else None,
        "recall_by_group": {
            g: mean([o.scores["evidence_recall"] for o in outcomes if o.group == g and "evidence_recall" in o.scores])
            for g in sorted({o.group for o in outcomes})
        },
    }


def run_ablation(
    options: AblationOptions,
    bench: BenchSet,
    store: VectorStore,
    whole: VectorStore,
    sentences: VectorStore,
    embedder: Embedder,
    base: QueryOptions,
    *,
    on_question: Callable[[], None] = lambda: None,
    variants: dict[str, tuple[str, dict[str, Any], str | None]] | None = None,
) -> dict[str, Any]:
    """Every variant (default: ``chosen_variants``) on every question, and the baselines at each
    variant's tokens, per split."""
    variants = chosen_variants(options) if variants is None else variants
    if options.split is not None:
        bench = dataclasses.replace(
            bench, questions=[q for q in bench.questions if bench.split(q.qid) == options.split]
        )
    # As many baseline hits as the benches ask for the largest K a variant asks (fills included).
    asked = [p.get(key, 0) for _, p, _ in variants.values() for key in ("evidence_k", "evidence_max_items")]
    limits = Limits.for_k(max(options.k, *asked))
    vectors = embedder.embed([q.text for q in bench.questions])
    rankings = {
        q.qid: baseline_rankings(q, whole, sentences, v, limits) for q, v in zip(bench.questions, vectors, strict=True)
    }
    rows: dict[str, dict[str, Any]] = {}
    for name, (what, params, profile) in variants.items():
        engine = QueryEngine(
            store,
            embedder,
            None,
            dataclasses.replace(base, retrieval=dataclasses.replace(base.retrieval, **retrieval_overrides(params))),
        )
        mine: dict[str, list[Outcome]] = {TUNE: [], REPORT: []}
        theirs: dict[str, dict[str, list[Outcome]]] = {b: {TUNE: [], REPORT: []} for b in BASELINE_NAMES}
        for q in bench.questions:
            split = bench.split(q.qid)
            reply = ask(engine, q, params.get("evidence_k", options.k), profile, params.get(MAX_TOKENS))
            outcome = reply_outcome(q, reply)
            mine[split].append(outcome)
            for b in BASELINE_NAMES:
                theirs[b][split].append(baseline_outcome(q, rankings[q.qid][b], outcome.tokens))
            on_question()
        rows[name] = {
            "what": what,
            "splits": {
                split: {
                    "memstream": summarize(mine[split]),
                    "baselines": {b: summarize(theirs[b][split]) for b in BASELINE_NAMES},
                }
                for split in (TUNE, REPORT)
                if mine[split]
            },
        }
    return {
        "bench": "ablate",
        "commit": source_commit(),
        "run": str(options.run),
        "k": options.k,
        "adaptive_budget": options.adaptive_budget,
        "questions": {s: sum(1 for q in bench.questions if bench.split(q.qid) == s) for s in (TUNE, REPORT)},
        "variants": rows,
    }


def run_ablation_bench(options: AblationOptions, *, on_question: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Open the run's stores (its workers must be stopped) and ablate."""
    import contextlib

    from memstream.adapters import open_existing_store
    from memstream.adapters.st_embedder import SentenceTransformerEmbedder
    from memstream.bench.deployment import Deployment
    from memstream.bench.retrieval import _query_options, baseline_store, sentence_baseline_store
    from memstream.config import Settings
    from memstream.streams import runtime

    bench = locomo_set(options.data)
    folder = options.run / "deployment"
    if not (folder / Deployment.MANIFEST).exists():
        raise FileNotFoundError(f"{folder} holds no deployment: give a finished `memstream bench locomo --out` folder")
    # Only the store is read (no broker needed): the deployment's data folder is where it lives.
    settings = Settings(data_dir=folder)
    runtime.apply_torch_threads(settings)
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    turns = [t for ts in bench.conversations.values() for t in ts]
    with contextlib.ExitStack() as opened:
        store = opened.enter_context(contextlib.closing(open_existing_store(settings)))
        whole = opened.enter_context(contextlib.closing(baseline_store(options.run / "baseline", turns, embedder)))
        sentences = opened.enter_context(
            contextlib.closing(sentence_baseline_store(options.run / SENTENCE_STORE, turns, embedder))
        )
        return run_ablation(
            options, bench, store, whole, sentences, embedder, _query_options(settings), on_question=on_question
        )


def chosen_variants(options: AblationOptions) -> dict[str, tuple[str, dict[str, Any], str | None]]:
    every = {**VARIANTS, **fixed_k_variants(), **budget_variants(), **adaptive_variants(options.adaptive_budget)}
    if not options.only:
        return every
    every.update({name: (name, {"graph": name}, None) for name in GRAPH_GRID})  # only when asked for
    return {n: v for n, v in every.items() if n == "memstream" or any(o in n for o in options.only)}


def variant_count(options: AblationOptions) -> int:
    return len(chosen_variants(options))


def plot_budget(result: dict[str, Any], out: Path, split: str = REPORT) -> Path:
    """Recall against evidence tokens on ``split``: fixed K (the configured engine at K = 5, 10, 20,
    40), the adaptive policy at each drop-off, and the RRF sentence baseline at the fixed-K tokens."""
    plt = pyplot()

    rows = result["variants"]

    def point(name: str, who: str = "memstream") -> tuple[float, float]:
        r = rows[name]["splits"][split]
        figures = r["memstream"] if who == "memstream" else r["baselines"][who]
        return figures["tokens"], figures["evidence_recall"]

    fixed = sorted([point("memstream"), *(point(f"fixed K={k}") for k in FIXED_KS)], key=lambda p: p[0])
    fixed_names = ["memstream", *(f"fixed K={k}" for k in FIXED_KS)]
    baseline = sorted((point(n, "rrf_sentences") for n in fixed_names), key=lambda p: p[0])
    adaptive = sorted(point(n) for n in rows if n.startswith("adaptive"))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(*zip(*fixed), "o-", label="memstream, fixed K (5, 10, 20, 40)")
    ax.plot(*zip(*adaptive), "s--", label="memstream, adaptive (drop-off 0.7 … 0.3)")
    ax.plot(*zip(*baseline), "^:", label="RRF over sentences of the raw turns, same tokens")
    ax.set_xlabel("evidence tokens per question")
    ax.set_ylabel("evidence recall")
    ax.set_title(f"LoCoMo dev, {split} split ({result['questions'][split]} questions)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    return save_figure(plt, fig, out)
