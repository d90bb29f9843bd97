"""Prompts and output schemas, kept apart from the logic that uses them."""

from __future__ import annotations

from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Sequence

from memstream.schemas import CompressedTurn

if TYPE_CHECKING:
    from .versioning import CardView

CARD_TYPES = ["fact", "event", "preference", "state", "plan", "interaction", "assistant_output"]

EXTRACT_SYSTEM = """You turn a piece of conversation into long-term memory.
Return JSON only, following the schema.
- scenes: one per topic (T1, T2, ... as marked): a one-sentence summary of what happens, the
  participants, scene_triggers (key elements of the scene) and horizon_triggers (future situations
  in which this scene will matter).
- cards: atomic, self-contained statements. The subject is always a name, never a pronoun. Each card
  cites the ids of the turns it comes from in turn_ids (ids shown in square brackets). Copy any
  time expression the card relies on into time_phrase (e.g. "yesterday", "last May").
  entity_triggers: precise names in the card. bridge_triggers: situations where the card becomes
  relevant in another context (e.g. "allergic to seafood" -> "team dinner").
- profiles: stable traits, preferences, relationships and constraints per speaker."""


def topic_key(index: int) -> str:
    return f"T{index + 1}"


def extract_user(topics: Sequence[tuple[str, Sequence[CompressedTurn]]]) -> str:
    """The flush as the LLM reads it: its topic segments, each turn with its id and speaker, and the
    date above the turns of each day: once per day, not a timestamp on every turn (prompt tokens are
    the larger part of an extraction's cost). The cards' times come from the turns' own timestamps;
    the LLM only copies the time phrases."""
    lines = []
    day: date | None = None
    for i, (label, turns) in enumerate(topics):
        lines.append(f"Topic {topic_key(i)} ({label}):")
        for ct in turns:
            t = ct.turn
            if t.event_time.date() != day:
                day = t.event_time.date()
                lines.append(f"{day:%A %Y-%m-%d}:")
            captions = f" (shares image: {'; '.join(t.image_captions)})" if t.image_captions else ""
            lines.append(f"[{t.turn_id}] {t.speaker}: {ct.compressed_text}{captions}")
    return "Conversation:\n" + "\n".join(lines) + "\n\nExtract the memory JSON."


def repair_user(error: str) -> str:
    return f"That output was invalid: {error}\nReturn corrected JSON that follows the schema exactly."


def _strings(max_items: int, max_length: int) -> dict:
    return {"type": "array", "items": {"type": "string", "maxLength": max_length}, "maxItems": max_items}


def _one_of(values: Sequence[str], max_items: int) -> dict:
    return {"type": "array", "items": {"type": "string", "enum": list(values)}, "minItems": 1, "maxItems": max_items}


def _text(max_length: int, min_length: int = 0) -> dict:
    return {"type": "string", "maxLength": max_length, **({"minLength": min_length} if min_length else {})}


STABLE_MAX_SCENES = 16  # a stable schema's bound on scenes (a flush's topics; more are left unused)


def extract_schema(turn_ids: Sequence[str] | None, topics: int, max_cards: int = 24) -> dict:
    """The extraction output schema. Its bounds keep a constrained decoder's output finite, so a
    small model cannot run past its token limit (truncated JSON) listing ever more items.

    With ``turn_ids``, provenance and topics are enums of this flush's turn ids and topic keys: a
    constrained decoder cannot cite a turn that is not there, but the schema differs per flush.
    Without (``None``), the schema is the same for every call: a provider that caches the schema with
    the prompt's prefix (OpenAI puts it before the system message) reuses the fixed part of every
    extraction; ids not in the flush are dropped when the output is read."""
    if turn_ids is None:
        topic: dict = _text(8, 1)
        scenes_max = STABLE_MAX_SCENES
        cited: dict = {**_strings(4, 128), "minItems": 1}  # ids are at most 128 characters (schemas/base.py)
    else:
        topic_keys = [topic_key(i) for i in range(topics)]
        topic = {"type": "string", "enum": topic_keys}
        scenes_max = len(topic_keys)
        cited = _one_of(turn_ids, 4)
    return {
        "type": "object",
        "properties": {
            "scenes": {
                "type": "array",
                "minItems": 1,
                "maxItems": scenes_max,
                "items": {
                    "type": "object",
                    "properties": {
                        "topic": topic,
                        "summary": _text(240, 12),
                        "participants": _strings(6, 60),
                        "scene_triggers": _strings(5, 60),
                        "horizon_triggers": _strings(3, 80),
                    },
                    "required": ["topic", "summary", "participants", "scene_triggers", "horizon_triggers"],
                },
            },
            "cards": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_cards,
                "items": {
                    "type": "object",
                    "properties": {
                        "subject": _text(60, 1),
                        "type": {"type": "string", "enum": CARD_TYPES},
                        "content": _text(240, 8),
                        "time_phrase": _text(40),
                        "turn_ids": cited,
                        "atomic": {"type": "boolean"},
                        "entity_triggers": _strings(5, 60),
                        "bridge_triggers": _strings(3, 80),
                    },
                    "required": ["subject", "type", "content", "turn_ids", "entity_triggers", "bridge_triggers"],
                },
            },
            "profiles": {
                "type": "array",
                "maxItems": 4,
                "items": {
                    "type": "object",
                    "properties": {
                        "speaker": _text(60, 1),
                        "traits": _strings(4, 80),
                        "preferences": _strings(4, 80),
                        "relationships": _strings(4, 80),
                        "constraints": _strings(4, 80),
                    },
                    "required": ["speaker"],
                },
            },
        },
        "required": ["scenes", "cards", "profiles"],
    }


