"""``memstream bench tracing-overhead``: what tracing costs the write path: ``memstream bench ingest``
(extractive, the real broker and worker) with tracing off on this checkout, off on the release before
tracing came (a git revision checked out beside it), and on at sampling 1.0 into a local Jaeger; the
three alternate, round after round, so that the machine's drift falls on all three. Writes the
turns/s of every run and the ratios of the medians.

The release before runs from a ``git worktree`` of ``--before`` with this checkout's installed
packages (a virtual environment that sees them and maps memstream's packages to the worktree).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from memstream.bench.jaeger import local_jaeger
from memstream.streams.runtime import REPO_ROOT

SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
OTLP_PORT, QUERY_PORT = 24518, 26886


def before_checkout(rev: str, where: Path) -> Path:
    """A worktree of ``rev`` and a python that runs memstream from it (the installed dependencies)."""
    subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(where), rev], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / ".venv")], check=True)
    site = where / ".venv" / SITE.relative_to(sys.prefix)
    (site / "checkout-deps.pth").write_text(f"{SITE}\n")  # the packages, not their .pth hooks
    [finder] = SITE.glob("__editable___memstream_*_finder.py")
    (site / "memstream_before_finder.py").write_text(finder.read_text().replace(str(REPO_ROOT), str(where)))
    (site / "memstream_before.pth").write_text("import memstream_before_finder; memstream_before_finder.install()\n")
    return where / ".venv" / "bin" / "python"


def ingest(python: Path, cwd: Path, data: Path, conversations: str, out: Path, env: dict[str, str]) -> dict[str, Any]:
    command = [str(python), "-m", "memstream.streams.cli", "bench", "ingest", "--data", str(data)]
    command += ["--conversations", conversations]
    subprocess.run([*command, "--json", str(out)], cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def paired(runs: list[dict[str, Any]], against: list[dict[str, Any]]) -> float:
    """The median over rounds of the ratio of two configurations' turns/s in the same round."""
    return round(statistics.median(a["turns_per_s"] / b["turns_per_s"] for a, b in zip(runs, against)), 3)


def summary(
    runs: dict[str, list[dict[str, Any]]], *, data: Path, conversations: str, rounds: int, before: str, head: str
) -> dict[str, Any]:
    """The runs of each configuration (before_off, off, on), their medians and the ratios."""
    median = {name: statistics.median(r["turns_per_s"] for r in rs) for name, rs in runs.items()}
    return {
        "what": "memstream bench ingest, extractive; turns/s of every run; medians and their ratios",
        "data": str(data),
        "conversations": conversations,
        "rounds": rounds,
        "before": before,
        "head": head,
        "sampling": "every trace (OTEL_TRACES_SAMPLER unset: parentbased_always_on), exported to a local Jaeger",
        "runs": runs,
        "median_turns_per_s": median,
        "off_vs_before": round(median["off"] / median["before_off"], 3),
        "on_vs_off": round(median["on"] / median["off"], 3),
        # Per round (the three ran back to back): drift between rounds cancels out.
        "paired_off_vs_before": paired(runs["off"], runs["before_off"]),
        "paired_on_vs_off": paired(runs["on"], runs["off"]),
    }


def run_tracing_overhead(
    *, before: str, rounds: int, conversations: str, data: Path, say: Callable[[str], None] = print
) -> dict[str, Any]:
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    traced_env = {**base_env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{OTLP_PORT}"}
    runs: dict[str, list[dict[str, Any]]] = {"before_off": [], "off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="memstream-overhead-") as tmp:
        release = Path(tmp) / "before"
        before_python = before_checkout(before, release)
        try:
            with local_jaeger(OTLP_PORT, QUERY_PORT, base_env):
                for round_ in range(rounds):
                    for name, python, cwd, env in (
                        ("before_off", before_python, release, base_env),
                        ("off", Path(sys.executable), REPO_ROOT, base_env),
                        ("on", Path(sys.executable), REPO_ROOT, traced_env),
                    ):
                        out = Path(tmp) / f"{name}-{round_}.json"
                        result = ingest(python, cwd, data.resolve(), conversations, out, env)
                        runs[name].append({"turns": result["turns"], "turns_per_s": result["ingest_turns_per_s"]})
                        say(f"round {round_ + 1} {name}: {result['ingest_turns_per_s']} turns/s")
        finally:
            subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(release)], check=False)
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return summary(runs, data=data, conversations=conversations, rounds=rounds, before=before, head=head.stdout.strip())
