"""Run state, resumption records, baselines' budgets and the report (pure: no services)."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from memstream.bench.cases import BenchQuestion, BenchSet
from memstream.bench.e2e_ask import control_answer
from memstream.bench.e2e_baselines import Unit, take_units
from memstream.bench.e2e_state import E2EOptions, RunState, append_record, read_records
from memstream.bench.report import (
    BASELINES,
    aggregate,
    method_point,
    plot_budget,
    plot_groups,
    render_report,
    summarize_run,
)
from memstream.processors.tokens import count_tokens
from memstream.schemas import Turn

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _bench(name: str = "locomo") -> BenchSet:
    turns = [
        Turn(
            tenant_id="bench",
            conversation_id="c",
            session_id="s1",
            turn_id=f"D1:{i}",
            speaker="Ann",
            role="user",
            text=f"turn number {i}",
            event_time=T0,
        )
        for i in range(1, 5)
    ]
    questions = [
        BenchQuestion("c:q0", "c", "Where?", T0, "1", "Paris", ("D1:1",)),
        BenchQuestion("c:q1", "c", "When?", T0, "2", "May", ("D1:2", "D1:3")),
    ]
    return BenchSet(name, Path("data.json"), {"c": turns}, questions, ("evidence_recall",))


def test_a_resumed_run_must_have_the_same_options(tmp_path: Path) -> None:
    bench = _bench()
    options = E2EOptions(out=tmp_path)
    state = RunState.open(tmp_path, options.fingerprint(bench), fresh=False)
    state.produced.append("c")
    state.save(tmp_path)
    again = RunState.open(tmp_path, options.fingerprint(bench), fresh=False)
    assert again.produced == ["c"]
    other = E2EOptions(out=tmp_path, sweep_k=(5,), extract="llm")
    with pytest.raises(ValueError, match="extract, sweep_k"):  # the memories would differ
        RunState.open(tmp_path, other.fingerprint(bench), fresh=False)
    # How the questions are asked may change until the first one is asked, not after.
    asking = E2EOptions(out=tmp_path, sweep_k=(5,), sweep_tokens=(500,), llm=True)
    changed = RunState.open(tmp_path, asking.fingerprint(bench), fresh=False)
    assert changed.produced == ["c"] and changed.fingerprint["sweep_tokens"] == [500]
    assert RunState.open(tmp_path, asking.fingerprint(bench), fresh=False).fingerprint == changed.fingerprint
    append_record(tmp_path, {"qid": "c:q0"})
    with pytest.raises(ValueError, match="llm, sweep_k, sweep_tokens"):
        RunState.open(tmp_path, options.fingerprint(bench), fresh=False)
    started_over = RunState.open(tmp_path, other.fingerprint(bench), fresh=True)
    assert started_over.produced == [] and read_records(tmp_path) == {}


def test_a_state_written_before_ingest_commits_were_kept_still_opens(tmp_path: Path) -> None:
    bench = _bench()
    fingerprint = E2EOptions(out=tmp_path).fingerprint(bench)
    old = {k: v for k, v in asdict(RunState(fingerprint, ingest_segments=2)).items() if k != "ingest_commits"}
    (tmp_path / "state.json").write_text(json.dumps(old))
    state = RunState.open(tmp_path, fingerprint, fresh=False)
    assert state.ingest_segments == 2 and state.ingest_commits == []


def test_records_survive_a_line_cut_short(tmp_path: Path) -> None:
    append_record(tmp_path, {"qid": "a", "x": 1})
    with (tmp_path / "questions.jsonl").open("a") as fh:
        fh.write('{"qid": "b", "x"')  # the crash hit mid-write: b is asked again
    assert set(read_records(tmp_path)) == {"a"}
    append_record(tmp_path, {"qid": "b", "x": 2})  # asked again: a line of its own
    assert read_records(tmp_path) == {"a": {"qid": "a", "x": 1}, "b": {"qid": "b", "x": 2}}


def test_baselines_come_closest_to_the_budget_with_at_least_one_unit() -> None:
    units = [Unit(f"p{i}", f"D1:{i}", "Ann: " + "word " * 10) for i in range(5)]
    one = count_tokens("Ann: " + "word " * 10)

    def taken(budget: int) -> tuple[list[str], int]:
        chosen, tokens = take_units(units, budget)
        return [u.turn_id for u in chosen], tokens

    assert taken(2 * one) == (["D1:0", "D1:1"], 2 * one)
    assert taken(2 * one + one // 3) == (["D1:0", "D1:1"], 2 * one)  # under by a third
    assert taken(3 * one - one // 3) == (["D1:0", "D1:1", "D1:2"], 3 * one)  # over by a third
    assert taken(1) == (["D1:0"], one)
    assert taken(100 * one) == ([f"D1:{i}" for i in range(5)], 5 * one)
    assert take_units([], 10) == ([], 0)  # a conversation the search found nothing in


def _records() -> dict[str, dict]:
    def rec(qid: str, group: str, scores: float, tokens: int, correct: bool) -> dict:
        return {
            "qid": qid,
            "group": group,
            "ok": True,
            "latency_ms": 40.0,
            "worker_latency_ms": {"total_ms": 20.0},
            "profile": "lookup",
            "context_tokens": tokens,
            "scores": {"evidence_recall": scores},
            "costs": [{"stage": "answer", "calls": 1, "prompt_tokens": 100, "completion_tokens": 9}],
            "sweep": {"5": {"context_tokens": tokens // 2, "scores": {"evidence_recall": scores / 2}}},
            "budgets": {"300": {"context_tokens": 3 * tokens, "scores": {"evidence_recall": min(1.0, 2 * scores)}}},
            "answer": "x",
            "judge": {
                "correct": correct,
                "readable": True,
                "f1": 0.5,
                "bleu1": 0.25,
                "cost": {"stage": "judge", "calls": 1, "prompt_tokens": 50, "completion_tokens": 3},
            },
        }

    records = {"c:q0": rec("c:q0", "1", 1.0, 100, True), "c:q1": rec("c:q1", "2", 0.5, 60, False)}
    records["c:q0"]["judge_control"] = {
        "correct": True,
        "readable": True,
        "f1": 0.0,
        "bleu1": 0.0,
        "cost": {"stage": "judge", "calls": 1},
    }
    return records


def _evaluation() -> dict:
    def base(recall: float) -> dict:
        return {
            "main": {"context_tokens": 80, "scores": {"evidence_recall": recall}},
            "5": {"context_tokens": 40, "scores": {"evidence_recall": recall / 2}},
            "tokens:300": {"context_tokens": 240, "scores": {"evidence_recall": min(1.0, 2 * recall)}},
        }

    return {
        "embedding_model": "m",
        "cards": 3,
        "baselines": {
            qid: {
                "full_context_tokens": 1000,
                **{name: base(0.5 if name == "dense_topk" else 0.0) for name in BASELINES},
            }
            for qid in ("c:q0", "c:q1")
        },
    }


def test_summary_and_report_hold_every_method_group_cost_and_answer(tmp_path: Path) -> None:
    bench = _bench()
    options = E2EOptions(out=tmp_path, llm=True, sweep_k=(5,), sweep_tokens=(300,))
    state = SimpleNamespace(
        construction={"extract": {"calls": 4, "prompt_tokens": 400, "completion_tokens": 40}},
        started_at="t",
        ingest_seconds=2.0,
        ingest_segments=2,
        ingest_commits=["0ld"],
        consolidation_s=1.0,
        consolidation_decisions={},
        store_counts={"cards": 3},
    )
    result = summarize_run(bench, options, state, _records(), _evaluation(), answer_model="a", judge_model="j")
    result["commit"] = "n3w"  # the questions asked with other code than the memories were built with
    overall = result["recall"]["overall"]
    assert overall["memstream"]["evidence_recall"] == 0.75 and overall["memstream"]["context_tokens"] == 80
    assert overall["dense_topk"]["evidence_recall"] == 0.5 and overall["bm25_topk"]["evidence_recall"] == 0.0
    assert overall["full_context"] == {
        "evidence_recall": 1.0,
        "evidence_recall_questions": 2,
        "answer_bearing": None,  # an evaluation that did not measure it
        "answer_bearing_questions": 0,
        "answer_bearing_evidence": None,  # memstream's alone
        "answer_bearing_evidence_questions": 0,
        "context_tokens": 1000,
        "questions": 2,
    }
    assert result["recall"]["per_group"]["2"]["memstream"]["evidence_recall"] == 0.5
    assert result["sweep"][0]["memstream"]["evidence_recall"] == 0.375
    # Filled to 300 evidence tokens: per group too, the baselines at that budget's tokens.
    (budget,) = result["budgets"]
    assert budget["tokens"] == 300 and budget["overall"]["memstream"]["evidence_recall"] == 1.0
    assert (
        budget["overall"]["memstream"]["context_tokens"] == 240
        and budget["overall"]["dense_topk"]["evidence_recall"] == 1.0
    )
    assert budget["per_group"]["2"]["memstream"]["evidence_recall"] == 1.0
    assert budget["overall"]["full_context"]["context_tokens"] == 1000
    assert result["ingest"]["turns_per_s"] == 2.0  # 4 turns in 2 s over both segments
    assert result["llm_cost"]["construction"]["per_1k_turns"]["calls"] == 1000.0
    assert result["llm_cost"]["query"]["total"] == {"calls": 2, "prompt_tokens": 200, "completion_tokens": 18}
    assert result["answers"]["overall"] == {"accuracy": 0.5, "questions": 2, "unreadable": 0, "f1": 0.5, "bleu1": 0.25}
    assert result["answers"]["judge_control"] == {"questions": 1, "false_accept": 1.0}
    assert result["llm_cost"]["judge"]["total"]["calls"] == 3  # two verdicts and one control
    json.dumps(result)  # results.json must be writable as is
    report = render_report(result, {"budget": "recall_vs_budget.png"})
    assert "| **overall** | 2 | 0.750 | 0.500 | 0.000 | 0.000 | 0.000 | 0.000 | 0.000 | 1.000 |" in report
    assert "![budget](recall_vs_budget.png)" in report and "accuracy" in report
    assert "accepted as correct at a rate of **1.000**" in report
    assert "**Within 300 evidence tokens**" in report and "memstream 240.0 evidence tokens per question" in report
    assert "| **overall** | 2 | 1.000 | 1.000 | 0.000 |" in report
    assert "commit n3w (memories built at 0ld)" in report
    result["ingest"]["commits"], result["ask_commits"] = ["n3w"], ["0ld", "n3w"]
    assert "commit n3w (questions asked at 0ld, n3w)" in render_report(result, {})
    result["ask_commits"] = ["n3w"]
    assert "commit n3w ·" in render_report(result, {})
    for plot in (plot_budget(result, tmp_path / "b.png"), plot_groups(result, tmp_path / "g.png")):
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_judge_controls_spread_over_the_run_with_a_different_gold_answer() -> None:
    questions = [
        BenchQuestion(f"q{i}", "c", "?", T0, "1", "same" if i < 30 else f"gold {i}", ("D1:1",)) for i in range(60)
    ]
    controls = {q.qid: control_answer(questions, q) for q in questions}
    chosen = [qid for qid, wrong in controls.items() if wrong is not None]
    assert len(chosen) == 20 and chosen[:2] == ["q0", "q3"]
    for qid in chosen:
        q = questions[int(qid[1:])]
        assert controls[qid].lower() != q.gold_answer.lower()


def test_metrics_a_question_lacks_do_not_count_against_it() -> None:
    points = [
        {"scores": {"session_recall": 1.0, "turn_recall": 0.0}, "context_tokens": 10},
        {"scores": {"session_recall": 0.5}, "context_tokens": 30},
        {"scores": {}, "context_tokens": 20},
    ]  # abstention: tokens count, recall does not
    out = aggregate(points, ["session_recall", "turn_recall"])
    assert out["session_recall"] == 0.75 and out["turn_recall"] == 0.0 and out["turn_recall_questions"] == 1
    assert out["context_tokens"] == 20.0
    record = {"scores": {"session_recall": 0.0}}
    assert method_point(
        BenchQuestion("q", "c", "?", T0, "t", "a", ()), record, {"full_context_tokens": 99}, "full_context"
    ) == {"scores": {"session_recall": 1.0}, "context_tokens": 99}


def test_workers_get_the_llm_only_in_the_phase_that_uses_it(tmp_path: Path) -> None:
    from memstream.bench.e2e import Endpoints, _worker_env

    endpoints = Endpoints({"MEMSTREAM_LLM_BASE_URL": "http://llm/v1", "MEMSTREAM_LLM_MODEL": "m"}, "m")
    answers = E2EOptions(out=tmp_path, llm=True, planner="rules")
    ingest = _worker_env(answers, endpoints, phase="ingest")
    assert ingest["MEMSTREAM_LLM_BASE_URL"] == "" and ingest["MEMSTREAM_EXTRACT_MODE"] == "extractive"
    assert ingest["MEMSTREAM_SLEEP_IDLE_S"] == "1000000000"  # consolidation only when the bench asks
    ask = _worker_env(answers, endpoints, phase="ask")
    assert ask["MEMSTREAM_LLM_BASE_URL"] == "http://llm/v1" and ask["MEMSTREAM_QUERY_PLANNER"] == "rules"
    built = _worker_env(E2EOptions(out=tmp_path, extract="llm"), endpoints, phase="ingest")
    assert built["MEMSTREAM_LLM_BASE_URL"] == "http://llm/v1" and built["MEMSTREAM_EXTRACT_MODE"] == "llm"
    assert _worker_env(E2EOptions(out=tmp_path, extract="llm"), endpoints, phase="ask")["MEMSTREAM_LLM_BASE_URL"] == ""
