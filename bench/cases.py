"""The end-to-end benchmarks' questions and how a returned context is scored (pure).

A :class:`BenchSet` is what ``bench locomo`` and ``bench longmemeval`` stream and ask: every
conversation's turns (LoCoMo: a sample; LongMemEval: one question's haystack, sessions in time
order) and every question with its gold evidence. Scores are recalls of gold turns (and, for
LongMemEval, gold sessions) inside the provenance of what a method returned, whether its texts bear
the gold answer, and LongMemEval's own ranked metrics. Every question belongs to a tuning split
(:func:`split_of`), so figures on the part nobody tuned on are reported apart.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Sequence

from memstream.bench.longmemeval import (
    LongMemEvalQuestion,
    answer_sessions,
    load_longmemeval,
    longmemeval_conversation_id,
    longmemeval_date,
    longmemeval_turn_id,
    longmemeval_turns,
)
from memstream.bench.scoring import bears_answer, evidence_recall, first_distinct, ndcg, recall_all, recall_any
from memstream.datasets import load_locomo, locomo_turns
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

    @property
    def answer_scored(self) -> bool:
        """Answer-bearing recall needs a gold answer to look for: abstention questions are left out."""
        return not self.abstention and bool(self.gold_answer.strip())


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
    # Question id -> "tune" or "report" (:func:`split_of`); a set built without one reports all.
    splits: dict[str, str] = field(default_factory=dict)

    @property
    def turns(self) -> int:
        return sum(len(t) for t in self.conversations.values())

    def split(self, qid: str) -> str:
        """The question's split: ``"tune"`` or ``"report"``."""
        return self.splits.get(qid, REPORT)


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


def answer_score(q: BenchQuestion, texts: Sequence[str]) -> dict[str, float]:
    """Answer-bearing recall of a returned context: 1.0 when its texts hold the gold answer
    (:func:`memstream.bench.scoring.bears_answer`), else 0.0; empty where no answer is scored."""
    return {"answer_bearing": float(bears_answer(q.gold_answer, texts))} if q.answer_scored else {}


LONGMEMEVAL_RANKED = (
    "session_recall_any",
    "session_recall_all",
    "session_ndcg",
    "turn_recall_any",
    "turn_recall_all",
    "turn_ndcg",
)


def ranked_scores(q: BenchQuestion, turn_ids: Sequence[str], k: int, *, cited: bool) -> dict[str, float]:
    """LongMemEval's own retrieval metrics at ``k``: recall_any, recall_all and NDCG
    (:func:`memstream.bench.scoring.ndcg`) of the returned units against the gold sessions
    (``answer_session_ids``) and gold turns (``has_answer``); a level without gold is left out, and
    so is an abstention question.

    - ``cited=True`` (memstream at K = ``k`` evidence items): ``turn_ids`` is the provenance of the
      ``k`` items in rank order; the units are all the turns they cite, and all the sessions of those
      turns (in order of first citation); NDCG's cutoff is ``max(k, units)``.
    - ``cited=False`` (a baseline): ``turn_ids`` is its ranking of turns; the units are its first
      ``k`` distinct turns (turn level) and its first ``k`` distinct sessions (session level, as
      LongMemEval turns a turn ranking into a session ranking); NDCG's cutoff is ``k``.
    """
    if not q.retrieval_scored:
        return {}
    turns = first_distinct(base_turn_id(t) for t in turn_ids)
    sessions = first_distinct(session_of(t) for t in turns)
    out: dict[str, float] = {}
    for level, ranking, gold in (("session", sessions, q.gold_sessions), ("turn", turns, q.gold_turns)):
        if not gold:
            continue
        units = ranking if cited else ranking[:k]
        cutoff = max(k, len(units)) if cited else k
        out[f"{level}_recall_any"] = recall_any(units, gold)
        out[f"{level}_recall_all"] = recall_all(units, gold)
        out[f"{level}_ndcg"] = round(ndcg(units, gold, cutoff), 6)
    return out


def session_of(turn_id: str) -> str:
    """The session a LongMemEval turn id names (``<session>:<index>``)."""
    return turn_id.rsplit(":", 1)[0]


TUNE, REPORT = "tune", "report"
TUNE_CONVERSATIONS = 2  # LoCoMo: conversations (first in sorted sample-id order) the rules may be tuned on
TUNE_BUCKETS = 3  # LongMemEval: one question in three (by a hash of its id) is for tuning


