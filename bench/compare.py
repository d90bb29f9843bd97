"""Runs of ``bench locomo`` / ``bench longmemeval`` side by side (``memstream bench compare``): ingest
speed and memstream's recall at every K of each run, against the first run given (the release the
others are measured against, in the same session on the same data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from memstream.bench.plots import pyplot, save_figure

RECALL = "evidence_recall"


def run_summary(result: dict[str, Any]) -> dict[str, Any]:
    """What a results.json says about ingest speed and memstream's recall at each K (every question)."""
    ingest = result["ingest"]
    commits = ingest.get("commits") or [result.get("commit")]
    splits = result.get("splits") or {}
    # Runs since the split rule report a headline split; over all questions is what every run has.
    sweep = splits["all"]["sweep"] if "all" in splits else result["sweep"]
    return {
        "commit": ",".join(c for c in commits if c),
        "data": result.get("data"),
        "turns": ingest["turns"],
        "ingest_s": ingest["seconds"],
        "turns_per_s": ingest["turns_per_s"],
        "recall_at_k": {str(row["k"]): row["memstream"][RECALL] for row in sweep},
        "store": ingest.get("store"),
    }


def compare(results: Sequence[dict[str, Any]], labels: Sequence[str]) -> dict[str, Any]:
    """Each run's summary, with its speedup and recall change against the first."""
    if len(results) != len(labels) or len(results) < 2:
        raise ValueError("give two runs or more, each with a label")
    runs = [run_summary(r) | {"label": label} for r, label in zip(results, labels)]
    first = runs[0]
    if any(run["turns"] != first["turns"] for run in runs):
        raise ValueError("the runs ingested different turns: not the same data")
    for run in runs:
        run["speedup"] = round(run["turns_per_s"] / first["turns_per_s"], 2)
        run["recall_change"] = {
            k: round(v - first["recall_at_k"][k], 4) for k, v in run["recall_at_k"].items() if k in first["recall_at_k"]
        }
    return {"bench": "compare", "baseline": first["label"], "runs": runs}


def load(paths: Sequence[Path]) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in paths]


def plot_compare(result: dict[str, Any], out: Path) -> Path:
    """Ingest turns/s per run (bars) beside recall against K per run (lines)."""
    plt = pyplot()

    runs = result["runs"]
    fig, (speed, recall) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [r["label"] for r in runs]
    bars = speed.bar(names, [r["turns_per_s"] for r in runs], color="#4c72b0")
    for bar, run in zip(bars, runs):
        speed.annotate(
            f"{run['turns_per_s']} ({run['speedup']}x)",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    speed.set_ylabel("ingest turns/s (one worker)")
    speed.set_title("ingest speed")
    for run in runs:
        ks = sorted(run["recall_at_k"], key=int)
        recall.plot([int(k) for k in ks], [run["recall_at_k"][k] for k in ks], "o-", label=run["label"])
    recall.set_xscale("log", base=2)
    recall.set_xlabel("evidence items per question (K)")
    recall.set_ylabel("evidence recall, every question")
    recall.set_title("memstream's recall")
    recall.grid(True, alpha=0.3)
    recall.legend(loc="lower right")
    return save_figure(plt, fig, out)
