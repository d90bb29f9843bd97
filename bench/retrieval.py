"""Evidence recall per access profile against plain top-K baselines, and query latency.

LoCoMo conversations go through the real Kafka pipeline (extractive mode). Then every category 1–4
question is answered (evidence only, no LLM) by the query engine over the resulting store, once per
method: adaptive (the rule planner picks the profile), Lookup, Compose and Replay forced; in the same
run the baselines rank raw turns (dense, BM25) and keep as many as fit the adaptive context tokens
of that question. Recall is the share of gold dia_ids inside the provenance of the returned evidence.
Latency: the engine in process (retrieval), request to reply over Kafka (reply), both again after
the store is grown with synthetic cards to ``scale_cards``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from memstream.bench.deploy import deploy_worker
from memstream.bench.plots import pyplot, save_figure
from memstream.bench.queries import ask_for_evidence, bench_query
from memstream.bench.scoring import evidence_recall, percentile, spread, take_within_budget
from memstream.client import AsyncMemoryClient
from memstream.config import Settings
from memstream.datasets import LocomoSample, load_locomo, locomo_turns
from memstream.ports import Embedder, StoreFilter, StorePoint, VectorStore
from memstream.processors.ids import point_id
from memstream.processors.query.engine import QueryEngine, QueryOptions
from memstream.processors.query.retrieve import RetrievalParams, discriminative
from memstream.processors.timeparse import parse_locomo_datetime
from memstream.processors.tokens import count_tokens
from memstream.processors.write.index import CARDS, SCENES, TRIGGERS, TURNS
from memstream.schemas import Query, Reply, Turn
from memstream.streams import runtime

TENANT = "bench"
METHODS = ("adaptive", "lookup", "compose", "replay")
BASELINES = ("dense_topk", "bm25_topk")


@dataclass
class RetrievalOptions:
    data: Path
    conversations: Sequence[str] = ()
    categories: Sequence[int] = (1, 2, 3, 4)
    reply_queries: int = 100  # over Kafka, per store size
    scale_cards: int = 100_000  # 0 = no size test
    sweep_k: Sequence[int] = (5, 10, 20, 40, 60)  # recall against context tokens; () = no sweep
    plot: Path | None = None  # PNG of the sweep
    workdir: Path = Path(".data/bench/retrieval")


@dataclass(frozen=True)
class Question:
    conversation_id: str
    text: str
    category: int
    gold: tuple[str, ...]
    asked_at: datetime


def load_questions(samples: Sequence[LocomoSample], categories: Sequence[int]) -> list[Question]:
    """Category 1–4 questions with gold evidence, asked the day after their conversation's last session."""
    out = []
    for sample in samples:
        last = max((parse_locomo_datetime(d) for _, d, _ in sample.sessions), default=datetime.now(timezone.utc))
        for qa in sample.qa:
            if qa.category in categories and qa.evidence:
                out.append(
                    Question(sample.sample_id, qa.question, qa.category, tuple(qa.evidence), last + timedelta(days=1))
                )
    return out


def query_for(q: Question, profile: str) -> Query:
    return bench_query(q, reply_topic="bench.replies", profile=profile)


@dataclass
class Outcome:
    recall: float
    context_tokens: int
    provenance_turns: float  # per evidence item


def reply_outcome(q: Question, reply: Reply) -> Outcome:
    provenance = [t for e in reply.evidence for t in e.turn_ids]
    per_item = len(provenance) / len(reply.evidence) if reply.evidence else 0.0
    return Outcome(evidence_recall(q.gold, provenance), reply.context_tokens, per_item)


def baseline_outcome(q: Question, hits: Sequence[Any], budget: int) -> Outcome:
    texts = [f"{h.payload['speaker']}: {h.payload['text']}" for h in hits]
    keep = take_within_budget(texts, budget, count_tokens)
    provenance = [h.payload["turn_id"] for h in hits[:keep]]
    return Outcome(
        evidence_recall(q.gold, provenance), sum(count_tokens(t) for t in texts[:keep]), 1.0 if keep else 0.0
    )


