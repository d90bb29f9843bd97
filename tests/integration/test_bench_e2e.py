"""``memstream bench locomo`` end to end, as a user runs it: the real broker, workers, store and
models; interrupted and resumed. The data are our own files (LoCoMo and LongMemEval format), so the
run is short. The runs with the local LLM server for the answers and the judge:
test_bench_e2e_llm.py (a module of its own, so make test's two workers run them side by side)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstream.bench.e2e_state import read_records
from memstream.config import Settings
from memstream.datasets import demo_conversation_path
from memstream.streams.runtime import REPO_ROOT

pytestmark = pytest.mark.integration

DEMO_LONGMEMEVAL = REPO_ROOT / "memstream" / "data" / "demo_longmemeval.json"


def bench(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "memstream.streams.cli", "bench", *args],
        cwd=str(REPO_ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},  # its step lines arrive as it prints them
    )


def finish(process: subprocess.Popen, timeout_s: float = 900) -> str:
    output, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, output[-4000:]
    return output


def state(out: Path) -> dict:
    return json.loads((out / "state.json").read_text()) if (out / "state.json").exists() else {}


def lines(out: Path) -> list[str]:
    return (out / "questions.jsonl").read_text().splitlines()


def worker_groups(parent: int) -> list[int]:
    """The workers ``parent`` started: each leads a process group of its own (its supervised child in it)."""
    groups = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == parent and b"worker" in cmdline:
            groups.append(int(stat.parent.name))
    return groups


def signal_groups(groups: list[int], signum: int) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(group, signum)


def wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)


def interrupted_while_draining(args: tuple[str, ...], out: Path) -> dict:
    """Run the bench; when it says it produces the conversation (its worker is ready by then), pause
    the worker, so no turn of it can be drained however late the interrupt lands, and SIGTERM the
    bench once the state file shows the conversation produced. Returns the state it left."""
    first = bench(*args)
    assert first.stdout is not None
    for line in first.stdout:  # without a terminal the bench prints a line per step
        if "producing " in line:
            break
    else:
        raise AssertionError(f"the bench ended before producing: {first.wait()}")
    workers = worker_groups(first.pid)
    assert workers, "the bench started no worker"
    signal_groups(workers, signal.SIGSTOP)
    try:
        wait_for(lambda: state(out).get("produced") or first.poll() is not None, 120)
        first.send_signal(signal.SIGTERM)
        wait_for(lambda: state(out).get("ingest_segments") or first.poll() is not None, 120)
    finally:
        signal_groups(workers, signal.SIGCONT)  # then the bench stops them as it would
    first.communicate(timeout=120)
    return state(out)


def test_locomo_bench_resumes_an_interrupted_ingest_and_unfinished_questions(kafka: Settings, tmp_path: Path) -> None:
    # 1. Interrupted while the worker drains the pipeline: the turns are on Kafka, not yet memories.
    out = tmp_path / "locomo"
    args = ("locomo", "--data", str(demo_conversation_path()), "--out", str(out), "--sweep-k", "5,20")
    interrupted = interrupted_while_draining(args, out)
    assert interrupted["produced"] == ["demo-nora-tomas"] and not interrupted["ingested"]
    assert interrupted["ingest_segments"] == 1 and not (out / "questions.jsonl").exists()

    # 2. Resumed: ingestion continues from the committed offsets, every question is asked.
    finish(bench(*args))
    done = state(out)
    assert done["ingested"] and done["consolidated"] and done["ingest_segments"] == 2
    assert done["store_counts"]["turns"] == 30 and done["store_counts"]["cards"] > 0
    result = json.loads((out / "results.json").read_text())
    assert result["questions"] == 8 and len(lines(out)) == 8 and result["errors"] == 0
    overall = result["recall"]["overall"]
    assert overall["memstream"]["evidence_recall"] > 0.5
    for method in ("dense_topk", "bm25_topk"):  # the same budget as memstream, within one turn
        assert 0 < overall[method]["context_tokens"] <= overall["memstream"]["context_tokens"] + 60
    assert overall["full_context"]["context_tokens"] > 3 * overall["memstream"]["context_tokens"]
    assert [row["k"] for row in result["sweep"]] == [5, 20]
    assert result["sweep"][0]["memstream"]["context_tokens"] < result["sweep"][1]["memstream"]["context_tokens"]
    # Each question filled to 300 and to 1,000 evidence tokens, over Kafka, the baselines held to that.
    assert [b["tokens"] for b in result["budgets"]] == [300, 1000]
    within = [b["overall"]["memstream"]["context_tokens"] for b in result["budgets"]]
    assert 0 < within[0] <= 300 and within[0] < within[1] <= 1000
    assert result["budgets"][0]["overall"]["rrf_sentences"]["context_tokens"] <= within[0] + 40
    assert result["ingest"]["turns_per_s"] > 0 and result["latency_ms"]["p50"] > 0
    assert result["llm_cost"]["construction"]["total"]["calls"] == 0  # extractive, no LLM anywhere
    # Both segments and every question ran this checkout's code, once each in the lists.
    assert result["ingest"]["commits"] == result["ask_commits"] == [result["commit"]] and result["commit"]
    report = (out / "report.md").read_text()
    assert "| **overall** | 8 |" in report and "memories built at" not in report
    for png in result["plots"].values():
        assert (out / png).read_bytes()[:4] == b"\x89PNG"

    # 3. Questions left unfinished (and a line cut short by a crash) are asked again, the rest kept.
    kept = lines(out)[:3]
    (out / "questions.jsonl").write_text("\n".join(kept) + '\n{"qid": "demo-nora-tomas:q5", "gro')
    finish(bench(*args))
    after = lines(out)
    assert after[:3] == kept and len(after) == 3 + 1 + 5  # kept, the cut line (ignored), asked again
    assert len(read_records(out)) == 8
    assert state(out)["ingest_segments"] == 2  # nothing ingested again

    # Other options on the same folder are refused rather than mixed in.
    refused = bench(*args[:-1], "5")
    output, _ = refused.communicate(timeout=120)
    assert refused.returncode != 0 and "other options (sweep_k)" in output
