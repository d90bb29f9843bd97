"""Embedding backends side by side (``memstream bench embed``): texts per second on the worker's
thread setting, how closely each backend's vectors follow torch's, and what a dense retriever finds
with each on LoCoMo questions: the raw turns' sentences (the texts the extractive cards are), top K
by cosine, one per turn, scored by evidence recall per split. A backend is worth switching to when
it is faster and its recall stays within noise of torch's on both splits."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from memstream.adapters.st_embedder import Backend, SentenceTransformerEmbedder
from memstream.config import Settings

from .cases import REPORT, TUNE, TUNE_CONVERSATIONS, BenchSet, locomo_set, score
from .retrieval import baseline_sentence_chunks

BACKENDS: tuple[Backend, ...] = ("torch", "onnx", "onnx-int8")


@dataclass(frozen=True)
class EmbedOptions:
    data: Path
    backends: tuple[Backend, ...] = BACKENDS
    k: int = 10
    batch_size: int = 64
    batch_tokens: int = 512  # the onnx backends' padded tokens per pass (Settings.embedding_batch_tokens)
    batch_tokens_grid: tuple[int, ...] = (0, 128, 256, 512, 1024, 2048)  # onnx, on the tune split's texts
    threads: int = 1
    repeats: int = 3  # timed passes over the texts; the best one counts (the machine is shared)


def corpus(bench: BenchSet) -> tuple[list[str], list[str], list[str]]:
    """Every sentence chunk of every turn: (texts, their turn ids, their conversation ids)."""
    texts, turn_ids, conversations = [], [], []
    for cid, turns in bench.conversations.items():
        for turn in turns:
            for chunk in baseline_sentence_chunks(turn):
                texts.append(chunk)
                turn_ids.append(turn.turn_id)
                conversations.append(cid)
    return texts, turn_ids, conversations


def top_turns(scores: np.ndarray, turn_ids: Sequence[str], k: int) -> list[str]:
    """The best-scored chunk's turn first, one chunk per turn, until ``k`` turns."""
    out: list[str] = []
    for i in np.argsort(-scores, kind="stable"):
        if turn_ids[i] not in out:
            out.append(turn_ids[i])
            if len(out) == k:
                break
    return out


def dense_recall(
    bench: BenchSet,
    vectors: np.ndarray,
    questions: np.ndarray,
    turn_ids: Sequence[str],
    conversations: Sequence[str],
    k: int,
) -> dict[str, float | None]:
    """Mean evidence recall of top-``k`` dense retrieval per split, each question in its own conversation."""
    per_split: dict[str, list[float]] = {TUNE: [], REPORT: []}
    rows = {cid: [i for i, c in enumerate(conversations) if c == cid] for cid in bench.conversations}
    for q, qv in zip(bench.questions, questions):
        if not q.retrieval_scored:
            continue
        mine = rows[q.conversation_id]
        ranked = top_turns(vectors[mine] @ qv, [turn_ids[i] for i in mine], k)
        per_split[bench.split(q.qid)].append(score(q, ranked)["evidence_recall"])
    return {split: round(statistics.fmean(v), 4) if v else None for split, v in per_split.items()}


def timed(encode: Callable[[list[str]], np.ndarray], texts: list[str], repeats: int) -> tuple[np.ndarray, float]:
    """The vectors, and the best of ``repeats`` passes in texts per second."""
    encode(texts[:64])  # warm-up: first-call allocations, lazy initialisation
    best = float("inf")
    vectors = np.zeros((0, 0), dtype=np.float32)
    for _ in range(repeats):
        started = time.perf_counter()
        vectors = encode(texts)
        best = min(best, time.perf_counter() - started)
    return vectors, len(texts) / best


def run_embed_bench(options: EmbedOptions, *, status: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    bench = locomo_set(options.data)
    texts, turn_ids, conversations = corpus(bench)
    questions = [q.text for q in bench.questions]
    settings = Settings()
    result: dict[str, Any] = {
        "bench": "embed",
        "data": str(options.data),
        "texts": len(texts),
        "mean_words": round(statistics.fmean(len(t.split()) for t in texts), 1),
        "questions": {split: sum(bench.split(q.qid) == split for q in bench.questions) for split in (TUNE, REPORT)},
        "k": options.k,
        "batch_size": options.batch_size,
        "batch_tokens": options.batch_tokens,
        "threads": options.threads,
        "backends": {},
    }
    reference: np.ndarray | None = None
    # torch first: the others are compared with its vectors
    order: list[Backend] = ["torch", *[b for b in options.backends if b != "torch"]]
    for backend in order:
        status(f"{backend}: loading (the ONNX backends export the model once)")
        started = time.perf_counter()
        embedder = SentenceTransformerEmbedder(
            settings.embedding_model,
            batch_size=options.batch_size,
            batch_tokens=options.batch_tokens,
            backend=backend,
            threads=options.threads,
        )
        load_s = time.perf_counter() - started
        status(f"{backend}: embedding {len(texts)} texts x {options.repeats}")
        vectors, per_s = timed(embedder.embed_uncached, texts, options.repeats)
        question_vectors = embedder.embed_uncached(questions)
        if reference is None:
            reference = vectors
        agreement = np.sum(vectors * reference, axis=1)
        result["backends"][backend] = {
            "load_s": round(load_s, 1),
            "texts_per_s": round(per_s, 1),
            "cosine_to_torch_mean": round(float(agreement.mean()), 5),
            "cosine_to_torch_min": round(float(agreement.min()), 5),
            "recall": dense_recall(bench, vectors, question_vectors, turn_ids, conversations, options.k),
        }
    torch_speed = result["backends"]["torch"]["texts_per_s"]
    for row in result["backends"].values():
        row["speedup"] = round(row["texts_per_s"] / torch_speed, 2)
    if "onnx" in options.backends and options.batch_tokens_grid:
        status("onnx: the padded-token budget per pass, on the tune split's turns and sentences")
        result["onnx_batch_tokens"] = batch_tokens_grid(bench, settings, options)
    return result


def batch_tokens_grid(bench: BenchSet, settings: Settings, options: EmbedOptions) -> dict[str, Any]:
    """onnx texts/s per padded-token budget (0 = ``batch_size`` texts a pass, whatever their length)
    over the tune conversations' whole turns and their sentences: where the default was chosen."""
    tune = sorted(bench.conversations)[:TUNE_CONVERSATIONS]
    turns = [t for cid in tune for t in bench.conversations[cid]]
    sets = {"turns": [t.text for t in turns], "sentences": [c for t in turns for c in baseline_sentence_chunks(t)]}
    out: dict[str, Any] = {"conversations": tune, "texts": {name: len(texts) for name, texts in sets.items()}}
    # One model: the budget is read at every pass.
    embedder = SentenceTransformerEmbedder(
        settings.embedding_model, batch_size=options.batch_size, backend="onnx", threads=options.threads
    )
    for budget in options.batch_tokens_grid:
        embedder.batch_tokens = budget
        out[str(budget)] = {
            f"{name}_per_s": round(timed(embedder.embed_uncached, texts, options.repeats)[1], 1)
            for name, texts in sets.items()
        }
    return out