def split_of(q: BenchQuestion, *, bench: str, sample_ids: Sequence[str] = ()) -> str:
    """Which part of a benchmark a question belongs to: ``"tune"`` (figures anyone may look at while
    changing the rules) or ``"report"`` (the untuned part: every headline figure comes from it).

    - LoCoMo, by conversation: the first :data:`TUNE_CONVERSATIONS` of ``sample_ids`` (every sample
      id in the data file, so the split does not depend on which conversations a run asks about) in
      sorted order are tune, the rest report. On the dev file: conv-26 and conv-30 tune; conv-41,
      conv-42 and conv-43 report.
    - LongMemEval, by question: tune when the first 8 hex digits of SHA-256 of the question id, as an
      integer, are divisible by :data:`TUNE_BUCKETS` (about a third), else report. A question keeps
      its part whatever else is in the file.
    """
    if bench == "locomo":
        return TUNE if q.conversation_id in sorted(sample_ids)[:TUNE_CONVERSATIONS] else REPORT
    digest = int(hashlib.sha256(q.qid.encode("utf-8")).hexdigest()[:8], 16)
    return TUNE if digest % TUNE_BUCKETS == 0 else REPORT


def check_split(split: str | None) -> None:
    """A split named on the command line is one of the two parts :func:`split_of` assigns."""
    if split is not None and split not in (TUNE, REPORT):
        raise ValueError(f"unknown split {split!r}: expected {TUNE!r} or {REPORT!r}")


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
    split: str | None = None,
) -> BenchSet:
    """LoCoMo: each sample is a conversation; category 1–4 questions with evidence, asked the day
    after the conversation's last session. With ``questions`` or ``split`` (:func:`split_of`: tune or
    report), only the questions drawn and their conversations stream."""
    check_split(split)
    samples = load_locomo(data)
    sample_ids = [s.sample_id for s in samples]  # the whole file: the split ignores ``conversations``
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
    if split is not None:
        asked = [q for q in asked if split_of(q, bench="locomo", sample_ids=sample_ids) == split]
    asked = subset(asked, questions, seed)
    needed = {q.conversation_id for q in asked}
    convs = {s.sample_id: list(locomo_turns(s, tenant_id=TENANT)) for s in samples if s.sample_id in needed}
    if not asked:
        part = f" in the {split} split" if split else ""
        raise ValueError(f"no questions of categories {list(categories)} with evidence{part} in {data}")
    return BenchSet(
        "locomo",
        data,
        convs,
        asked,
        ("evidence_recall",),
        {str(c): f"{c} {name}" for c, name in LOCOMO_CATEGORIES.items()},
        splits={q.qid: split_of(q, bench="locomo", sample_ids=sample_ids) for q in asked},
    )


def longmemeval_question(q: LongMemEvalQuestion) -> BenchQuestion:
    gold_turns = tuple(t for _, _, marked in answer_sessions(q) for t in marked)
    gold_sessions = tuple(session_of(longmemeval_turn_id(sid, 0)) for sid in q.answer_session_ids)
    if q.question_date:
        asked_at = longmemeval_date(q.question_date)
    else:
        asked_at = max(longmemeval_date(d) for d in q.haystack_dates)
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


def longmemeval_set(data: Path, *, questions: int | None = None, seed: int = 0, split: str | None = None) -> BenchSet:
    """LongMemEval: each question's haystack is its own conversation (sessions in time order). With
    ``split`` (tune or report), only that part's questions and their haystacks (a question keeps its
    part whatever else is in the file, so a run of one split asks what a whole run reports for it)."""
    check_split(split)
    raw = load_longmemeval(data)
    by_id = {q.question_id: q for q in raw}
    candidates = [longmemeval_question(q) for q in raw]
    if split is not None:
        candidates = [q for q in candidates if split_of(q, bench="longmemeval") == split]
    if not candidates:
        raise ValueError(f"no questions{f' in the {split} split' if split else ''} in {data}")
    asked = subset(candidates, questions, seed)
    convs = {q.conversation_id: longmemeval_turns(by_id[q.qid], tenant_id=TENANT) for q in asked}
    return BenchSet(
        "longmemeval",
        data,
        convs,
        asked,
        ("session_recall", "turn_recall"),
        baseline_index="pipeline",
        splits={q.qid: split_of(q, bench="longmemeval") for q in asked},
    )


def full_context(turns: Sequence[Turn]) -> str:
    """What a reader gets without memory: every turn, one line each, as the whole-turn baselines index
    it (``speaker: text`` and the turn's image captions)."""
    from memstream.bench.retrieval import baseline_turn_text  # the heavy module, only when a run needs it

    return "\n".join(baseline_turn_text(t) for t in turns)


__all__ = [
    "TENANT",
    "BenchQuestion",
    "BenchSet",
    "score",
    "answer_score",
    "ranked_scores",
    "LONGMEMEVAL_RANKED",
    "check_split",
    "split_of",
    "TUNE",
    "REPORT",
    "session_of",
    "subset",
    "locomo_set",
    "longmemeval_set",
    "longmemeval_question",
    "full_context",
    "LOCOMO_CATEGORIES",
]
