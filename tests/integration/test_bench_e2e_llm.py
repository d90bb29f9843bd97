"""``memstream bench longmemeval`` / ``bench locomo`` with ``--llm``, as a user runs them: the answers
and the judge by the local LLM server. A module of its own (helpers from test_bench_e2e.py), so make
test's two workers can run it beside the resume test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstream.datasets import demo_conversation_path

from . import test_bench_e2e as e2e

pytestmark = pytest.mark.integration


def test_longmemeval_bench_answers_and_judges_with_the_local_llm(local_llm: dict, tmp_path: Path) -> None:
    out = tmp_path / "longmemeval"
    # The answers and the judge: no consolidation or budget re-asks (the resume test has those).
    args = ("--llm", "--sweep-k", "5", "--sweep-tokens", "", "--no-consolidate")
    output = e2e.finish(e2e.bench("longmemeval", "--data", str(e2e.DEMO_LONGMEMEVAL), "--out", str(out), *args))
    result = json.loads((out / "results.json").read_text())
    assert result["questions"] == 3 and result["retrieval_scored"] == 2
    assert result["models"]["answer"] == "smollm2" and result["models"]["judge"] == "smollm2"
    everything = result["splits"]["all"]["recall"]["overall"]["memstream"]
    assert everything["session_recall_questions"] == 2 and everything["turn_recall_questions"] == 2
    assert everything["session_recall"] > 0
    # The headline is the untuned (report) part only; the tune part is reported beside it.
    headline = result["recall"]["overall"]["memstream"]["session_recall_questions"]
    tune = result["splits"]["tune"]["recall"]["overall"]["memstream"]["session_recall_questions"]
    assert result["headline_split"] == "report" and headline + tune == 2
    answers = result["answers"]
    assert answers["overall"]["questions"] == 2 and answers["abstention"]["questions"] == 1
    assert result["llm_cost"]["query"]["stages"]["answer"]["calls"] >= 3
    assert result["llm_cost"]["judge"]["total"]["calls"] >= 3
    records = [json.loads(line) for line in e2e.lines(out)]
    assert all(r["answer_mode"] == "llm" and r["answer"] for r in records)
    assert all(r["judge"]["cost"]["calls"] >= 1 for r in records)
    assert "Answers (LLM judge)" in (out / "report.md").read_text()
    assert "judged by smollm2" in output


def test_locomo_bench_scores_answers_with_f1_and_bleu(local_llm: dict, tmp_path: Path) -> None:
    out = tmp_path / "locomo-llm"
    e2e.finish(
        e2e.bench(
            "locomo",
            "--data",
            str(demo_conversation_path()),
            "--out",
            str(out),
            "--llm",
            "--questions",
            "2",
            "--sweep-k",
            "",
            "--sweep-tokens",
            "",
            "--no-consolidate",
        )
    )
    result = json.loads((out / "results.json").read_text())
    answers = result["answers"]["overall"]
    assert answers["questions"] == 2 and 0 <= answers["f1"] <= 1 and 0 <= answers["bleu1"] <= 1
    # Few questions: every one also has its judge shown a wrong answer.
    assert result["answers"]["judge_control"]["questions"] == 2
    assert result["sweep"] == [] and "recall against context budget" not in result["plots"]
