"""What an end-to-end benchmark run found: ``results.json``, ``report.md`` and the PNG plots.

:func:`summarize_run` and :func:`render_report` are pure; :func:`write_outputs` writes the files.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from memstream.bench.cases import (
    LONGMEMEVAL_RANKED,
    REPORT,
    TUNE,
    BenchQuestion,
    BenchSet,
    answer_score,
    ranked_scores,
)
from memstream.bench.plots import pyplot, save_figure
from memstream.bench.scoring import percentile
from memstream.processors.tokens import count_tokens

WHOLE_TURNS = ("dense_topk", "bm25_topk", "rrf_topk")  # baselines that return whole raw turns
SENTENCES = ("dense_sentences", "bm25_sentences", "rrf_sentences")  # ... sentences of raw turns, one per turn
BASELINES = (*WHOLE_TURNS, *SENTENCES)
COMPARED = ("memstream", *BASELINES)  # at memstream's context tokens, question by question
METHODS = (*COMPARED, "full_context")
METHOD_LABELS = {
    "memstream": "memstream",
    "dense_topk": "dense top-K turns",
    "bm25_topk": "BM25 top-K turns",
    "rrf_topk": "RRF top-K turns",
    "dense_sentences": "dense sentences",
    "bm25_sentences": "BM25 sentences",
    "rrf_sentences": "RRF sentences",
    "full_context": "full context",
}
ANSWER_METRIC = "answer_bearing"
# memstream's answer-bearing recall over its evidence alone: the speaker profile the reply also carries
# is outside the evidence tokens the baselines are held to, so this is the equal-token comparison.
EVIDENCE_ANSWER_METRIC = "answer_bearing_evidence"
ALL = "all"
SPLITS = (REPORT, TUNE, ALL)
BUDGET_PREFIX = "tokens:"  # a baseline budget key: the question filled to an evidence-token budget
SPLIT_TITLES = {REPORT: "report split (untuned)", TUNE: "tune split", ALL: "all questions"}
SPLIT_RULES = {
    "locomo": "by conversation: the first 2 sample ids of the data file in sorted order are the tune split "
    "(conv-26, conv-30 on the dev file), the others the report split",
    "longmemeval": "by question: tune when SHA-256 of the question id (first 8 hex digits) is divisible by 3 "
    "(about a third), else report",
}


def budget_key(budget: int | str) -> str:
    """The key of one evidence-token budget among a question's budgets (swept K keys are digits)."""
    return f"{BUDGET_PREFIX}{budget}"


def _record_part(record: dict[str, Any], key: str) -> dict[str, Any]:
    """The reply a key names: the main one, a swept K's, or an evidence-token budget's."""
    if key == "main":
        return record
    if key.startswith(BUDGET_PREFIX):
        return record["budgets"][key.removeprefix(BUDGET_PREFIX)]
    return record["sweep"][key]


def method_point(
    q: BenchQuestion,
    record: dict[str, Any],
    baselines: dict[str, Any],
    method: str,
    key: str = "main",
    *,
    ranked: bool = False,
) -> dict[str, Any]:
    """One question's scores and context tokens for one method, at the main K, a swept K or a budget.

    memstream's answer-bearing recall needs the texts it returned (``context_texts``): a record of an
    older run has none, and the figure is then missing rather than 0. With ``ranked`` (LongMemEval) a
    swept K also gets LongMemEval's own metrics (``ranked_scores``) of memstream's K evidence items."""
    if method == "memstream":
        part = _record_part(record, key)
        texts = part.get("context_texts")
        scores = dict(part["scores"])
        if texts is not None:
            scores |= answer_score(q, texts)
            evidence = answer_score(q, texts[: part.get("evidence_items", len(texts))])
            scores |= {EVIDENCE_ANSWER_METRIC: v for v in evidence.values()}
        point: dict[str, Any] = {"scores": scores, "context_tokens": part["context_tokens"]}
        if "reader_tokens" in part:
            point["reader_tokens"] = part["reader_tokens"]
        if "turns_per_evidence" in part:
            point["turns_per_evidence"] = part["turns_per_evidence"]
        if ranked and key.isdigit():  # a swept K
            point["ranked_scores"] = ranked_scores(q, part["turn_ids"], int(key), cited=True)
        return point
    if method == "full_context":
        # Every turn is in the context: recall 1 by definition (where the question is scored); whether
        # the gold answer is written in it at all is measured (the ceiling of answer-bearing recall).
        return {
            "scores": {**{m: 1.0 for m in record["scores"]}, **baselines.get("full_context_scores", {})},
            "context_tokens": baselines["full_context_tokens"],
        }
    return baselines[method][key]


