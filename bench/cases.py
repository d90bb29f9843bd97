"""The end-to-end benchmarks' questions and how a returned context is scored (pure).

A :class:`BenchSet` is what ``bench locomo`` and ``bench longmemeval`` stream and ask: every
conversation's turns (LoCoMo: a sample; LongMemEval: one question's haystack, sessions in time
order) and every question with its gold evidence. Scores are recalls of gold turns (and, for
LongMemEval, gold sessions) inside the provenance of what a method returned.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Sequence

from memstream.bench.scoring import evidence_recall
from memstream.datasets import (
    LONGMEMEVAL_DATE,
    LongMemEvalQuestion,
    load_locomo,
    load_longmemeval,
    locomo_turns,
    longmemeval_conversation_id,
    longmemeval_turn_id,
    longmemeval_turns,
)
from memstream.processors.timeparse import parse_locomo_datetime
from memstream.schemas import Turn
from memstream.schemas.base import base_turn_id

TENANT = "bench"
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass(frozen=True)
class BenchQuestion:
    qid: str
    conversation_id: str
    text: str
    asked_at: datetime
    group: str  # LoCoMo category ("1".."4"), LongMemEval question type
    gold_answer: str
    gold_turns: tuple[str, ...]  # LoCoMo evidence dia_ids; LongMemEval has_answer turns
    gold_sessions: tuple[str, ...] = ()  # LongMemEval answer sessions (as the turn ids name them)
    abstention: bool = False  # LongMemEval "_abs": nothing to find, the right answer says so

    @property
    def retrieval_scored(self) -> bool:
        """Abstention questions have no evidence to find (left out of the recalls, as the protocol says)."""
        return not self.abstention and bool(self.gold_turns or self.gold_sessions)


@dataclass
class BenchSet:
    name: str  # "locomo" | "longmemeval"
    data: Path
    conversations: dict[str, list[Turn]]
    questions: list[BenchQuestion]
    metrics: tuple[str, ...]  # recall keys of :func:`score`, the first is the headline
    group_names: dict[str, str] = field(default_factory=dict)
    # Where the raw-turn baselines search: "own" = a store of ``speaker: text`` built by the bench
    # (LoCoMo's questions name the speakers); "pipeline" = the turns memstream stored, same model
    # and text (LongMemEval's speakers are just User/Assistant, and embedding its 6M tokens again
    # would double the run).
    baseline_index: str = "own"

    @property
    def turns(self) -> int:
        return sum(len(t) for t in self.conversations.values())


def score(q: BenchQuestion, turn_ids: Sequence[str]) -> dict[str, float]:
    """Recalls of a returned context given the turn ids in its provenance (empty for abstention)."""
    if not q.retrieval_scored:
        return {}
    turn_ids = [base_turn_id(t) for t in turn_ids]  # a chunk of a long turn counts as the turn
    out: dict[str, float] = {}
    if q.gold_sessions:
        sessions = {session_of(t) for t in turn_ids}
        out["session_recall"] = sum(s in sessions for s in q.gold_sessions) / len(q.gold_sessions)
    if q.gold_turns:
        out["turn_recall" if q.gold_sessions else "evidence_recall"] = evidence_recall(q.gold_turns, turn_ids)
    return out


def session_of(turn_id: str) -> str:
    """The session a LongMemEval turn id names (``<session>:<index>``)."""
    return turn_id.rsplit(":", 1)[0]


def subset(questions: Sequence[BenchQuestion], n: int | None, seed: int) -> list[BenchQuestion]:
    """``n`` questions drawn with ``seed``, every group represented in proportion (all when ``n`` is
    None or not smaller); the draw keeps the file's order."""
    if n is None or n >= len(questions):
        return list(questions)
    rng = random.Random(seed)
    groups: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        groups.setdefault(q.group, []).append(i)
    # One per group while n allows, the rest by each group's share (largest remainder).
    take = {g: 1 for g in groups} if n >= len(groups) else {g: 0 for g in groups}
    left = {g: len(ix) - take[g] for g, ix in groups.items()}
    spare = n - sum(take.values())
    shares = {g: spare * left[g] / max(sum(left.values()), 1) for g in groups}
    for g in groups:
        take[g] += int(shares[g])
    for g in sorted(groups, key=lambda g: (shares[g] - int(shares[g]), left[g]), reverse=True):
        if sum(take.values()) >= n:
            break
        take[g] += 1
    chosen = sorted(i for g, ix in groups.items() for i in rng.sample(ix, min(take[g], len(ix))))
    return [questions[i] for i in chosen]


