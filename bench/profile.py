"""``memstream bench profile``: precision and recall of the extractive mode's profile items on
labelled chat lines written for this purpose (``bench/data/profile_statements_*.jsonl``: is the line
a statement of its speaker's own taste?). The rules were chosen on the ``tune`` file; the ``report``
file was written after they were fixed and is the figure. The keyword rule memstream used before is
measured beside them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from memstream.bench.report import source_commit
from memstream.processors.write.extract import card_sentences
from memstream.processors.write.statements import speakers_preference

DATA = Path(__file__).resolve().parent / "data"
SPLITS = ("tune", "report")
# The rule before: any sentence with a taste word was filed under its speaker's preferences.
KEYWORD_RULE = re.compile(r"\b(love|like|enjoy|prefer|favou?rite|hate|dislike|can't stand|fan of)\b", re.I)


def load_split(split: str, data: Path = DATA) -> list[dict[str, Any]]:
    path = data / f"profile_statements_{split}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def filed(text: str, rule: Callable[[str], bool]) -> bool:
    """Whether extraction files any sentence of this turn under its speaker's profile."""
    return any(rule(sentence) for sentence in card_sentences(text))


def scores(rows: list[dict[str, Any]], rule: Callable[[str], bool]) -> dict[str, Any]:
    predicted = [filed(r["text"], rule) for r in rows]
    tp = sum(p and r["preference"] for p, r in zip(predicted, rows))
    fp = sum(p and not r["preference"] for p, r in zip(predicted, rows))
    fn = sum(not p and r["preference"] for p, r in zip(predicted, rows))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {
        "lines": len(rows),
        "filed": tp + fp,
        "precision": round(precision, 3),
        "recall": round(recall, 3),
        "f1": round(2 * precision * recall / (precision + recall), 3) if precision + recall else 0.0,
        "wrongly_filed": [r["text"] for p, r in zip(predicted, rows) if p and not r["preference"]],
        "missed": [r["text"] for p, r in zip(predicted, rows) if not p and r["preference"]],
    }


def run_profile_bench(data: Path = DATA) -> dict[str, Any]:
    rules: dict[str, Callable[[str], bool]] = {
        "statement_rules": speakers_preference,
        "keyword_rule_before": lambda s: bool(KEYWORD_RULE.search(s)),
    }
    return {
        "bench": "profile",
        "commit": source_commit(),
        "splits": {
            split: {name: scores(load_split(split, data), rule) for name, rule in rules.items()} for split in SPLITS
        },
    }
