"""``memstream bench prompt-tokens``: prompt tokens per turn of the extraction call, as the local LLM
(SmolLM2) tokenizes them: the flush rendered with a timestamp on every turn (before 2026-12-02) and
with the date once per day (now), over the first sessions of a LoCoMo conversation (one topic per
session)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from memstream.adapters.gguf_convert import smollm2_gguf_path
from memstream.datasets import load_locomo, locomo_turns
from memstream.localllm.engine import Engine
from memstream.processors.write import prompts
from memstream.processors.write.compress import compress_turn
from memstream.schemas import CompressedTurn


def timestamp_per_turn(topics: Sequence[tuple[str, Sequence[CompressedTurn]]]) -> str:  # what extract_user replaced
    lines = []
    for i, (label, turns) in enumerate(topics):
        lines.append(f"Topic {prompts.topic_key(i)} ({label}):")
        for ct in turns:
            t = ct.turn
            captions = f" (shares image: {'; '.join(t.image_captions)})" if t.image_captions else ""
            lines.append(f"[{t.turn_id}] {t.event_time:%Y-%m-%d %H:%M} {t.speaker}: {ct.compressed_text}{captions}")
    return "Conversation:\n" + "\n".join(lines) + "\n\nExtract the memory JSON."


def session_topics(turns: list[CompressedTurn]) -> list[tuple[str, list[CompressedTurn]]]:
    """The turns as extraction topics, one per session, in order."""
    sessions: dict[str, list[CompressedTurn]] = {}
    for ct in turns:
        sessions.setdefault(ct.turn.session_id, []).append(ct)
    return [(f"session {sid}", items) for sid, items in sessions.items()]


def run_prompt_tokens(data: Path, *, conversation: int = 0, sessions: int = 10) -> dict[str, Any]:
    """Both renderings of the first ``sessions`` sessions of the ``conversation``-th sample of ``data``."""
    engine = Engine(str(smollm2_gguf_path()), n_ctx=16384, n_threads=1)
    sample = load_locomo(data)[conversation]
    turns = [compress_turn(t, None, 0.7) for t in locomo_turns(sample, tenant_id="t", max_sessions=sessions)]
    topics = session_topics(turns)
    result: dict[str, Any] = {"conversation": sample.sample_id, "sessions": len(topics), "turns": len(turns)}
    result["text_tokens_per_turn"] = round(sum(engine.count_tokens(ct.compressed_text) for ct in turns) / len(turns), 1)
    renderings = {"timestamp_per_turn": timestamp_per_turn(topics), "date_per_day": prompts.extract_user(topics)}
    for name, text in renderings.items():
        messages = [{"role": "system", "content": prompts.EXTRACT_SYSTEM}, {"role": "user", "content": text}]
        n = len(engine.prompt_tokens(messages))
        result[name] = {"prompt_tokens": n, "per_turn": round(n / len(turns), 1)}
    return result
