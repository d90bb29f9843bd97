"""LongMemEval-S, read into ``Turn`` messages: each question's haystack as its own conversation
(``longmemeval_turns``), or joined into one session-less stream whose session starts are the topic
changes the segmentation bench scores (``topic_change_stream``). A benchmark's data, so it lives
with the benchmarks; the conversation files a user ingests are read by memstream.datasets."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

from memstream.schemas import Turn


@dataclass
class LongMemEvalQuestion:
    question_id: str
    question_type: str
    question: str
    answer: str
    answer_session_ids: list[str]
    haystack_session_ids: list[str]
    haystack_dates: list[str]
    haystack_sessions: list[list[dict[str, Any]]]
    question_date: str = ""


def load_longmemeval(path: Path) -> list[LongMemEvalQuestion]:
    data = orjson.loads(Path(path).read_bytes())
    return [
        LongMemEvalQuestion(
            question_id=str(q["question_id"]),
            question_type=str(q.get("question_type", "")),
            question=str(q.get("question", "")),
            answer=str(q.get("answer", "")),
            answer_session_ids=[str(s) for s in q.get("answer_session_ids", [])],
            haystack_session_ids=[str(s) for s in q.get("haystack_session_ids", [])],
            haystack_dates=[str(d) for d in q.get("haystack_dates", [])],
            haystack_sessions=q.get("haystack_sessions", []),
            question_date=str(q.get("question_date", "")),
        )
        for q in data
    ]


LONGMEMEVAL_DATE = "%Y/%m/%d (%a) %H:%M"


def longmemeval_date(text: str) -> datetime:
    """A LongMemEval date (``2023/05/20 (Sat) 02:21``), as UTC."""
    return datetime.strptime(text, LONGMEMEVAL_DATE).replace(tzinfo=timezone.utc)


def longmemeval_conversation_id(question: LongMemEvalQuestion) -> str:
    return re.sub(r"[^A-Za-z0-9_.:@\-]", "_", question.question_id)[:100] or "q"


def longmemeval_turn_id(session_id: str, index: int) -> str:
    """``<haystack session id>:<turn index>`` (the ids stay valid ids, and say where the turn came from)."""
    return f"{re.sub(r'[^A-Za-z0-9_.@-]', '_', session_id)[:100]}:{index}"


def answer_sessions(q: LongMemEvalQuestion) -> list[tuple[datetime, str, list[str]]]:
    """The question's answer sessions in haystack order: (date, session id, the turn ids of its
    ``has_answer`` turns)."""
    return [
        (longmemeval_date(date), sid, [longmemeval_turn_id(sid, i) for i, t in enumerate(turns) if t.get("has_answer")])
        for date, sid, turns in zip(q.haystack_dates, q.haystack_session_ids, q.haystack_sessions)
        if sid in set(q.answer_session_ids)
    ]


def longmemeval_turns(question: LongMemEvalQuestion, *, tenant_id: str) -> list[Turn]:
    """A question's haystack as its own conversation: sessions in time order with their dates, each
    turn ``<session>:<i>`` (its index in the session, as ``has_answer`` counts), each session's
    last turn marked. Empty turns are skipped, keeping their index."""
    sessions = sorted(
        zip(question.haystack_dates, question.haystack_session_ids, question.haystack_sessions),
        key=lambda s: longmemeval_date(s[0]),
    )
    conversation_id = longmemeval_conversation_id(question)
    turns: list[Turn] = []
    for date, session_id, session in sessions:
        start = longmemeval_date(date)
        kept = [(i, t) for i, t in enumerate(session) if str(t.get("content", "")).strip()]
        for n, (i, t) in enumerate(kept):
            user = t.get("role") == "user"
            turns.append(
                Turn(
                    tenant_id=tenant_id,
                    conversation_id=conversation_id,
                    session_id=re.sub(r"[^A-Za-z0-9_.:@\-]", "_", session_id)[:100],
                    turn_id=longmemeval_turn_id(session_id, i),
                    speaker="User" if user else "Assistant",
                    role="user" if user else "assistant",
                    text=str(t["content"]),
                    event_time=start + timedelta(seconds=30 * n),
                    metadata={"seq": len(turns)},
                    last_in_session=n == len(kept) - 1,
                )
            )
    return turns


def topic_change_stream(question: LongMemEvalQuestion, *, tenant_id: str) -> tuple[list[Turn], list[int]]:
    """A question's haystack sessions joined into one session-less stream, and the indices of the
    turns that open a new haystack session: known topic changes, the labels of the segmentation bench."""
    turns: list[Turn] = []
    boundaries: list[int] = []
    start = datetime(2023, 1, 1, tzinfo=timezone.utc)
    conversation_id = longmemeval_conversation_id(question)
    for session in question.haystack_sessions:
        session = [t for t in session if str(t.get("content", "")).strip()]
        if not session:
            continue
        if turns:
            boundaries.append(len(turns))
        for t in session:
            i = len(turns)
            turns.append(
                Turn(
                    tenant_id=tenant_id,
                    conversation_id=conversation_id,
                    session_id="stream",
                    turn_id=f"t{i}",
                    speaker="User" if t.get("role") == "user" else "Assistant",
                    role="user" if t.get("role") == "user" else "assistant",
                    text=str(t["content"]),
                    event_time=start + timedelta(seconds=30 * i),
                    metadata={"seq": i},
                )
            )
    if turns:
        turns[-1] = turns[-1].model_copy(update={"last_in_session": True})
    return turns, boundaries