ANSWER_SYSTEM = """You answer a question about past conversations using only the numbered evidence.
Each evidence line has an id like [E1], a date and a statement. Answer briefly and cite the ids you
used in square brackets. If the evidence does not contain the answer, say you do not know."""


def answer_user(question: str, evidence_lines: Sequence[str], operation: str, profile_text: str | None) -> str:
    profile = f"\nSpeaker profile (background only):\n{profile_text}\n" if profile_text else ""
    return "Evidence:\n" + "\n".join(evidence_lines) + f"\n{profile}\nQuestion ({operation}): {question}\nAnswer:"


# --- query planner ------------------------------------------------------------------------------

PLAN_PARTICIPANTS = ["user", "assistant", "both", "ambiguous"]
PLAN_OPERATIONS = ["lookup", "aggregate", "temporal_select", "sort", "compare"]

PLAN_SYSTEM = """You plan how to search a long conversation memory for a question. Do not answer it.
Return JSON only, following the schema.
- entities: the people, places and things named in the question, copied as written. No guesses.
- participants: whose words hold the evidence: "user" (the asker: I, my, me), "assistant" (you,
  your; also what you said to the asker: "the trail you recommended to me"), "both" (we, us, our,
  you and I), "ambiguous" when unclear.
- time: the period the question restricts the search to, copied from the question (e.g.
  "last week", "in May 2023") or an ISO date, month or year (2023-05-07, 2023-05, 2022).
  Empty when the question asks for a time ("When did ...?") or names none. Do not compute dates.
- operation: lookup (one fact), aggregate (count, total, list all), temporal_select (when, first,
  last, before, after), sort (order, earliest, latest), compare (differences between things).
- distributed: true when the evidence is likely spread over several sessions (lists, counts,
  "both", comparisons, changes over time).
- fidelity: true when the exact wording matters (what exactly was said or written, quotes, code).
- rewrites: only when distributed, at most two sub-questions that each find part of the evidence,
  e.g. "What do Ann and Bo both like?" -> "What does Ann like?", "What does Bo like?".
  Use only words from the question: never put a guessed answer into a rewrite."""


def plan_user(question: str) -> str:
    """The question alone: no date, so the model has nothing to do date arithmetic with; the code
    resolves the time phrase it copies against the question's own date."""
    return f"Question: {question}\n\nReturn the plan JSON."


def plan_schema(max_entities: int = 6, max_rewrites: int = 2) -> dict:
    """The planner output schema; every string and list is bounded so a constrained decoder always
    closes the JSON well within the planner's small token limit."""
    return {
        "type": "object",
        "properties": {
            "entities": _strings(max_entities, 60),
            "participants": {"type": "string", "enum": PLAN_PARTICIPANTS},
            "time": _text(60),
            "operation": {"type": "string", "enum": PLAN_OPERATIONS},
            "distributed": {"type": "boolean"},
            "fidelity": {"type": "boolean"},
            "rewrites": _strings(max_rewrites, 160),
        },
        "required": ["entities", "participants", "time", "operation", "distributed", "fidelity", "rewrites"],
        "additionalProperties": False,
    }


RESEARCH_SYSTEM = """You help search a long conversation memory in rounds. Do not answer the question.
You see the question and the evidence found so far. Return JSON only, following the schema.
- missing: what the question needs that the evidence does not give yet, in a few words ("" if nothing).
- queries: at most three short search queries for what is missing: names, places, things and times
  the evidence mentions that lead to the rest. Empty when nothing is missing.
  Use only words from the question and the evidence: never put a guessed answer into a query."""


def research_user(question: str, evidence_lines: Sequence[str]) -> str:
    found = "\n".join(evidence_lines) or "(nothing yet)"
    return f"Question: {question}\n\nEvidence found so far:\n{found}\n\nReturn the JSON."


def research_schema(max_queries: int = 3) -> dict:
    """The reflection output; bounded like the planner's so a constrained decoder closes the JSON."""
    return {
        "type": "object",
        "properties": {"missing": _text(160), "queries": _strings(max_queries, 120)},
        "required": ["missing", "queries"],
        "additionalProperties": False,
    }


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
                        "candidate": _one_of(labels, 1)["items"],
                        "action": {"type": "string", "enum": list(actions)},
                        "merged": _text(300),
                    },
                    "required": ["candidate", "action", "merged"],
                },
            },
        },
        "required": ["decisions"],
    }
