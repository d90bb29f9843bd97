"""``memstream bench changelog-bytes``: how many bytes each turn writes to the segmenter's and the
STM's changelogs, and what sending that many bytes over loopback TCP costs in CPU (LoCoMo dev,
extractive, today's state layout: recent turn ids in pieces, processors/write/seen_ids.py). The
``*_seen_*`` figures are the ids' share; ``*_late_*`` those of turns 300 on of a conversation,
which with ids in pieces cost what early turns do.

The window's contents do not depend on the embedding, so a seeded random one stands in for the model
(no model load); the STM gets the segmenter's output as in the worker.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memstream.bench.cases import locomo_set
from memstream.config import Settings
from memstream.processors.tokens import count_tokens
from memstream.processors.write import stm
from memstream.processors.write.seen_ids import SeenPieces
from memstream.processors.write.segment import Segmenter, SegmenterState, SegmentParams
from memstream.schemas import CompressedTurn

WHOLE = 10**9  # piece size of the layout before pieces: the ids one list in the entry, never sealed


def state_bytes(data: Path, stm_tokens: int, piece_ids: int = SeenPieces.piece_ids) -> dict[str, float]:
    bench = locomo_set(data)
    rng = np.random.default_rng(0)

    def embed(texts: Sequence[str]) -> np.ndarray:
        vectors = rng.normal(size=(len(texts), 384))
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    segmenter = Segmenter(SegmentParams(method="similarity"), embed)
    policy = stm.StmPolicy(budget_tokens=stm_tokens)
    pieces = {
        "segmenter": SeenPieces(Segmenter.remember_turn_ids, piece_ids),
        "stm": SeenPieces(policy.remember_turn_ids, piece_ids),
    }
    sums = dict.fromkeys(("segmenter", "segmenter_seen", "stm", "stm_seen"), 0)
    late = dict.fromkeys(("segmenter", "stm"), 0)
    turns = late_turns = 0

    def save(table: str, state: Any, position: int) -> None:
        """Count what the stage writes: the sealed pieces, then the entry with its open piece."""
        roll = pieces[table].roll(state.seen, state.seen_sealed)
        written = sum(len(json.dumps(p.ids)) for p in roll.write) if roll else 0
        if roll:
            state.seen, state.seen_sealed = roll.open_ids, roll.sealed
        ids = written + len(json.dumps(state.seen))
        total = len(json.dumps(state.to_dict())) + written
        sums[table] += total
        sums[f"{table}_seen"] += ids
        if position >= 300:
            late[table] += total

    for conversation in bench.conversations.values():
        window, buffer = SegmenterState(), stm.StmState()
        for position, turn in enumerate(conversation):
            tokens = count_tokens(turn.text)
            item = CompressedTurn(
                tenant_id=turn.tenant_id,
                conversation_id=turn.conversation_id,
                turn=turn,
                compressed_text=turn.text,
                tokens_in=tokens,
                tokens_out=tokens,
                compressor="off",
                received_at=datetime.now(timezone.utc),
            )
            for segmented in segmenter.add(window, item):
                stm.add_turn(buffer, segmented, 0.0, policy)
                save("stm", buffer, position)  # the STM stage saves its buffer after every turn it takes
            save("segmenter", window, position)
            turns += 1
            late_turns += position >= 300
    return {
        "turns": turns,
        **{f"{k}_bytes_per_turn": round(v / turns, 1) for k, v in sums.items()},
        **{f"{k}_late_bytes_per_turn": round(v / max(1, late_turns), 1) for k, v in late.items()},
    }


def loopback_send_ms(size: int, sends: int = 2000) -> float:
    """CPU milliseconds one blocking send of ``size`` bytes takes over loopback TCP (a reader drains)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def drain() -> None:
        conn, _ = server.accept()
        while conn.recv(1 << 20):
            pass

    threading.Thread(target=drain, daemon=True).start()
    client = socket.create_connection(server.getsockname())
    payload = b"x" * size
    start = time.thread_time()
    for _ in range(sends):
        client.sendall(payload)
    spent = time.thread_time() - start
    client.close()
    return round(spent * 1000 / sends, 4)


def run_changelog_bytes(data: Path) -> dict[str, Any]:
    """The state bytes per turn of ``data``, and the CPU of sending 1 kB, a turn's state and 100 kB."""
    stm_tokens = Settings().stm_tokens
    result: dict[str, Any] = {"data": str(data), "stm_tokens": stm_tokens, **state_bytes(data, stm_tokens)}
    result["one_list"] = state_bytes(data, stm_tokens, piece_ids=WHOLE)  # the layout before, for comparison
    per_turn = int(result["segmenter_bytes_per_turn"] + result["stm_bytes_per_turn"])
    result["loopback_send_cpu_ms"] = {str(n): loopback_send_ms(n) for n in (1_000, per_turn, 100_000)}
    return result
