"""Consolidation decisions and how they change stored cards, without destroying history (pure).

A pair of similar cards about the same subject is always oriented by time: only the newer card can
update the older one, whichever arrived first. A decision becomes payload patches:

- ``keep_both``: nothing changes;
- ``duplicate``: the same fact again. The earliest card stays current and records the repeat as
  support; the repeat leaves the current view (``duplicate_of``, ``valid_to``);
- ``supersede``: the newer state replaces the older. The older gets ``valid_to`` (when the newer
  became true) and ``superseded_by``; it stays stored and searchable for questions about the past;
- ``merge``: a combined card with lineage to both; both leave the current view.

Patches combine commutatively (the earliest successor wins, support is a set union), so applying
them in any order, or twice, gives the same state: redelivery and parallel queues are safe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Literal, Mapping

from memstream.processors.ids import point_id
from memstream.schemas import CardPatch

Action = Literal["keep_both", "duplicate", "merge", "supersede"]
ACTIONS: tuple[Action, ...] = ("keep_both", "duplicate", "merge", "supersede")

# Types whose newer statement about a subject can replace an older one. Events and interactions
# happened and stay true; a later event does not undo an earlier one.
STATEFUL_TYPES = frozenset({"state", "preference", "fact", "plan"})
_CHANGE = re.compile(
    r"\b(now|moved|moving|no longer|not anymore|any ?more|switched|changed|quit|left|instead|became|"
    r"new (job|home|house|flat|apartment|address|role|position|name)|started (working|living)|"
    r"relocated|divorced|married|retired)\b",
    re.I,
)
_WS = re.compile(r"\W+")


@dataclass(frozen=True)
class CardView:
    """What the rules need of a stored card."""

    card_id: str
    subject: str
    type: str
    text: str
    event_ts: float | None
    valid_from_ts: float

    @property
    def order(self) -> tuple[float, float, str]:
        """Time order: when it was true, then when it was said, then the id (a total order)."""
        return (self.event_ts if self.event_ts is not None else self.valid_from_ts, self.valid_from_ts, self.card_id)

    @classmethod
    def from_payload(cls, card_id: str, payload: Mapping[str, Any]) -> CardView:
        valid_from = payload.get("valid_from")
        valid_from_ts = datetime.fromisoformat(valid_from).timestamp() if valid_from else 0.0
        return cls(
            card_id,
            str(payload.get("subject", "")),
            str(payload.get("type", "fact")),
            str(payload.get("text", "")),
            payload.get("event_ts"),
            valid_from_ts,
        )


def oriented(a: CardView, b: CardView) -> tuple[CardView, CardView]:
    """(older, newer) by time, whatever order they came in."""
    return (a, b) if a.order <= b.order else (b, a)


def normalized(text: str) -> str:
    return _WS.sub(" ", text.lower()).strip()


def rule_decision(older: CardView, newer: CardView, similarity: float, *, duplicate_similarity: float = 0.95) -> Action:
    """The deterministic decision, used without an LLM and when the LLM's answer is unusable."""
    if normalized(older.text) == normalized(newer.text) or similarity >= duplicate_similarity:
        return "duplicate"
    if older.type in STATEFUL_TYPES and newer.type in STATEFUL_TYPES and _CHANGE.search(newer.text):
        return "supersede"
    return "keep_both"


@dataclass(frozen=True)
class NewCard:
    """A merged card to insert (it needs an embedding and a store point of its own)."""

    card_id: str
    subject: str
    type: str
    text: str
    event_ts: float | None
    lineage: tuple[str, str]


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def patches_for(
    action: Action,
    older: CardView,
    newer: CardView,
    *,
    tenant_id: str,
    conversation_id: str,
    merged_text: str | None = None,
) -> tuple[list[CardPatch], list[NewCard]]:
    """The patches (and, for a merge, the new card) one decision produces. Deterministic ids."""
    if older.order > newer.order:
        raise ValueError("a decision is about (older, newer): only the newer card updates the older")
    became_true = newer.order[0]
    if action == "keep_both":
        return [], []
    if action == "supersede":
        return [
            CardPatch(
                card_id=older.card_id,
                valid_to=_utc(became_true),
                superseded_by=newer.card_id,
                successor_order=newer.order,
            )
        ], []
    if action == "duplicate":
        return [
            CardPatch(
                card_id=newer.card_id,
                valid_to=_utc(newer.valid_from_ts),
                superseded_by=older.card_id,
                successor_order=older.order,
                duplicate_of=older.card_id,
            ),
            CardPatch(card_id=older.card_id, support=[newer.card_id]),
        ], []
    if action == "merge":
        text = merged_text or f"{older.text} {newer.text}"
        merged_id = point_id("merged", tenant_id, conversation_id, [older.card_id, newer.card_id], text)
        merged = NewCard(merged_id, newer.subject, newer.type, text, newer.event_ts, (older.card_id, newer.card_id))
        order = (became_true, newer.valid_from_ts, merged_id)
        return [
            CardPatch(
                card_id=older.card_id, valid_to=_utc(became_true), superseded_by=merged_id, successor_order=order
            ),
            CardPatch(
                card_id=newer.card_id, valid_to=_utc(became_true), superseded_by=merged_id, successor_order=order
            ),
            CardPatch(card_id=merged_id, lineage=[older.card_id, newer.card_id]),
        ], [merged]
    raise ValueError(f"unknown action {action!r}")


def apply_patches(
    payload: Mapping[str, Any], patches: Iterable[CardPatch], *, run_ts: float | None = None
) -> dict[str, Any]:
    """A card's payload after these patches. Commutative and idempotent: the earliest successor
    (by time order) wins, the repeats are a set, so arrival order and redelivery do not matter.
    ``run_ts``, when the patches' consolidation run began, is kept as ``retired_ts`` (the earliest
    run that retired the card): later runs leave the card out of their queues, its own run not."""
    out = dict(payload)
    for patch in patches:
        if patch.superseded_by is not None and run_ts is not None:
            out["retired_ts"] = min(out.get("retired_ts") or run_ts, run_ts)
        if patch.superseded_by is not None and patch.successor_order is not None:
            current = out.get("successor_order")
            if current is None or tuple(patch.successor_order) < tuple(current):
                out["superseded_by"] = patch.superseded_by
                out["valid_to"] = patch.valid_to.isoformat() if patch.valid_to else None
                out["successor_order"] = list(patch.successor_order)
                out["duplicate_of"] = patch.duplicate_of  # the winning decision says what the card became
                out["retired"] = True  # out of the current view (an indexed flag: cheap to filter)
        if patch.support:
            out["support"] = sorted(set(out.get("support") or []) | set(patch.support))
        if patch.lineage:
            out["lineage"] = list(patch.lineage)
    return out


def changed_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a patch run changed (what the store has to write)."""
    return {k: v for k, v in after.items() if before.get(k) != v}


def is_current(payload: Mapping[str, Any]) -> bool:
    """In the default (current) view: not superseded, merged away or a repeat."""
    return not payload.get("retired", False)


__all__ = [
    "Action",
    "ACTIONS",
    "STATEFUL_TYPES",
    "CardView",
    "NewCard",
    "oriented",
    "normalized",
    "rule_decision",
    "patches_for",
    "apply_patches",
    "changed_fields",
    "is_current",
]
