"""The consolidation prompt and its output schema, kept apart from the logic that uses them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Sequence

from memstream.processors.structured import one_of_schema, text_schema

if TYPE_CHECKING:
    from memstream.processors.consolidation.versioning import CardView


CONSOLIDATE_SYSTEM = """You maintain a long-term memory. A new memory card about a subject is compared with
similar older cards about the same subject (each with its date). For each candidate decide:
- keep_both: both are true and worth keeping (different facts, or events that both happened);
- duplicate: the same fact stated again;
- supersede: the same attribute with a newer value (the later card replaces the earlier one, e.g. a move);
- merge: two partial statements of one fact; then write the combined statement in "merged".
Never invent facts. Only the later card can replace the earlier one."""


def consolidate_user(card: CardView, candidates: Sequence[tuple[str, CardView]]) -> str:
    def line(label: str, c: CardView) -> str:
        when = datetime.fromtimestamp(c.order[0], tz=timezone.utc).date().isoformat()
        return f"[{label}] {when} ({c.type}) {c.text}"

    return (
        "New card:\n"
        + line("NEW", card)
        + "\n\nCandidates:\n"
        + "\n".join(line(lab, c) for lab, c in candidates)
        + "\n\nDecide for every candidate."
    )


def consolidate_labels(queue: int, stable_up_to: int | None = None) -> list[str]:
    """The candidates' labels in a consolidation prompt (C1, C2, ...) and, with ``stable_up_to``, the
    labels its schema allows: always C1..C{stable_up_to} (or more for a longer queue), so the schema is
    the same for every call and a provider's prompt cache keeps it."""
    return [f"C{i + 1}" for i in range(max(queue, stable_up_to or 0))]


def consolidate_schema(labels: Sequence[str], actions: Sequence[str]) -> dict:
    """Bounded, enum-constrained: a constrained decoder can only name the labels given (this queue's,
    or a fixed set from :func:`consolidate_labels`; labels with no candidate are ignored)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "decisions": {
                "type": "array",
                "maxItems": len(labels),
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "candidate": one_of_schema(labels, 1)["items"],
                        "action": {"type": "string", "enum": list(actions)},
                        "merged": text_schema(300),
                    },
                    "required": ["candidate", "action", "merged"],
                },
            },
        },
        "required": ["decisions"],
    }
