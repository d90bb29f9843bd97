"""Readers of conversation files into ``Turn`` messages (LoCoMo JSON, JSONL turns)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

import orjson

from memstream.processors.timeparse import parse_locomo_datetime
from memstream.schemas import Turn

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D(\d+):(\d+)")


def demo_conversation_path() -> Path:
    """A short conversation written for memstream (LoCoMo format), shipped with the package."""
    return Path(str(resources.files("memstream") / "data" / "demo_conversation.json"))


@dataclass
class QA:
    question: str
    answer: str | None
    evidence: list[str]
    category: int


@dataclass
class LocomoSample:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[tuple[int, str, list[dict[str, Any]]]]  # (number, date_time, turns)
    qa: list[QA] = field(default_factory=list)

    @property
    def turn_count(self) -> int:
        return sum(len(turns) for _, _, turns in self.sessions)


def parse_evidence(raw: Any) -> list[str]:
    """Gold dia_ids; some official ids are malformed ("D8:6; D9:17", "D:11:26"): keep what parses."""
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        for m in _DIA_ID.finditer(str(item)):
            dia = f"D{int(m.group(1))}:{int(m.group(2))}"
            if dia not in out:
                out.append(dia)
    return out


def load_locomo(path: Path) -> list[LocomoSample]:
    data = orjson.loads(Path(path).read_bytes())
    if isinstance(data, dict):
        data = [data]
    samples = []
    for raw in data:
        conv = raw["conversation"]
        sessions = []
        for key, turns in conv.items():
            m = _SESSION_KEY.match(key)
            if not m or not isinstance(turns, list) or not turns:
                continue
            number = int(m.group(1))
            sessions.append((number, conv.get(f"{key}_date_time", ""), turns))
        sessions.sort(key=lambda s: s[0])
        qa = [
            QA(
                question=q["question"],
                answer=None if q.get("answer") is None else str(q["answer"]),
                evidence=parse_evidence(q.get("evidence", [])),
                category=int(q.get("category", 0)),
            )
            for q in raw.get("qa", [])
        ]
        samples.append(
            LocomoSample(
                raw.get("sample_id", "conv"), conv.get("speaker_a", "A"), conv.get("speaker_b", "B"), sessions, qa
            )
        )
    return samples


def locomo_turns(
    sample: LocomoSample, *, tenant_id: str, conversation_id: str | None = None, max_sessions: int | None = None
) -> Iterator[Turn]:
    """The sample's turns in order; the last turn of each session is marked, times are per session."""
    conversation_id = conversation_id or sample.sample_id
    seq = 0
    for number, date_time, turns in sample.sessions[:max_sessions]:
        start = parse_locomo_datetime(date_time)
        for i, t in enumerate(turns):
            captions = [t["blip_caption"]] if t.get("blip_caption") else []
            yield Turn(
                tenant_id=tenant_id,
                conversation_id=conversation_id,
                session_id=f"S{number}",
                turn_id=t["dia_id"],
                speaker=t["speaker"],
                role="user",
                text=t.get("text") or (f"[image] {captions[0]}" if captions else "[empty]"),
                event_time=start + timedelta(seconds=30 * i),
                image_captions=captions,
                metadata={"seq": seq, "session_number": number},
                last_in_session=i == len(turns) - 1,
            )
            seq += 1


def jsonl_turns(path: Path) -> Iterator[Turn]:
    with Path(path).open("rb") as fh:
        for line in fh:
            if line.strip():
                yield Turn.from_bytes(line)


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


def longmemeval_conversation_id(question: LongMemEvalQuestion) -> str:
    return re.sub(r"[^A-Za-z0-9_.:@\-]", "_", question.question_id)[:100] or "q"


def longmemeval_turn_id(session_id: str, index: int) -> str:
    """``<haystack session id>:<turn index>`` (the ids stay valid ids, and say where the turn came from)."""
    return f"{re.sub(r'[^A-Za-z0-9_.@-]', '_', session_id)[:100]}:{index}"


def longmemeval_turns(question: LongMemEvalQuestion, *, tenant_id: str) -> list[Turn]:
    """A question's haystack as its own conversation: sessions in time order with their dates, each
    turn ``<session>:<i>`` (its index in the session, as ``has_answer`` counts), each session's
    last turn marked. Empty turns are skipped, keeping their index."""
    sessions = sorted(
        zip(question.haystack_dates, question.haystack_session_ids, question.haystack_sessions),
        key=lambda s: datetime.strptime(s[0], LONGMEMEVAL_DATE),
    )
    conversation_id = longmemeval_conversation_id(question)
    turns: list[Turn] = []
    for date, session_id, session in sessions:
        start = datetime.strptime(date, LONGMEMEVAL_DATE).replace(tzinfo=timezone.utc)
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