def _mean(values: Sequence[float], digits: int = 4) -> float | None:
    return round(sum(values) / len(values), digits) if values else None


def aggregate(points: Iterable[dict[str, Any]], metrics: Sequence[str]) -> dict[str, Any]:
    """Mean recall per metric (over the questions it applies to) and mean context tokens (all); where
    the points have them, memstream's reader tokens, provenance turns per evidence item (all items of
    all questions pooled) and LongMemEval's ranked metrics (``ranked``)."""
    points = list(points)
    out: dict[str, Any] = {}
    for m in metrics:
        values = [p["scores"][m] for p in points if m in p["scores"]]
        out[m] = _mean(values)
        out[f"{m}_questions"] = len(values)
    out["context_tokens"] = round(sum(p["context_tokens"] for p in points) / len(points), 1) if points else 0.0
    out["questions"] = len(points)
    if any("reader_tokens" in p for p in points):
        out["evidence_tokens"] = out["context_tokens"]
        out["reader_tokens"] = _mean([p["reader_tokens"] for p in points if "reader_tokens" in p], 1)
    if any("turns_per_evidence" in p for p in points):
        per_item = [n for p in points for n in p.get("turns_per_evidence", [])]
        out["provenance_turns_per_evidence"] = _mean(per_item, 3)
    ranked = [p["ranked_scores"] for p in points if "ranked_scores" in p]
    if ranked:
        names = sorted({m for r in ranked for m in r})
        out["ranked"] = {m: _mean([r[m] for r in ranked if m in r]) for m in names} | {
            f"{m}_questions": sum(m in r for r in ranked) for m in names
        }
    return out


