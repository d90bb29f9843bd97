"""Where a worker's CPU goes: a py-spy profile (``py-spy record --subprocesses -f raw``, collapsed
stacks) folded into the parts a turn pays for (``memstream bench flame``).

Each sample of the worker process (``--process``, default the unsupervised worker) goes to the first
part whose marker one of its frames contains, in :data:`PARTS` order: a turn's embedding in the
segment stage is "segment: embedding", the same call from the index stage "index: embedding". py-spy
samples only threads that are running (not those waiting on a socket or a lock), so the shares are
shares of the CPU the worker used, not of wall time."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

# (part, markers): the first part with a marker in any frame of the stack takes the sample.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start-up (imports, model loading)", ("_find_and_load", "create_app", "__init__ (memstream/adapters/")),
    ("segment: attention pass", ("EncoderAttention.cohesion",)),
    ("segment: embedding (ONNX Runtime)", ("Segmenter._evaluate",)),
    ("index: embedding (ONNX Runtime)", ("OnnxEncoder.encode",)),
    ("index: vector store upserts (Qdrant Edge)", ("QdrantEdgeStore.", "qdrant_edge")),
    ("extract, STM, consolidation (Python)", ("streams/stages/extract.py", "streams/stages/stm.py", "consolidate")),
    ("Kafka client (aiokafka, faust)", ("aiokafka/", "faust/", "mode/")),
)
OTHER = "other Python (event loop, schemas, changelog)"
WORKER = "worker --no-supervise"  # the process that runs the stages (the supervisor only watches it)


def fold(lines: Iterable[str], *, process: str = WORKER, rate_hz: float = 50.0) -> dict[str, Any]:
    """The worker's samples per part (count, CPU seconds at ``rate_hz``, share)."""
    parts: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        owners = [i for i, f in enumerate(frames) if f.startswith("process ")]
        if not owners or process not in frames[owners[-1]]:
            continue
        mine = frames[owners[-1] + 1 :]
        parts[_part(mine)] += int(count)
    total = sum(parts.values())
    rows = {
        name: {"samples": n, "cpu_s": round(n / rate_hz, 1), "share": round(n / total, 3) if total else 0.0}
        for name, n in parts.most_common()
    }
    return {"process": process, "rate_hz": rate_hz, "samples": total, "cpu_s": round(total / rate_hz, 1), "parts": rows}


def _part(frames: list[str]) -> str:
    for name, markers in PARTS:
        if any(marker in frame for frame in frames for marker in markers):
            return name
    return OTHER


def fold_file(path: Path, **options: Any) -> dict[str, Any]:
    """``fold`` of a raw profile file (gzip-compressed when it ends in .gz)."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as f:
        return fold(f, **options)


def per_turn_ms(folded: dict[str, Any], turns: int) -> dict[str, float]:
    """CPU milliseconds per turn for each part (start-up excluded: it does not grow with turns)."""
    return {
        name: round(1000 * row["cpu_s"] / turns, 1)
        for name, row in folded["parts"].items()
        if not name.startswith("start-up")
    }
