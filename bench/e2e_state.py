"""What an end-to-end run keeps in its output folder, so that an interrupted run resumes: its options'
fingerprint and the phases done (``state.json``), and one line per finished question (``questions.jsonl``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from memstream.bench.cases import BenchSet

STATE = "state.json"
RECORDS = "questions.jsonl"
SENTENCE_STORE = "baseline-sentences"
# Options that only change how the questions are asked: a run may change them until its first
# question is asked (its memories do not depend on them).
ASK_OPTIONS = frozenset({"llm", "judge_model", "planner", "k", "sweep_k", "sweep_tokens"})


@dataclass
class E2EOptions:
    out: Path
    extract: str = "extractive"  # how memories are built: "extractive" or "llm"
    consolidate: bool = True  # consolidate the tenant after ingestion, before asking
    llm: bool = False  # answers (the worker's LLM) and the judge
    judge_base_url: str | None = None  # None: the answer endpoint
    judge_model: str | None = None
    judge_api_key: str | None = None
    planner: str | None = None  # None: rules with the local LLM server, else the configured planner
    k: int | None = None  # evidence items per question (None: configured)
    sweep_k: Sequence[int] = (5, 10, 20, 40)
    # Evidence-token budgets: each question asked again for the items, in rank order, that fit one
    # (the retrieval targets are stated at 300 and 1,000 tokens).
    sweep_tokens: Sequence[int] = (300, 1000)
    torch_threads: int = 1  # per model call: the worker's stages embed in parallel, one core each
    seed: int = 0
    ask_timeout_s: float = 300.0

    def fingerprint(self, bench: BenchSet) -> dict[str, Any]:
        """What a resumed run must share with the interrupted one."""
        ids = hashlib.sha256("\n".join(q.qid for q in bench.questions).encode()).hexdigest()[:16]
        return {
            "bench": bench.name,
            "data": str(Path(bench.data).resolve()),
            "questions": len(bench.questions),
            "question_ids": ids,
            "extract": self.extract,
            "consolidate": self.consolidate,
            "llm": self.llm,
            "judge_model": self.judge_model,
            "planner": self.planner,
            "k": self.k,
            "sweep_k": list(self.sweep_k),
            "sweep_tokens": list(self.sweep_tokens),
            "seed": self.seed,
        }


@dataclass
class RunState:
    """What is done, kept in ``<out>/state.json`` after every step."""

    fingerprint: dict[str, Any]
    produced: list[str] = field(default_factory=list)  # conversations on the turns topic
    produced_turns: int = 0
    ingested: bool = False
    consolidated: bool = False
    ingest_seconds: float = 0.0  # worker time spent ingesting, over all segments
    ingest_segments: int = 0
    ingest_commits: list[str] = field(default_factory=list)  # the code each segment ran, in order, once each
    indexed_turns: int = 0  # turn points written in earlier segments (progress only)
    construction: dict[str, dict[str, int]] = field(default_factory=dict)  # LLM per stage, all segments
    store_counts: dict[str, int] = field(default_factory=dict)
    consolidation_s: float = 0.0
    consolidation_decisions: dict[str, int] = field(default_factory=dict)
    started_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @classmethod
    def open(cls, out: Path, fingerprint: dict[str, Any], *, fresh: bool) -> RunState:
        path = out / STATE
        if fresh or not path.exists():
            if fresh:
                for name in (STATE, RECORDS):
                    (out / name).unlink(missing_ok=True)
                _remove_tree(out / "deployment")
                _remove_tree(out / "baseline")
                _remove_tree(out / SENTENCE_STORE)
            out.mkdir(parents=True, exist_ok=True)
            state = cls(fingerprint)
            state.save(out)
            return state
        state = cls(**json.loads(path.read_text()))
        differs = sorted(
            k for k in fingerprint.keys() | state.fingerprint.keys() if fingerprint.get(k) != state.fingerprint.get(k)
        )
        if differs and set(differs) <= ASK_OPTIONS and not read_records(out):
            state.fingerprint = fingerprint  # nothing asked yet: the new way of asking applies to all
            state.save(out)
        elif differs:
            raise ValueError(
                f"{out} holds a run with other options ({', '.join(differs)}): "
                "pass --fresh to start it over, or another --out"
            )
        return state

    def save(self, out: Path) -> None:
        tmp = out / (STATE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, out / STATE)


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def read_records(out: Path) -> dict[str, dict[str, Any]]:
    """Finished questions by id (a line cut short by a crash is ignored: that question is asked again)."""
    path = out / RECORDS
    records: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                records[record["qid"]] = record
    return records


def append_record(out: Path, record: dict[str, Any]) -> None:
    path = out / RECORDS
    # After a crash mid-write the file ends in a cut line: start on a line of our own.
    cut = False
    if path.exists() and path.stat().st_size:
        with path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            cut = fh.read(1) != b"\n"
    with path.open("a") as fh:
        fh.write(("\n" if cut else "") + json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