def locomo_set(
    data: Path,
    *,
    conversations: Sequence[str] = (),
    categories: Sequence[int] = (1, 2, 3, 4),
    questions: int | None = None,
    seed: int = 0,
) -> BenchSet:
    """LoCoMo: each sample is a conversation; category 1–4 questions with evidence, asked the day
    after the conversation's last session. With ``questions``, only their conversations stream."""
    samples = load_locomo(data)
    if conversations:
        unknown = sorted(set(conversations) - {s.sample_id for s in samples})
        if unknown:
            raise ValueError(f"{data} has no conversation {', '.join(unknown)}")
        samples = [s for s in samples if s.sample_id in set(conversations)]
    asked: list[BenchQuestion] = []
    for sample in samples:
        last = max((parse_locomo_datetime(d) for _, d, _ in sample.sessions), default=datetime.now(timezone.utc))
        for i, qa in enumerate(sample.qa):
            if qa.category in categories and qa.evidence:
                asked.append(
                    BenchQuestion(
                        f"{sample.sample_id}:q{i}",
                        sample.sample_id,
                        qa.question,
                        last + timedelta(days=1),
                        str(qa.category),
                        str(qa.answer or ""),
                        tuple(qa.evidence),
                    )
                )
    asked = subset(asked, questions, seed)
    needed = {q.conversation_id for q in asked}
    convs = {s.sample_id: list(locomo_turns(s, tenant_id=TENANT)) for s in samples if s.sample_id in needed}
    if not asked:
        raise ValueError(f"no questions of categories {list(categories)} with evidence in {data}")
    return BenchSet(
        "locomo",
        data,
        convs,
        asked,
        ("evidence_recall",),
        {str(c): f"{c} {name}" for c, name in LOCOMO_CATEGORIES.items()},
    )


def longmemeval_question(q: LongMemEvalQuestion) -> BenchQuestion:
    answer_sessions = set(q.answer_session_ids)
    gold_turns = tuple(
        longmemeval_turn_id(sid, i)
        for sid, session in zip(q.haystack_session_ids, q.haystack_sessions)
        if sid in answer_sessions
        for i, t in enumerate(session)
        if t.get("has_answer")
    )
    gold_sessions = tuple(session_of(longmemeval_turn_id(sid, 0)) for sid in q.answer_session_ids)
    if q.question_date:
        asked_at = datetime.strptime(q.question_date, LONGMEMEVAL_DATE).replace(tzinfo=timezone.utc)
    else:
        asked_at = max(datetime.strptime(d, LONGMEMEVAL_DATE) for d in q.haystack_dates).replace(tzinfo=timezone.utc)
    return BenchQuestion(
        q.question_id,
        longmemeval_conversation_id(q),
        q.question,
        asked_at,
        q.question_type,
        q.answer,
        gold_turns,
        gold_sessions,
        abstention=q.question_id.endswith("_abs"),
    )


def longmemeval_set(data: Path, *, questions: int | None = None, seed: int = 0) -> BenchSet:
    """LongMemEval: each question's haystack is its own conversation (sessions in time order)."""
    raw = load_longmemeval(data)
    if not raw:
        raise ValueError(f"no questions in {data}")
    by_id = {q.question_id: q for q in raw}
    asked = subset([longmemeval_question(q) for q in raw], questions, seed)
    convs = {q.conversation_id: longmemeval_turns(by_id[q.qid], tenant_id=TENANT) for q in asked}
    return BenchSet("longmemeval", data, convs, asked, ("session_recall", "turn_recall"), baseline_index="pipeline")


def full_context(turns: Sequence[Turn]) -> str:
    """What a reader gets without memory: every turn, as ``speaker: text`` lines."""
    return "\n".join(f"{t.speaker}: {t.text}" for t in turns)


__all__ = [
    "TENANT",
    "BenchQuestion",
    "BenchSet",
    "score",
    "session_of",
    "subset",
    "locomo_set",
    "longmemeval_set",
    "longmemeval_question",
    "full_context",
    "LOCOMO_CATEGORIES",
]
