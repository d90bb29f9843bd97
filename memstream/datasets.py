"""Readers of conversation files into ``Turn`` messages (LoCoMo JSON, JSONL turns)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
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