def baseline_outcomes(
    q: Question, baseline: VectorStore, embedder: Embedder, budget: int, *, limit: int
) -> dict[str, Outcome]:
    """Dense and BM25 top-K over the raw turns of the question's conversation, within ``budget`` tokens."""
    scope = StoreFilter(equals={"conversation_id": q.conversation_id})
    dense = baseline.search(TURNS, TENANT, embedder.embed([q.text])[0], where=scope, limit=limit)
    sparse = baseline.search_text(TURNS, TENANT, q.text, where=scope, limit=limit)
    return {"dense_topk": baseline_outcome(q, dense, budget), "bm25_topk": baseline_outcome(q, sparse, budget)}


def summarize(outcomes: Sequence[Outcome]) -> dict[str, float]:
    n = max(len(outcomes), 1)
    return {
        "evidence_recall": round(sum(o.recall for o in outcomes) / n, 4),
        "context_tokens": round(sum(o.context_tokens for o in outcomes) / n, 1),
        "provenance_turns_per_evidence": round(sum(o.provenance_turns for o in outcomes) / n, 3),
        "questions": len(outcomes),
    }


def evaluate(
    engine: QueryEngine,
    baseline: VectorStore,
    embedder: Embedder,
    questions: Sequence[Question],
    progress: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Every method and baseline on every question; recall tables and in-process retrieval latency.

    ``baseline`` holds the raw turns as a plain RAG system indexes them (see :func:`baseline_store`)."""
    results: dict[str, list[tuple[int, Outcome]]] = {m: [] for m in (*METHODS, *BASELINES)}
    latencies: list[float] = []
    profiles: dict[str, int] = {}
    for q in questions:
        for method in METHODS:
            t0 = time.perf_counter()
            reply = engine.run(query_for(q, "auto" if method == "adaptive" else method))
            if method == "adaptive":
                latencies.append((time.perf_counter() - t0) * 1000.0)
                profiles[reply.access_profile or "?"] = profiles.get(reply.access_profile or "?", 0) + 1
                budget = max(reply.context_tokens, 1)
            results[method].append((q.category, reply_outcome(q, reply)))
        for name, outcome in baseline_outcomes(q, baseline, embedder, budget, limit=50).items():
            results[name].append((q.category, outcome))
        progress()
    categories = sorted({q.category for q in questions})
    return {
        "overall": {m: summarize([o for _, o in rows]) for m, rows in results.items()},
        "per_category": {
            str(c): {m: summarize([o for cat, o in rows if cat == c]) for m, rows in results.items()}
            for c in categories
        },
        "adaptive_profiles": profiles,
        "retrieval_p50_ms": round(percentile(latencies, 50), 2),
        "retrieval_p99_ms": round(percentile(latencies, 99), 2),
    }


def sweep(
    engine: QueryEngine,
    baseline: VectorStore,
    embedder: Embedder,
    questions: Sequence[Question],
    ks: Sequence[int],
    progress: Callable[[], None] = lambda: None,
) -> list[dict[str, Any]]:
    """Recall against context tokens as K grows: adaptive, and the baselines at its tokens."""
    rows = []
    for k in ks:
        outcomes: dict[str, list[Outcome]] = {"adaptive": [], "dense_topk": [], "bm25_topk": []}
        for q in questions:
            reply = engine.run(query_for(q, "auto").model_copy(update={"k": k}))
            outcomes["adaptive"].append(reply_outcome(q, reply))
            for name, outcome in baseline_outcomes(
                q, baseline, embedder, max(reply.context_tokens, 1), limit=max(50, 4 * k)
            ).items():
                outcomes[name].append(outcome)
            progress()
        rows.append({"k": k, **{m: summarize(o) for m, o in outcomes.items()}})
    return rows


def plot_sweep(rows: Sequence[dict[str, Any]], out: Path, title: str) -> Path:
    """Evidence recall against context tokens per question, one line per method."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, style in (("adaptive", "o-"), ("dense_topk", "s--"), ("bm25_topk", "^--")):
        xs = [row[method]["context_tokens"] for row in rows]
        ys = [row[method]["evidence_recall"] for row in rows]
        ax.plot(xs, ys, style, label=method)
        if method == "adaptive":
            for row, x, y in zip(rows, xs, ys):
                ax.annotate(f"K={row['k']}", (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xlabel("context tokens per question")
    ax.set_ylabel("evidence recall (gold dia_ids in provenance)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title, fontsize=10)
    return save_figure(plt, fig, out)


def baseline_turn_text(turn: Turn) -> str:
    """What a plain RAG baseline indexes per whole turn: the speaker and the words (the speaker's name
    is often what a question names), then each image caption, which is part of what the turn says
    (memstream's extractive cards get them too)."""
    return f"{turn.speaker}: {turn.text}" + "".join(f" (shared an image: {c})" for c in turn.image_captions)


def baseline_sentence_chunks(turn: Turn) -> list[str]:
    """What a sentence-level baseline indexes per turn: the sentences the extractive cards are cut
    into (:func:`memstream.processors.write.extract.card_sentences`), each as ``speaker: sentence``, and one
    ``speaker: shared an image: caption`` per image caption, exactly the texts of the turn's cards.
    At equal tokens, a baseline of sentences covers as many turns as memstream's cards can."""
    from memstream.processors.write.extract import card_sentences

    return [f"{turn.speaker}: {s}" for s in card_sentences(turn.text)] + [
        f"{turn.speaker}: shared an image: {c}" for c in turn.image_captions
    ]


def _whole_turn(turn: Turn) -> list[str]:
    return [baseline_turn_text(turn)]


def chunk_store(
    path: Path,
    turns: Sequence[Turn],
    embedder: Embedder,
    chunks: Callable[[Turn], list[str]],
    *,
    kind: str,
    batch: int = 256,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> VectorStore:
    """The turns cut by ``chunks`` in their own store (collection ``turns``), dense and BM25 over each
    chunk's text; every point names its turn (``turn_id``) and carries its text (``chunk_text``).

    Built a conversation at a time, in batches of ``batch`` chunks, and resumable: a conversation
    whose chunks are all there (and were written with ``chunk_text``) is skipped, so a run interrupted
    while embedding (LongMemEval: millions of tokens) continues where it stopped. ``progress`` gets
    the conversations done of the total."""
    from memstream.adapters.qdrant_edge_store import QdrantEdgeStore

    store = QdrantEdgeStore(path)
    store.ensure_collections([TURNS], embedder.dim)
    conversations: dict[tuple[str, str], list[Turn]] = {}
    for t in turns:
        conversations.setdefault((t.tenant_id, t.conversation_id), []).append(t)
    for done, ((tenant, conversation), its_turns) in enumerate(conversations.items()):
        progress(done, len(conversations))
        units = [(t, i, text) for t in its_turns for i, text in enumerate(chunks(t))]
        scope = StoreFilter(equals={"conversation_id": conversation})
        if store.count(TURNS, tenant, where=scope) >= len(units) and all(
            "chunk_text" in h.payload for h in store.scroll(TURNS, tenant, where=scope, limit=1)
        ):
            continue  # built by an earlier run over these turns (a resumed benchmark)
        for j in range(0, len(units), batch):
            part = units[j : j + batch]
            vectors = embedder.embed([text for _, _, text in part])
            store.upsert(
                TURNS,
                [
                    StorePoint(
                        point_id(kind, t.tenant_id, t.conversation_id, [t.turn_id], "" if i == 0 else str(i)),
                        v.tolist(),
                        {
                            "tenant_id": t.tenant_id,
                            "conversation_id": t.conversation_id,
                            "turn_id": t.turn_id,
                            "session_id": t.session_id,
                            "speaker": t.speaker,
                            "text": t.text,
                            "chunk": i,
                            "chunk_text": text,
                        },
                        text,
                    )
                    for (t, i, text), v in zip(part, vectors)
                ],
            )
    progress(len(conversations), len(conversations))
    return store


def baseline_store(path: Path, turns: Sequence[Turn], embedder: Embedder, *, batch: int = 256) -> VectorStore:
    """The raw turns in their own store, dense and BM25 over :func:`baseline_turn_text`, one point
    per turn."""
    return chunk_store(path, turns, embedder, _whole_turn, kind="baseline", batch=batch)


def sentence_baseline_store(
    path: Path,
    turns: Sequence[Turn],
    embedder: Embedder,
    *,
    batch: int = 256,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> VectorStore:
    """The raw turns' sentences in their own store (:func:`baseline_sentence_chunks`), one point per
    sentence or image caption, embedded with the same model as everything else."""
    return chunk_store(
        path, turns, embedder, baseline_sentence_chunks, kind="baseline-sentence", batch=batch, progress=progress
    )


TRIGGER_THRESHOLDS = tuple(round(0.30 + 0.05 * i, 2) for i in range(11))


def calibrate_triggers(
    store: VectorStore,
    embedder: Embedder,
    questions: Sequence[Question],
    params: RetrievalParams,
    thresholds: Sequence[float] = TRIGGER_THRESHOLDS,
) -> dict[str, Any]:
    """How trustworthy a trigger's similarity is, per threshold: of the hosts it would promote, the
    share that holds a gold turn (precision), and the share of questions that gain a gold turn through
    a promotion (coverage). The threshold is chosen where their F1 peaks."""
    promoted = {t: 0 for t in thresholds}
    useful = {t: 0 for t in thresholds}
    helped = {t: 0 for t in thresholds}
    for q in questions:
        vector = embedder.embed([q.text])[0]
        scope = StoreFilter(equals={"conversation_id": q.conversation_id})
        hits = discriminative(
            store.search(TRIGGERS, TENANT, vector, where=scope, limit=params.trigger_hits), params.trigger_max_hosts
        )
        hosts = {h.payload["host_id"] for h in hits}
        provenance = (
            {
                h.id: set(h.payload.get("turn_ids", []))
                for collection in (CARDS, SCENES)
                for h in store.scroll(
                    collection,
                    TENANT,
                    where=StoreFilter(
                        equals={"conversation_id": q.conversation_id},
                        any_of={"card_id" if collection == CARDS else "scene_id": list(hosts)},
                    ),
                    limit=len(hosts) + 1,
                )
            }
            if hosts
            else {}
        )
        for t in thresholds:
            chosen = {h.payload["host_id"] for h in hits if h.score >= t}
            good = [host for host in chosen if provenance.get(host, set()) & set(q.gold)]
            promoted[t] += len(chosen)
            useful[t] += len(good)
            helped[t] += bool(good)
    table = []
    for t in thresholds:
        precision = useful[t] / promoted[t] if promoted[t] else 0.0
        coverage = helped[t] / len(questions) if questions else 0.0
        f1 = 2 * precision * coverage / (precision + coverage) if precision + coverage else 0.0
        table.append(
            {
                "threshold": t,
                "promoted_per_question": round(promoted[t] / max(len(questions), 1), 2),
                "precision": round(precision, 4),
                "coverage": round(coverage, 4),
                "f1": round(f1, 4),
            }
        )
    best = max(table, key=lambda row: row["f1"])
    return {"table": table, "best_threshold": best["threshold"], "configured": params.trigger_threshold}


def retrieval_latency(engine: QueryEngine, questions: Sequence[Question]) -> list[float]:
    out = []
    for q in questions:
        t0 = time.perf_counter()
        engine.run(query_for(q, "auto"))
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def synthetic_cards(real: Sequence[Any], target: int, *, seed: int = 7, batch: int = 1000) -> Iterator[list[Any]]:
    """Batches of synthetic cards up to ``target`` in all (real ones included): each a real card's
    vector with noise, its words shuffled, its conversation's payload; drawn from ``real`` sorted by
    id, so two stores with the same real cards get the same synthetic ones."""
    real = sorted(real, key=lambda h: str(h.id))
    missing = target - len(real)
    if missing <= 0 or not real:
        return
    rng = np.random.default_rng(seed)
    made = 0
    while made < missing:
        points: list[StorePoint] = []
        for j in rng.integers(0, len(real), size=min(batch, missing - made)):
            source = real[int(j)]
            vector = np.asarray(source.vector, dtype=np.float32) + rng.normal(0, 0.04, size=len(source.vector))
            vector /= np.linalg.norm(vector)
            words = str(source.payload.get("text", "")).split()
            rng.shuffle(words)
            card_id = point_id("synthetic", TENANT, "", [], str(made + len(points)))
            text = " ".join(words)
            payload = {
                **source.payload,
                "card_id": card_id,
                "text": text,
                "synthetic": True,
                "entity_triggers": [],
                "bridge_triggers": [],
            }
            points.append(StorePoint(card_id, vector.tolist(), payload, text))
        made += len(points)
        yield points


def grow_store(
    store: VectorStore,
    target_cards: int,
    *,
    seed: int = 7,
    batch: int = 1000,
    progress: Callable[[int], None] = lambda n: None,
) -> int:
    """Add synthetic cards (:func:`synthetic_cards`) up to ``target_cards``.

    They spread over the real conversations, so every query filters through its share of them.
    Returns how many were added.
    """
    real = store.scroll(CARDS, TENANT, limit=10**7, with_vectors=True)
    added = 0
    for points in synthetic_cards(real, target_cards, seed=seed, batch=batch):
        store.upsert(CARDS, points)
        added += len(points)
        progress(len(points))
    return added


async def _reply_latency(settings: Settings, questions: Sequence[Question]) -> tuple[list[float], list[float]]:
    """Request-to-reply milliseconds over Kafka per question, and the worker's own time for each
    (the reply's ``total_ms``): the difference is transport, queueing and the worker's runtime."""
    out, worker = [], []
    async with AsyncMemoryClient(settings) as client:
        for q in questions[:3]:  # warm-up: first fetches, model load in the worker
            await ask_for_evidence(client, q, 120)
        for q in questions:
            t0 = time.perf_counter()
            reply = await ask_for_evidence(client, q, 60)
            out.append((time.perf_counter() - t0) * 1000.0)
            worker.append(reply.latency_ms.get("total_ms", 0.0))
    return out, worker


def run_retrieval_bench(
    options: RetrievalOptions,
    *,
    status: Callable[[str], None] = lambda s: None,
    on_sent: Callable[[Any], None] | None = None,
    on_question: Callable[[], None] = lambda: None,
    on_grow: Callable[[int], None] = lambda n: None,
) -> dict[str, Any]:
    from memstream.adapters.st_embedder import SentenceTransformerEmbedder

    base = Settings()
    samples = load_locomo(options.data)
    if options.conversations:
        samples = [s for s in samples if s.sample_id in set(options.conversations)]
    if not samples:
        raise ValueError(f"no conversations to ingest from {options.data}")
    turns = [t for s in samples for t in locomo_turns(s, tenant_id=TENANT)]
    questions = load_questions(samples, options.categories)
    sampled = spread(questions, options.reply_queries)  # every conversation and category represented
    result: dict[str, Any] = {
        "data": str(options.data),
        "conversations": [s.sample_id for s in samples],
        "turns": len(turns),
        "questions": len(questions),
        "mode": "extractive",
    }
    env = {"MEMSTREAM_EXTRACT_MODE": "extractive", "MEMSTREAM_LLM_BASE_URL": "", "MEMSTREAM_COMPRESSOR_MODEL": ""}
    with contextlib.ExitStack() as running:
        deployment = deploy_worker(running, base, options.workdir, env, status=status)
        status(f"streaming {len(turns)} turns")
        t0 = time.perf_counter()
        deployment.produce(turns, on_sent=on_sent)
        deployment.drain(timeout_s=3600)
        result["ingest_s"] = round(time.perf_counter() - t0, 1)
        status(f"asking {len(sampled)} questions over Kafka")
        replies, worker = asyncio.run(_reply_latency(deployment.settings, sampled))
        result["reply_p50_ms"] = round(percentile(replies, 50), 2)
        result["reply_p99_ms"] = round(percentile(replies, 99), 2)
        result["reply_worker_p50_ms"] = round(percentile(worker, 50), 2)
        deployment.stop_workers()

        runtime.apply_torch_threads(deployment.settings)
        embedder = SentenceTransformerEmbedder.from_settings(deployment.settings)
        services_options = _query_options(deployment.settings)
        status("indexing the raw turns for the baselines")
        baseline = running.enter_context(
            contextlib.closing(baseline_store(deployment.settings.data_dir / "baseline-turns", turns, embedder))
        )
        with deployment.store() as store:
            result["cards"] = store.count(CARDS, TENANT)
            engine = QueryEngine(store, embedder, None, services_options)
            status(f"answering {len(questions)} questions × {len(METHODS)} methods + {len(BASELINES)} baselines")
            result |= evaluate(engine, baseline, embedder, questions, progress=on_question)
            if options.sweep_k:
                status(f"recall against context tokens, K in {list(options.sweep_k)}")
                result["sweep"] = sweep(engine, baseline, embedder, questions, options.sweep_k, progress=on_question)
                if options.plot:
                    result["plot"] = str(
                        plot_sweep(
                            result["sweep"],
                            options.plot,
                            f"LoCoMo {', '.join(result['conversations'])}: "
                            f"{len(questions)} questions, extractive memories",
                        )
                    )
            status("calibrating the trigger threshold")
            result["trigger_calibration"] = calibrate_triggers(store, embedder, questions, services_options.retrieval)
            if options.scale_cards:
                status(f"growing the store to {options.scale_cards} cards")
                result["synthetic_cards"] = grow_store(store, options.scale_cards, progress=on_grow)
                optimize = getattr(store, "optimize", None)
                if optimize is not None:
                    status("building the HNSW index (optimize)")
                    t0 = time.perf_counter()
                    optimize()
                    result["optimize_s"] = round(time.perf_counter() - t0, 1)
                result["cards_scaled"] = store.count(CARDS, TENANT)
                status(f"retrieval latency at {result['cards_scaled']} cards")
                scaled = retrieval_latency(engine, sampled)
                result["retrieval_p50_ms_100k"] = round(percentile(scaled, 50), 2)
                result["retrieval_p99_ms_100k"] = round(percentile(scaled, 99), 2)
        if options.scale_cards:
            status("reply latency over Kafka at the grown store")
            deployment.start_worker("bench-scaled")
            replies, worker = asyncio.run(_reply_latency(deployment.settings, sampled))
            result["reply_p50_ms_100k"] = round(percentile(replies, 50), 2)
            result["reply_p99_ms_100k"] = round(percentile(replies, 99), 2)
            result["reply_worker_p50_ms_100k"] = round(percentile(worker, 50), 2)
            deployment.stop_workers()
    return result


def _query_options(settings: Settings) -> QueryOptions:
    from memstream.streams.services import Services

    return Services(settings).query_options


__all__ = [
    "RetrievalOptions",
    "baseline_turn_text",
    "baseline_sentence_chunks",
    "baseline_store",
    "sentence_baseline_store",
    "chunk_store",
    "Question",
    "load_questions",
    "evaluate",
    "grow_store",
    "run_retrieval_bench",
    "METHODS",
    "BASELINES",
]