def _sum_costs(costs: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for c in costs:
        mine = out.setdefault(c["stage"], {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        for k in ("calls", "prompt_tokens", "completion_tokens"):
            mine[k] += int(c.get(k, 0))
    return out


def _totals(stages: dict[str, dict[str, int]]) -> dict[str, int]:
    return {k: sum(s.get(k, 0) for s in stages.values()) for k in ("calls", "prompt_tokens", "completion_tokens")}


def _machine() -> dict[str, Any]:
    memory = None
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_gib": memory,
        "processor": platform.processor() or platform.machine(),
    }


def source_commit() -> str | None:
    """The short commit of this checkout, where it is a git checkout."""
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                cwd=Path(__file__).resolve().parent,
                timeout=10,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        return None


def summarize_run(
    bench: BenchSet,
    options: Any,
    state: Any,
    records: dict[str, dict[str, Any]],
    evaluation: dict[str, Any],
    *,
    answer_model: str | None,
    judge_model: str | None,
) -> dict[str, Any]:
    questions = bench.questions
    metrics = list(bench.metrics)
    by_split = {
        REPORT: [q for q in questions if bench.split(q.qid) == REPORT],
        TUNE: [q for q in questions if bench.split(q.qid) == TUNE],
        ALL: list(questions),
    }
    splits = {
        name: split_summary(bench, qs, records, evaluation["baselines"], options.sweep_k, options.sweep_tokens)
        for name, qs in by_split.items()
    }
    headline = REPORT if by_split[REPORT] else ALL  # a run of tune questions only has no report split
    groups = sorted({q.group for q in questions}, key=lambda g: (len(g), g))
    by_group = {g: [q for q in questions if q.group == g] for g in groups}
    latencies = [r["latency_ms"] for r in records.values()]
    worker_keys = sorted({k for r in records.values() for k in (r.get("worker_latency_ms") or {})})
    query_costs = _sum_costs(c for r in records.values() for c in r["costs"])
    turns = [t for ts in bench.conversations.values() for t in ts]
    tokens = sum(count_tokens(t.text) for t in turns)
    construction = state.construction
    result: dict[str, Any] = {
        "bench": bench.name,
        "data": str(bench.data),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "started_at": state.started_at,
        "machine": _machine(),
        "commit": source_commit(),
        "ask_commits": sorted({r["commit"] for r in records.values() if r.get("commit")}),
        "options": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items() if k not in ("judge_api_key",)
        },
        "models": {
            "embedding": evaluation["embedding_model"],
            "extraction": options.extract,
            "answer": answer_model if options.llm else None,
            "judge": judge_model,
        },
        "conversations": len(bench.conversations),
        "turns": len(turns),
        "turn_tokens": tokens,
        "questions": len(questions),
        "retrieval_scored": sum(q.retrieval_scored for q in questions),
        "groups": {g: {"name": bench.group_names.get(g, g), "questions": len(qs)} for g, qs in by_group.items()},
        "metrics": metrics,
        "answer_metric": ANSWER_METRIC,
        "split_rule": SPLIT_RULES.get(bench.name, "none: every question is reported"),
        "headline_split": headline,
        "recall": splits[headline]["recall"],
        "sweep": splits[headline]["sweep"],
        "budgets": splits[headline]["budgets"],
        "splits": splits,
        "baseline_limits": evaluation.get("baseline_limits"),
        "errors": sum(not r["ok"] for r in records.values()),
        "profiles": _count(r["profile"] or "?" for r in records.values()),
        "latency_ms": {
            "p50": round(percentile(latencies, 50), 1),
            "p99": round(percentile(latencies, 99), 1),
            "worker": {
                k: {"p50": round(percentile(v, 50), 1), "p99": round(percentile(v, 99), 1)}
                for k in worker_keys
                if (
                    v := [
                        r["worker_latency_ms"][k] for r in records.values() if k in (r.get("worker_latency_ms") or {})
                    ]
                )
            },
        },
        "ingest": {
            "turns": len(turns),
            "tokens": tokens,
            "seconds": state.ingest_seconds,
            "segments": state.ingest_segments,
            "commits": list(state.ingest_commits),
            "turns_per_s": round(len(turns) / state.ingest_seconds, 2) if state.ingest_seconds else None,
            "tokens_per_s": round(tokens / state.ingest_seconds, 1) if state.ingest_seconds else None,
            "consolidation_s": state.consolidation_s if options.consolidate else None,
            "consolidation_decisions": state.consolidation_decisions,
            "store": state.store_counts,
        },
        "llm_cost": {
            "construction": {
                "stages": construction,
                "total": _totals(construction),
                "per_1k_turns": {k: round(v * 1000 / max(len(turns), 1), 1) for k, v in _totals(construction).items()},
            },
            "query": {
                "stages": query_costs,
                "total": _totals(query_costs),
                "per_question": {k: round(v / max(len(records), 1), 2) for k, v in _totals(query_costs).items()},
            },
        },
    }
    if options.llm:
        result["answers"] = _accuracy(bench, questions, records)
        result["llm_cost"]["judge"] = {
            "total": _totals(
                _sum_costs(
                    r[part]["cost"] for r in records.values() for part in ("judge", "judge_control") if part in r
                )
            )
        }
    return result


def split_summary(
    bench: BenchSet,
    questions: Sequence[BenchQuestion],
    records: dict[str, dict[str, Any]],
    baselines: dict[str, Any],
    sweep_k: Sequence[int],
    sweep_tokens: Sequence[int] = (),
) -> dict[str, Any]:
    """Every figure of one split: recall and answer-bearing recall per method, overall and per group,
    at the main K and at each evidence-token budget; overall at each swept K (with LongMemEval's
    ranked metrics there)."""
    metrics = [*bench.metrics, ANSWER_METRIC, EVIDENCE_ANSWER_METRIC]
    ranked = bench.name == "longmemeval"

    def points(qs: Sequence[BenchQuestion], method: str, key: str = "main") -> list[dict[str, Any]]:
        return [method_point(q, records[q.qid], baselines[q.qid], method, key, ranked=ranked) for q in qs]

    groups = sorted({q.group for q in questions}, key=lambda g: (len(g), g))
    by_group = {g: [q for q in questions if q.group == g] for g in groups}

    def recall(key: str) -> dict[str, Any]:
        return {
            "overall": {m: aggregate(points(questions, m, key), metrics) for m in METHODS},
            "per_group": {
                g: {m: aggregate(points(qs, m, key), metrics) for m in METHODS} for g, qs in by_group.items()
            },
        }

    return {
        "questions": len(questions),
        "retrieval_scored": sum(q.retrieval_scored for q in questions),
        "answer_scored": sum(q.answer_scored for q in questions),
        "recall": recall("main"),
        "budgets": [{"tokens": int(b), **recall(budget_key(b))} for b in sweep_tokens],
        "sweep": [
            {"k": int(k), **{m: aggregate(points(questions, m, k), metrics) for m in COMPARED}}
            for k in map(str, sweep_k)
        ],
    }


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def _accuracy(
    bench: BenchSet, questions: Sequence[BenchQuestion], records: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Judge accuracy overall and per group (LongMemEval: abstention apart), F1 and BLEU-1 (LoCoMo)."""

    def acc(qs: Sequence[BenchQuestion]) -> dict[str, Any]:
        judged = [records[q.qid]["judge"] for q in qs if "judge" in records[q.qid]]
        out: dict[str, Any] = {
            "accuracy": round(sum(j["correct"] for j in judged) / len(judged), 4) if judged else None,
            "questions": len(judged),
            "unreadable": sum(not j.get("readable", True) for j in judged),
        }
        if bench.name == "locomo" and judged:
            out["f1"] = round(sum(j["f1"] for j in judged) / len(judged), 4)
            out["bleu1"] = round(sum(j["bleu1"] for j in judged) / len(judged), 4)
        return out

    controls = [records[q.qid]["judge_control"] for q in questions if "judge_control" in records[q.qid]]
    answered = [q for q in questions if not q.abstention]
    groups = sorted({q.group for q in answered}, key=lambda g: (len(g), g))
    out = {"overall": acc(answered), "per_group": {g: acc([q for q in answered if q.group == g]) for g in groups}}
    if bench.name == "longmemeval":
        out["abstention"] = acc([q for q in questions if q.abstention])
        out["all"] = acc(questions)
    # Wrong answers (another question's gold) the judge accepted: near 0 for a judge worth reading.
    out["judge_control"] = {
        "questions": len(controls),
        "false_accept": round(sum(c["correct"] for c in controls) / len(controls), 4) if controls else None,
    }
    return out


# --- report.md ---------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _metric_name(metric: str) -> str:
    return metric.replace("_", " ")


def _columns(metric: str, methods: Sequence[str]) -> list[tuple[str, str, str]]:
    """(label, method, metric) per column; answer-bearing recall gets memstream's evidence-only figure
    beside the one with the profile."""
    out = [(METHOD_LABELS[m], m, metric) for m in methods]
    if metric == ANSWER_METRIC:
        out.insert(1, ("memstream, evidence only", "memstream", EVIDENCE_ANSWER_METRIC))
    return out


def _recall_table(result: dict[str, Any], recall: dict[str, Any], metric: str) -> list[str]:
    """One metric per group and method (full context last) of one ``recall`` entry: the main K's or
    a budget's."""
    columns = _columns(metric, METHODS)
    header = ["group", "questions", *(label for label, _, _ in columns)]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    rows = [("**overall**", recall["overall"])] + [
        (result["groups"][g]["name"], row) for g, row in recall["per_group"].items()
    ]
    for name, row in rows:
        cells = [str(row["memstream"][f"{metric}_questions"]), *(_fmt(row[m].get(x)) for _, m, x in columns)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _tokens_line(split: dict[str, Any]) -> list[str]:
    overall = split["recall"]["overall"]
    mine = overall["memstream"]
    return [
        "| method | context tokens / question |",
        "|---|---|",
        f"| memstream evidence (what the baselines are held to) | {_fmt(mine['context_tokens'], 1)} |",
        f"| memstream reader (all the answer call reads) | {_fmt(mine.get('reader_tokens'), 1)} |",
        *(f"| {METHOD_LABELS[m]} | {_fmt(overall[m]['context_tokens'], 1)} |" for m in METHODS[1:]),
        "",
        f"Provenance: {_fmt(mine.get('provenance_turns_per_evidence'), 3)} turn ids per memstream evidence item.",
    ]


def _sweep_table(split: dict[str, Any], metric: str) -> list[str]:
    """One metric at each swept K: memstream's tokens, then every method (baselines at its tokens)."""
    columns = _columns(metric, COMPARED)
    header = ["K", "evidence tokens", "reader tokens", "turns / evidence", *(label for label, _, _ in columns)]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for row in split["sweep"]:
        mine = row["memstream"]
        cells = [
            str(row["k"]),
            _fmt(mine["context_tokens"], 1),
            _fmt(mine.get("reader_tokens"), 1),
            _fmt(mine.get("provenance_turns_per_evidence"), 2),
            *(_fmt(row[m].get(x)) for _, m, x in columns),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _ranked_table(split: dict[str, Any]) -> list[str]:
    """LongMemEval's own metrics at each swept K, per method."""
    header = ["K", "method", *(_metric_name(m) for m in LONGMEMEVAL_RANKED)]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for row in split["sweep"]:
        for m in COMPARED:
            ranked = row[m].get("ranked", {})
            lines.append(
                f"| {row['k']} | {METHOD_LABELS[m]} | "
                + " | ".join(_fmt(ranked.get(x)) for x in LONGMEMEVAL_RANKED)
                + " |"
            )
    return lines


def _split_section(result: dict[str, Any], name: str, headline: bool) -> list[str]:
    split = result["splits"][name]
    metrics = [*result["metrics"], result.get("answer_metric", ANSWER_METRIC)]
    lines = [
        f"## {SPLIT_TITLES[name].capitalize()}" + (" (the headline)" if headline else ""),
        "",
        f"{split['questions']} questions, {split['retrieval_scored']} scored for recall, "
        f"{split.get('answer_scored', '–')} for answer-bearing recall.",
        "",
    ]
    if not split["questions"]:
        return lines
    for metric in metrics:
        lines += [f"**{_metric_name(metric)}** at the main K (baselines at memstream's tokens per question):", ""]
        lines += [*_recall_table(result, split["recall"], metric), ""]
    lines += [*_tokens_line(split), ""]
    for entry in split.get("budgets", []):
        mine = entry["overall"]["memstream"]
        lines += [
            f"**Within {entry['tokens']:,} evidence tokens** (each question asked again for its items in rank "
            f"order until the budget; memstream {_fmt(mine['context_tokens'], 1)} evidence tokens per question, "
            f"{_fmt(mine.get('reader_tokens'), 1)} for the reader; baselines at memstream's tokens per question):",
            "",
        ]
        for metric in metrics:
            lines += [f"{_metric_name(metric)}:", "", *_recall_table(result, entry, metric), ""]
    if split["sweep"]:
        for metric in metrics:
            lines += [f"**{_metric_name(metric)}** against the budget (K = memstream's evidence items):", ""]
            lines += [*_sweep_table(split, metric), ""]
        if any("ranked" in row["memstream"] for row in split["sweep"]):
            lines += [
                "**LongMemEval's retrieval metrics** at k: memstream's k evidence items (every turn and "
                "session they cite); a baseline's first k distinct turns (turn level) or sessions (session level):",
                "",
                *_ranked_table(split),
                "",
            ]
    return lines


def _code_note(result: dict[str, Any]) -> str:
    """A run resumed across commits says which code built the memories and which asked the questions."""
    here = result["commit"]
    parts = [
        (what, commits)
        for what, commits in (
            ("memories built at", result["ingest"].get("commits", [])),
            ("questions asked at", result.get("ask_commits", [])),
        )
        if any(c != here for c in commits)
    ]
    said = "; ".join(what + " " + ", ".join(commits) for what, commits in parts)
    return f" ({said})" if said else ""


def render_report(result: dict[str, Any], plots: dict[str, str]) -> str:
    """The run as Markdown: what was run, recall against the baselines, costs, speed, answers."""
    r = result
    lines = [
        f"# memstream on {'LoCoMo' if r['bench'] == 'locomo' else 'LongMemEval'}",
        "",
        f"{r['date']} · commit {r['commit'] or '?'}{_code_note(r)} · {r['machine']['cpus']} CPUs, "
        f"{r['machine']['memory_gib']} GiB, "
        f"{r['machine']['platform']} · data `{r['data']}`",
        "",
        f"{r['conversations']} conversations, {r['turns']} turns ({r['turn_tokens']} tokens) streamed through Kafka; "
        f"{r['questions']} questions asked over the request/reply topics ({r['retrieval_scored']} scored for recall). "
        f"Memories: {r['models']['extraction']}; embedding model {r['models']['embedding']}; "
        f"evidence K {r['options']['k'] or 'configured'}; seed {r['options']['seed']}.",
        "",
        "## How to read it",
        "",
        "Recall: the share of gold turns (LongMemEval also: gold sessions) inside the provenance of the "
        "returned context. Answer-bearing recall: the share of questions whose returned texts contain the gold "
        "answer (normalised; `bench/scoring.py:bears_answer`). The baselines rank the question's raw turns "
        "(`*top-K turns`, whole turns) or the sentences of its raw turns (`*sentences`, one sentence per turn "
        "kept), dense, BM25 or both fused (RRF, k = 60), and keep the top units whose tokens come closest to "
        "memstream's evidence tokens for the same question. The full context holds every turn (recall 1).",
        "",
        f"Tuning split: {r.get('split_rule', '–')}. Headline figures are those of the "
        f"{SPLIT_TITLES[r.get('headline_split', ALL)]}.",
        "",
    ]
    if "splits" in r:
        headline = r.get("headline_split", ALL)
        for name in (headline, *(s for s in SPLITS if s != headline)):
            lines += _split_section(r, name, name == headline)
    for name, path in plots.items():
        lines += [f"![{name}]({path})", ""]
    cost = r["llm_cost"]
    lines += ["## Cost", "", "| LLM | calls | prompt tokens | completion tokens |", "|---|---|---|---|"]
    for part in ("construction", "query", "judge"):
        if part in cost:
            t = cost[part]["total"]
            lines.append(f"| {part} | {t['calls']} | {t['prompt_tokens']} | {t['completion_tokens']} |")
    ingest = r["ingest"]
    lines += [
        "",
        f"Construction per 1k turns: {cost['construction']['per_1k_turns']['calls']} calls, "
        f"{sum(cost['construction']['per_1k_turns'][k] for k in ('prompt_tokens', 'completion_tokens')):.0f} tokens. "
        f"Query per question: {cost['query']['per_question']['calls']} calls.",
        "",
        "## Speed",
        "",
        f"- ingest: {ingest['turns']} turns in {ingest['seconds']} s of worker time "
        f"({ingest['segments']} segment(s)): **{_fmt(ingest['turns_per_s'], 2)} turns/s**, "
        f"{_fmt(ingest['tokens_per_s'], 0)} tokens/s",
        f"- consolidation after ingest: {_fmt(ingest['consolidation_s'], 1)} s, "
        f"decisions {ingest['consolidation_decisions']}",
        f"- store: {ingest['store']}",
        f"- query latency over Kafka (request to reply): p50 {r['latency_ms']['p50']} ms, "
        f"p99 {r['latency_ms']['p99']} ms"
        + (
            f"; worker total p50 {r['latency_ms']['worker']['total_ms']['p50']} ms"
            if "total_ms" in r["latency_ms"]["worker"]
            else ""
        ),
        f"- access profiles chosen: {r['profiles']}; failed replies: {r['errors']}",
        "",
    ]
    if "answers" in r:
        a = r["answers"]
        lines += [
            "## Answers (LLM judge)",
            "",
            f"Answer model `{r['models']['answer']}`, judge `{r['models']['judge']}`.",
            "",
            "| group | questions | accuracy |" + (" F1 | BLEU-1 |" if r["bench"] == "locomo" else ""),
            "|---|---|---|" + ("---|---|" if r["bench"] == "locomo" else ""),
        ]
        rows = [("overall", a["overall"])] + [(r["groups"][g]["name"], v) for g, v in a["per_group"].items()]
        if "abstention" in a:
            rows += [("abstention", a["abstention"]), ("all questions", a["all"])]
        for name, v in rows:
            extra = f" {_fmt(v.get('f1'))} | {_fmt(v.get('bleu1'))} |" if r["bench"] == "locomo" else ""
            lines.append(f"| {name} | {v['questions']} | {_fmt(v['accuracy'])} |" + extra)
        control = a["judge_control"]
        lines += [
            "",
            f"Judge control: {control['questions']} deliberately wrong answers (another question's gold "
            f"answer), accepted as correct at a rate of **{_fmt(control['false_accept'])}**. A judge worth "
            "reading accepts almost none.",
            "",
        ]
    return "\n".join(lines)


# --- plots -------------------------------------------------------------------------------------


STYLES = {  # memstream solid; whole-turn baselines dashed; sentence baselines dotted
    "memstream": "o-",
    "dense_topk": "s--",
    "bm25_topk": "^--",
    "rrf_topk": "D--",
    "dense_sentences": "s:",
    "bm25_sentences": "^:",
    "rrf_sentences": "D:",
}


def _headline_title(result: dict[str, Any]) -> str:
    split = result.get("headline_split", ALL)
    questions = result.get("splits", {}).get(split, {}).get("retrieval_scored", result["retrieval_scored"])
    return f"{result['bench']}, {SPLIT_TITLES[split]}: {questions} questions"


def plot_budget(result: dict[str, Any], out: Path) -> Path:
    """Recall (and answer-bearing recall) against context tokens per question, headline split:
    memstream at each K, every baseline at its tokens, the full context as one point (log scale: it
    is orders of magnitude larger)."""
    plt = pyplot()
    metrics = [*result["metrics"], result.get("answer_metric", ANSWER_METRIC)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.5 * len(metrics), 5.0), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for method in COMPARED:
            xs = [row[method]["context_tokens"] for row in result["sweep"]]
            ys = [row[method].get(metric) or 0.0 for row in result["sweep"]]
            ax.plot(xs, ys, STYLES[method], label=METHOD_LABELS[method], linewidth=2.2 if method == "memstream" else 1)
            if method == "memstream":
                for row, x, y in zip(result["sweep"], xs, ys):
                    ax.annotate(f"K={row['k']}", (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
        if metric == ANSWER_METRIC:  # memstream without the profile text, the equal-token figure
            xs = [row["memstream"]["context_tokens"] for row in result["sweep"]]
            ys = [row["memstream"].get(EVIDENCE_ANSWER_METRIC) or 0.0 for row in result["sweep"]]
            ax.plot(xs, ys, "o--", color="grey", label="memstream, evidence only")
        full = result["recall"]["overall"]["full_context"]
        ax.plot(
            [full["context_tokens"]],
            [full.get(metric) or 0.0],
            "k*",
            markersize=12,
            label=METHOD_LABELS["full_context"],
        )
        ax.set_xscale("log")
        ax.set_xlabel("context tokens per question (log)")
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{_headline_title(result)}, recall against context budget", fontsize=10)
    return save_figure(plt, fig, out)


def plot_groups(result: dict[str, Any], out: Path) -> Path:
    """Headline recall per category / question type (headline split), memstream against every
    baseline at the same tokens."""
    plt = pyplot()
    metric = result["metrics"][0] if result["bench"] == "locomo" else result["metrics"][-1]
    groups = [g for g, row in result["recall"]["per_group"].items() if row["memstream"][metric] is not None]
    fig, ax = plt.subplots(figsize=(max(7.0, 1.8 * len(groups) + 2), 4.5))
    width = 0.84 / len(COMPARED)
    middle = (len(COMPARED) - 1) / 2
    for i, method in enumerate(COMPARED):
        ys = [result["recall"]["per_group"][g][method][metric] or 0.0 for g in groups]
        hatch = "//" if method in SENTENCES else None
        ax.bar(
            [x + (i - middle) * width for x in range(len(groups))], ys, width, label=METHOD_LABELS[method], hatch=hatch
        )
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([result["groups"][g]["name"] for g in groups], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"{_headline_title(result)}: {metric.replace('_', ' ')} per group (same tokens)", fontsize=10)
    return save_figure(plt, fig, out)


def write_outputs(out: Path, bench: BenchSet, result: dict[str, Any]) -> dict[str, Any]:
    plots = {}
    if result["sweep"]:
        plots["recall against context budget"] = plot_budget(result, out / "recall_vs_budget.png").name
    plots["recall per group"] = plot_groups(result, out / "recall_by_group.png").name
    result["plots"] = plots
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "report.md").write_text(render_report(result, plots) + "\n")
    return result


__all__ = [
    "METHODS",
    "COMPARED",
    "BASELINES",
    "WHOLE_TURNS",
    "SENTENCES",
    "SPLITS",
    "split_summary",
    "method_point",
    "aggregate",
    "summarize_run",
    "render_report",
    "plot_budget",
    "plot_groups",
    "write_outputs",
]
