"""Stage 2: hybrid topic segmentation of a conversation's stream of turns (LightMem).

Turns wait in a per-conversation *sensory window*. When it is full (or the session ends, or the
conversation idles) the window is segmented:

- fine boundaries: cosine similarity of consecutive turn embeddings under θ; θ starts at 0.2 and,
  in a full window with no boundary, rises by 0.05 up to 0.5 until one appears;
- coarse candidates: gaps where the encoder's turn-to-turn attention (cohesion of the calibrated
  "semantic" heads, or every upper-layer head, z-scored within the window) is a local minimum under
  the window mean;
- hybrid: each coarse candidate confirms the nearest fine boundary within ±3 turns. A new session
  always cuts.

The window's last ``carry_turns`` turns are kept as context for the next window, so a boundary
near the window's end is judged with the turns after it. Everything here is pure: the caller
supplies embeddings and attention cohesion through two small callables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Container, Literal, Sequence

import numpy as np

from memstream.processors.ids import stable_id
from memstream.processors.text import topic_label
from memstream.processors.write.table_entry import TableEntry
from memstream.schemas import CompressedTurn, SegmentedTurn, Turn

Method = Literal["hybrid", "similarity", "attention"]
Head = tuple[int, int]  # (layer, head)

EmbedFn = Callable[[Sequence[str]], np.ndarray]
CohesionFn = Callable[[Sequence[str]], np.ndarray]  # (n - 1, layers, heads)


@dataclass(frozen=True)
class SegmentParams:
    method: Method = "hybrid"
    window_turns: int = 12
    carry_turns: int = 3
    theta_start: float = 0.2
    theta_step: float = 0.05
    theta_max: float = 0.5
    coarse_radius: int = 3
    coarse_z: float = 0.0  # a coarse candidate's cohesion lies this many std under the window mean
    heads: tuple[Head, ...] = ()  # empty: every head of the upper half of the layers

    def __post_init__(self) -> None:
        if not 0 <= self.carry_turns < self.window_turns:
            raise ValueError("carry_turns must be smaller than window_turns")

    @property
    def uses_attention(self) -> bool:
        return self.method in ("hybrid", "attention")


# --- boundary rules over one window (index a = the gap before turn a, 1 <= a < n) -------------


def adjacent_similarities(vectors: np.ndarray) -> np.ndarray:
    """``sims[a - 1]`` = cosine similarity of turns ``a - 1`` and ``a`` (vectors are normalised)."""
    if len(vectors) < 2:
        return np.zeros(0, dtype=np.float32)
    return np.einsum("ij,ij->i", vectors[:-1], vectors[1:])


def fine_boundaries(sims: Sequence[float], params: SegmentParams, *, adaptive: bool) -> list[int]:
    """Gaps whose similarity is under θ; with ``adaptive``, θ rises until one appears."""
    theta = params.theta_start
    while True:
        cuts = [a + 1 for a, s in enumerate(sims) if s < theta]
        if cuts or not adaptive or theta >= params.theta_max - 1e-9:
            return cuts
        theta = min(params.theta_max, theta + params.theta_step)


def head_scores(cohesion: np.ndarray, heads: Sequence[Head]) -> np.ndarray:
    """One cohesion score per gap: the chosen heads, each z-scored within the window, averaged."""
    if cohesion.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    layers = cohesion.shape[1]
    chosen = list(heads) or [(layer, h) for layer in range(layers // 2, layers) for h in range(cohesion.shape[2])]
    values = np.stack([cohesion[:, layer, h] for layer, h in chosen], axis=1)  # gaps, heads
    z = (values - values.mean(0)) / (values.std(0) + 1e-6)
    return z.mean(1)


def coarse_candidates(scores: Sequence[float] | np.ndarray, params: SegmentParams) -> list[int]:
    """Gaps at a local minimum of cohesion that lies ``coarse_z`` std under the window mean."""
    s = np.asarray(scores, dtype=np.float64)
    if len(s) < 2:
        return []
    z = (s - s.mean()) / (s.std() + 1e-9)
    out = []
    for i, v in enumerate(z):
        left = z[i - 1] if i > 0 else np.inf
        right = z[i + 1] if i + 1 < len(z) else np.inf
        if v <= left and v <= right and v < -params.coarse_z:
            out.append(i + 1)
    return out


def hybrid_boundaries(fine: Sequence[int], coarse: Sequence[int], radius: int) -> list[int]:
    """The intersection of the two signals: each coarse candidate confirms the nearest fine boundary
    within ``radius`` turns, so a cluster of low-similarity gaps around one topic change (a short
    "thanks!" turn dips twice) yields one cut, not several."""
    kept: set[int] = set()
    for c in coarse:
        near = [b for b in fine if abs(b - c) <= radius and b not in kept]
        if near:
            kept.add(min(near, key=lambda b: (abs(b - c), b)))
    return sorted(kept)


def window_boundaries(
    sims: np.ndarray, cohesion: Callable[[], np.ndarray] | None, params: SegmentParams, *, full: bool
) -> list[int]:
    """The gaps of one window that the configured method cuts at. ``cohesion`` computes the window's
    attention cohesion; hybrid calls it only when similarity proposes a boundary (a window without
    one is cut nowhere, and the attention pass is the costliest step of the stage)."""
    fine = fine_boundaries(sims.tolist(), params, adaptive=full)
    if params.method == "similarity" or (params.method == "hybrid" and not fine):
        return fine
    if cohesion is None:
        raise ValueError(f"segmentation method {params.method!r} needs attention cohesion")
    coarse = coarse_candidates(head_scores(cohesion(), params.heads), params)
    if params.method == "attention":
        return coarse
    return hybrid_boundaries(fine, coarse, params.coarse_radius)


def select_heads(cohesion: np.ndarray, sims: np.ndarray, top_n: int = 6) -> list[Head]:
    """Label-free calibration: the heads whose cohesion tracks embedding similarity most closely.

    Most heads attend by position and blur topic changes; the few "semantic" heads carry the
    signal. ``cohesion`` is (gaps, layers, heads) and ``sims`` the similarity of the same gaps.
    """
    flat = cohesion.reshape(len(cohesion), -1)
    sims = np.asarray(sims, dtype=np.float64)
    corr = np.array(
        [np.corrcoef(flat[:, j], sims)[0, 1] if flat[:, j].std() > 0 else -1.0 for j in range(flat.shape[1])]
    )
    corr = np.nan_to_num(corr, nan=-1.0)
    best = np.argsort(-corr)[:top_n]
    heads = cohesion.shape[2]
    return sorted((int(j // heads), int(j % heads)) for j in best)


# --- the streaming window ----------------------------------------------------------------------


@dataclass
class SegmenterState(TableEntry):
    """Per-conversation state, JSON-serialisable for the changelog-backed table."""

    session_id: str | None = None
    segment_id: str | None = None
    topic_label: str = ""
    segment_index: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)  # CompressedTurn json, not yet emitted
    head_reason: str | None = None  # boundary before pending[0], decided by an earlier window
    seen: list[str] = field(default_factory=list)  # recent turn ids, to drop redeliveries (the open piece)
    seen_sealed: int = 0  # pieces of older ids sealed so far (processors/write/seen_ids.py)
    last_activity: float = 0.0  # wall-clock seconds of the last turn added
    next_seq: int = 0  # the position the conversation's next turn gets (``metadata.seq``)


METADATA_ENTRIES = Turn.model_fields["metadata"].metadata[0].max_length  # a turn's metadata holds at most these


def number_turn(state: SegmenterState, item: CompressedTurn) -> CompressedTurn:
    """The turn with its position in the conversation (``metadata.seq``): the producer's when it
    numbered the turn, else the next one of this conversation's window. Replay windows and the
    timeline order turns by it, so it must grow by one per turn across flushes; the window's state
    is per conversation and saved with the message it reflects, so a replay numbers nothing twice."""
    given = item.turn.seq
    if given is not None:
        state.next_seq = max(state.next_seq, given + 1)  # a producer's numbering and ours do not collide
        return item
    if len(item.turn.metadata) >= METADATA_ENTRIES:
        return item  # no room for it: the flush numbers it within itself, as before
    turn = item.turn.model_copy(update={"metadata": {**item.turn.metadata, "seq": state.next_seq}})
    state.next_seq += 1
    return item.model_copy(update={"turn": turn})


def window_is_idle(state: SegmenterState, now: float, idle_s: float) -> bool:
    return bool(state.pending) and now - state.last_activity >= idle_s


def window_evictable(state: SegmenterState, now: float, evict_idle_s: float) -> bool:
    """The window holds no turn (every one emitted) and none came for ``evict_idle_s``: its entry may
    be deleted. What it forgets is harmless: the next turn opens a new topic, a redelivery older than
    the entry is long committed, and its position comes back from the store (``highest_position``)."""
    return not state.pending and now - state.last_activity >= evict_idle_s


def highest_position(has_position_from: Callable[[int], bool]) -> int | None:
    """The highest turn position of a conversation, given ``has_position_from(p)``: whether it holds
    a turn at position ``p`` or later (None: no numbered turn). Doubling then bisecting: about
    2·log2(n) questions for n turns, one for a conversation never seen."""
    if not has_position_from(0):
        return None
    below, above = 0, 1  # has_position_from(below) holds; has_position_from(above) is not known yet
    while has_position_from(above):
        below, above = above, above * 2
    while above - below > 1:
        middle = (below + above) // 2
        if has_position_from(middle):
            below = middle
        else:
            above = middle
    return below


class Segmenter:
    """Feeds turns through the sensory window; returns the turns it can now assign to segments."""

    remember_turn_ids = 256

    def __init__(self, params: SegmentParams, embed: EmbedFn, cohesion: CohesionFn | None = None):
        if params.uses_attention and cohesion is None:
            raise ValueError(f"segmentation method {params.method!r} needs an attention model")
        self.params = params
        self.embed = embed
        self.cohesion = cohesion

    def add(
        self, state: SegmenterState, item: CompressedTurn, now: float = 0.0, seen_before: Container[str] = ()
    ) -> list[SegmentedTurn]:
        """``seen_before``: the conversation's recent turn ids beyond ``state.seen`` (its sealed pieces)."""
        if item.turn.turn_id in state.seen or item.turn.turn_id in seen_before:
            return []  # redelivered: already in the window or emitted
        item = number_turn(state, item)
        turn = item.turn
        out: list[SegmentedTurn] = []
        if state.session_id is not None and turn.session_id != state.session_id:
            out += self.drain(state)  # the previous session ended without its end marker
        if turn.session_id != state.session_id:
            state.head_reason = "first" if state.segment_id is None else "session"
        state.session_id = turn.session_id
        state.last_activity = now
        state.pending.append(item.wire())  # as written: a worker of the previous release may recover it
        state.seen.append(turn.turn_id)
        del state.seen[: max(0, len(state.seen) - self.remember_turn_ids)]
        if turn.last_in_session:
            out += self.drain(state)
        elif len(state.pending) >= self.params.window_turns:
            out += self._evaluate(state, final=False)
        return out

    def drain(self, state: SegmenterState) -> list[SegmentedTurn]:
        """Segment and emit every pending turn (session end, idle conversation)."""
        return self._evaluate(state, final=True) if state.pending else []

    def _evaluate(self, state: SegmenterState, *, final: bool) -> list[SegmentedTurn]:
        items = [CompressedTurn.model_validate(t) for t in state.pending]
        n = len(items)
        full = n >= self.params.window_turns
        cuts: list[int] = []
        if n >= 2:
            texts = [it.turn.text for it in items]
            sims = adjacent_similarities(self.embed(texts))
            attention = self.cohesion if self.params.uses_attention else None
            cohesion = (lambda: attention(texts)) if attention is not None else None
            cuts = window_boundaries(sims, cohesion, self.params, full=full)
        emit_n = n if final else n - self.params.carry_turns
        reasons: list[str | None] = [state.head_reason] + [None] * (n - 1)
        for a in cuts:
            reasons[a] = self.params.method
        out = self._assign(state, items[:emit_n], reasons[:emit_n])
        state.pending = state.pending[emit_n:]
        state.head_reason = reasons[emit_n] if emit_n < n else None
        return out

    def _assign(
        self, state: SegmenterState, items: list[CompressedTurn], reasons: list[str | None]
    ) -> list[SegmentedTurn]:
        out: list[SegmentedTurn] = []
        for i, (item, reason) in enumerate(zip(items, reasons)):
            if reason is None and state.segment_id is None:
                reason = "first"
            if reason is not None:
                state.segment_index += 1
                turn = item.turn
                state.segment_id = stable_id(item.tenant_id, item.conversation_id, turn.session_id, turn.turn_id)
                # The label reads the segment's turns in this emission (up to its next cut).
                end = next((j for j in range(i + 1, len(items)) if reasons[j] is not None), len(items))
                state.topic_label = topic_label(" ".join(t.compressed_text for t in items[i:end]))
            out.append(
                SegmentedTurn(
                    tenant_id=item.tenant_id,
                    conversation_id=item.conversation_id,
                    item=item,
                    segment_id=state.segment_id,  # type: ignore[arg-type]
                    topic_label=state.topic_label,
                    boundary=reason is not None,
                    boundary_reason=reason or "none",  # type: ignore[arg-type]
                )
            )
        return out
