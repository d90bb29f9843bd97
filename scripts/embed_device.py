"""The embedder's cost on one device (docs/capacity.md): memstream's torch embedder
(``SentenceTransformerEmbedder``, what ``MEMSTREAM_EMBEDDING_BACKEND=torch`` and
``MEMSTREAM_EMBEDDING_DEVICE`` build) timed by batch size and precision, one text's latency, and how
closely its vectors follow a reference computed elsewhere (the CPU's float32 vectors).

Two steps, so the measuring step needs only numpy, torch and sentence-transformers (a GPU machine
without the rest of memstream's dependencies):

    # here: the texts (LoCoMo turns and their sentences) and the CPU's vectors of the first 1,000
    .venv/bin/python scripts/embed_device.py prepare --data ../shared/data/locomo/locomo_dev.json --out DIR
    # there (or here, with --device cpu):
    python scripts/embed_device.py measure --texts DIR/texts.json --reference DIR/reference.npy \\
        --model MODEL_FOLDER --device cuda --precisions float32,float16 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # memstream/ of this checkout, uninstalled

REFERENCE_TEXTS = 1000


def prepare(data: Path, out: Path, model: str | None) -> None:
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
    print(f"{len(texts)} texts, reference vectors of the first {REFERENCE_TEXTS} ({embedder.name}, cpu float32)")


def passes(embed: Any, texts: list[str], repeats: int) -> float:
    """Texts per second: the best of ``repeats`` passes (the first call warms up)."""
    embed(texts[:256])
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        embed(texts)
        best = min(best, time.perf_counter() - started)
    return len(texts) / best


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from memstream.adapters.st_embedder import SentenceTransformerEmbedder

    torch.set_num_threads(args.threads)
    texts: list[str] = json.loads(Path(args.texts).read_text())[: args.limit or None]
    reference = np.load(args.reference) if args.reference else None
    cuda = args.device.startswith("cuda")
    result: dict[str, Any] = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "cpu_threads": args.threads,
        "texts": len(texts),
        "mean_chars": round(statistics.fmean(len(t) for t in texts), 1),
        "precisions": {},
    }
    for precision in args.precisions.split(","):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        embedder = SentenceTransformerEmbedder(
            args.model, backend="torch", device=args.device, precision=precision, cache_size=0
        )
        row: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 2), "texts_per_s": {}}
        for batch in (int(b) for b in args.batches.split(",")):
            embedder.batch_size = batch
            subset = texts if batch >= 16 else texts[: args.small]
            row["texts_per_s"][str(batch)] = round(passes(embedder.embed_uncached, subset, args.repeats), 1)
            print(f"{precision} batch {batch}: {row['texts_per_s'][str(batch)]} texts/s", flush=True)
        latencies = []
        for text in texts[: args.single]:
            t0 = time.perf_counter()
            embedder.embed_uncached([text])
            latencies.append((time.perf_counter() - t0) * 1000)
        latencies.sort()
        row["one_text_ms"] = {
            "p50": round(statistics.median(latencies), 2),
            "p99": round(latencies[int(0.99 * (len(latencies) - 1))], 2),
        }
        if reference is not None:
            embedder.batch_size = 64
            vectors = embedder.embed_uncached(texts[: len(reference)])
            cosine = np.sum(vectors * reference, axis=1) / (
                np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1)
            )
            row["cosine_to_reference"] = {"mean": round(float(cosine.mean()), 6), "min": round(float(cosine.min()), 6)}
        if cuda:
            row["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        result["precisions"][precision] = row
        del embedder
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare")
    prep.add_argument("--data", type=Path, required=True, help="LoCoMo JSON")
    prep.add_argument("--out", type=Path, required=True)
    prep.add_argument("--model", default=None, help="embedding model (default: memstream's)")
    run = sub.add_parser("measure")
    run.add_argument("--texts", required=True)
    run.add_argument("--reference", default=None, help="vectors of the first texts, to compare with")
    run.add_argument("--model", default=None, help="embedding model name or folder (default: memstream's)")
    run.add_argument("--device", default="cpu")
    run.add_argument("--precisions", default="float32")
    run.add_argument("--batches", default="1,16,64,256")
    run.add_argument("--small", type=int, default=500, help="texts timed at batch sizes under 16")
    run.add_argument("--single", type=int, default=300, help="one-text calls timed for the latency")
    run.add_argument("--limit", type=int, default=0, help="only the first N texts (0 = all)")
    run.add_argument("--repeats", type=int, default=3)
    run.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    run.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.data, args.out, args.model)
        return
    result = measure(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
