"""``memstream bench embed-device``: the embedder's cost on one device (docs/capacity.md): memstream's
torch embedder (``SentenceTransformerEmbedder``, what ``MEMSTREAM_EMBEDDING_BACKEND=torch`` and
``MEMSTREAM_EMBEDDING_DEVICE`` build) timed by batch size and precision, one text's latency, and how
closely its vectors follow a reference computed elsewhere (the CPU's float32 vectors).

Two steps, so the texts and the reference come from the dev data here and the measuring step runs
where the device is (memstream installed there, without the data):

    memstream bench embed-device prepare --data ../shared/data/locomo/locomo_dev.json --out DIR
    memstream bench embed-device measure --texts DIR/texts.json --reference DIR/reference.npy \\
        --model MODEL_FOLDER --device cuda --precisions float32,float16 --json OUT.json
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, cast

import numpy as np

REFERENCE_TEXTS = 1000


def prepare(data: Path, out: Path, model: str | None, *, say: Callable[[str], None] = print) -> None:
    """``out``/texts.json (the LoCoMo turns and their sentences) and ``out``/reference.npy (the CPU's
    float32 vectors of the first ``REFERENCE_TEXTS``)."""
    from memstream.adapters.st_embedder import SentenceTransformerEmbedder
    from memstream.bench.retrieval import baseline_sentence_chunks
    from memstream.datasets import load_locomo, locomo_turns

    texts: list[str] = []
    for sample in load_locomo(data):
        for turn in locomo_turns(sample, tenant_id="bench"):
            texts.append(turn.text)
            texts.extend(baseline_sentence_chunks(turn))
    out.mkdir(parents=True, exist_ok=True)
    (out / "texts.json").write_text(json.dumps(texts))
    embedder = SentenceTransformerEmbedder(model, backend="torch", device="cpu", cache_size=0)
    np.save(out / "reference.npy", embedder.embed_uncached(texts[:REFERENCE_TEXTS]))
    say(f"{len(texts)} texts, reference vectors of the first {REFERENCE_TEXTS} ({embedder.name}, cpu float32)")


def passes(embed: Any, texts: list[str], repeats: int) -> float:
    """Texts per second: the best of ``repeats`` passes (the first call warms up)."""
    embed(texts[:256])
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        embed(texts)
        best = min(best, time.perf_counter() - started)
    return len(texts) / best


@dataclass(frozen=True)
class DeviceOptions:
    texts: Path  # prepare's texts.json
    reference: Path | None = None  # prepare's reference.npy: vectors of the first texts, to compare with
    model: str | None = None  # embedding model name or folder (None: memstream's)
    device: str = "cpu"
    precisions: str = "float32"  # comma-separated: float32, float16
    batches: str = "1,16,64,256"  # comma-separated batch sizes
    small: int = 500  # texts timed at batch sizes under 16
    single: int = 300  # one-text calls timed for the latency
    limit: int = 0  # only the first N texts (0 = all)
    repeats: int = 3
    threads: int = 1  # torch CPU threads


def latency_ms(latencies: list[float]) -> dict[str, float]:
    """p50 and p99 of one-text call latencies (ms)."""
    ordered = sorted(latencies)
    return {"p50": round(statistics.median(ordered), 2), "p99": round(ordered[int(0.99 * (len(ordered) - 1))], 2)}


def cosine_to_reference(vectors: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """Mean and lowest cosine between each vector and its reference."""
    cosine = np.sum(vectors * reference, axis=1) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1))
    return {"mean": round(float(cosine.mean()), 6), "min": round(float(cosine.min()), 6)}


def measure(options: DeviceOptions, *, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every precision: its load time, texts/s at each batch size, one text's latency, its cosine to the reference."""
    import torch

    from memstream.adapters.st_embedder import Precision, SentenceTransformerEmbedder

    torch.set_num_threads(options.threads)
    texts: list[str] = json.loads(options.texts.read_text())[: options.limit or None]
    reference = np.load(options.reference) if options.reference else None
    cuda = options.device.startswith("cuda")
    result: dict[str, Any] = {
        "device": options.device,
        "device_name": torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "cpu_threads": options.threads,
        "texts": len(texts),
        "mean_chars": round(statistics.fmean(len(t) for t in texts), 1),
        "precisions": {},
    }
    for precision in options.precisions.split(","):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        embedder = SentenceTransformerEmbedder(
            options.model, backend="torch", device=options.device, precision=cast(Precision, precision), cache_size=0
        )
        row: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 2), "texts_per_s": {}}
        for batch in (int(b) for b in options.batches.split(",")):
            embedder.batch_size = batch
            subset = texts if batch >= 16 else texts[: options.small]
            row["texts_per_s"][str(batch)] = round(passes(embedder.embed_uncached, subset, options.repeats), 1)
            say(f"{precision} batch {batch}: {row['texts_per_s'][str(batch)]} texts/s")
        latencies = []
        for text in texts[: options.single]:
            t0 = time.perf_counter()
            embedder.embed_uncached([text])
            latencies.append((time.perf_counter() - t0) * 1000)
        row["one_text_ms"] = latency_ms(latencies)
        if reference is not None:
            embedder.batch_size = 64
            vectors = embedder.embed_uncached(texts[: len(reference)])
            row["cosine_to_reference"] = cosine_to_reference(vectors, reference)
        if cuda:
            row["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        result["precisions"][precision] = row
        del embedder
    return result
